"""V building blocks: the slots of one microbatch's ops on every stage, repeated every 6 slots.

The construction follows the building-block view of "Pipeline Parallelism with Controllable Memory"
(Qi et al., 2024). Time is cut into unit slots (one chunk's F, B or W each); every microbatch repeats the
same block, shifted by 6 slots (the six ops one microbatch costs a rank: F, B, W of two chunks). A block
gives each rank the slot of its chunk-0 forward (F0), chunk-1 forward (F1) and the two input-grad passes
(B1, B0); the spacing between neighbouring ranks along each of the four chains sets how long activations
live, hence the memory: tight chains (every spacing 1) give about p/3 microbatches (v-min), doubled F0 and
B1 spacings about p/2 (v-half), wider ones up to p (zbv).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

PERIOD = 6


@dataclass(frozen=True)
class Block:
    """Spacings of the four chains (F0 down, F1 up, B1 down, B0 up) and the gaps at the two turns."""

    name: str
    f0: int
    f1: int
    b1: int
    b0: int
    f_turn: int = 1
    b_turn: int = 1
    #: the squeeze that does best for this block (tried alone on large instances): "derived" or "explicit"
    squeeze: str = "derived"


#: the named blocks (tests/algorithms/v_orders.py sweeps more); `offsets` shifts the backward phase until
#: no two ops of a rank share a slot mod 6
MIN = Block("min", 1, 1, 1, 1)
HALF = Block("half", 2, 1, 2, 1, 1, 2)
ZB = Block("zb", 4, 2, 4, 2, 3, 3, "explicit")
ZB_TIGHT = Block("zb-tight", 1, 1, 4, 2, squeeze="explicit")


@cache
def family() -> tuple[Block, ...]:
    """Every spacing the block family admits, for the cost-aware search (the named blocks were chosen at
    unit costs): 1 to 4 on the outgoing chains (F0, B1), 1 or 2 on the returning ones, turns 1 to 3."""
    blocks = []
    for f0 in range(1, 5):
        for b1 in range(1, 5):
            for back in (1, 2):
                for f_turn in (1, 2, 3):
                    for b_turn in (1, 2, 3):
                        name = f"s{f0}{back}{b1}{back}t{f_turn}{b_turn}"
                        blocks.append(Block(name, f0, back, b1, back, f_turn, b_turn))
    return tuple(blocks)


def offsets(p: int, block: Block) -> tuple[list[int], list[int]]:
    """Slot of F and of B of microbatch 0 on every stage (V placement: stage i and 2p-1-i on rank i).

    Two ops of one rank must not share a slot modulo 6. The first of a few shifts of the backward phase
    (and widenings of the backward turn) that avoids every collision is taken; failing that, each op slides
    to the next slot its rank has free modulo 6, which always succeeds but bends the chains."""
    fo, bo = _offsets(p, block)
    return list(fo), list(bo)


@lru_cache(maxsize=512)
def _offsets(p: int, block: Block) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = 2 * p
    fo, bo = _chains(p, block, 0, 0, slide=False)  # a shift moves every B by delta, and B0's by extra more
    f_mods = [(fo[i] % PERIOD, fo[n - 1 - i] % PERIOD) for i in range(p)]
    for extra in range(3):
        for delta in range(PERIOD):
            if all(
                len({a, b, (bo[i] + delta + extra) % PERIOD, (bo[n - 1 - i] + delta) % PERIOD}) == 4
                for i, (a, b) in enumerate(f_mods)
            ):
                return tuple(fo), tuple([*(t + delta + extra for t in bo[:p]), *(t + delta for t in bo[p:])])
    fo, bo = _chains(p, block, 0, 0, slide=True)
    return tuple(fo), tuple(bo)


def _chains(p: int, block: Block, delta: int, extra: int, slide: bool) -> tuple[list[int], list[int]]:
    n = 2 * p
    fo, bo = [0] * n, [0] * n
    used: list[set[int]] = [set() for _ in range(p)]

    def put(rank: int, t: int) -> int:
        if slide:
            while t % PERIOD in used[rank]:
                t += 1
            used[rank].add(t % PERIOD)
        return t

    fo[0] = put(0, 0)
    for i in range(1, p):
        fo[i] = put(i, fo[i - 1] + block.f0)
    fo[p] = put(p - 1, fo[p - 1] + block.f_turn)
    for s in range(p + 1, n):
        fo[s] = put(n - 1 - s, fo[s - 1] + block.f1)
    bo[n - 1] = put(0, fo[n - 1] + 1 + delta)
    for s in range(n - 2, p - 1, -1):
        bo[s] = put(n - 1 - s, bo[s + 1] + block.b1)
    bo[p - 1] = put(p - 1, bo[p] + block.b_turn + extra)
    for s in range(p - 2, -1, -1):
        bo[s] = put(s, bo[s + 1] + block.b0)
    return fo, bo


@lru_cache(maxsize=1024)
def estimated_peak(p: int, block: Block) -> int:
    """Live chunks of the block's steady state from the activations' lifespans (F to the end of its W,
    taken right after B), within one of the repeated block's peak; cheap enough to rank a whole catalog."""
    fo, bo = _offsets(p, block)
    n = 2 * p
    return max(
        -(-(bo[r] - fo[r] + 2) // PERIOD) - (-(bo[n - 1 - r] - fo[n - 1 - r] + 2) // PERIOD) for r in range(p)
    )
