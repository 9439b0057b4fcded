"""Building blocks for v-auto with two spacing regimes and free turns, ranked by the cost model.

The named blocks (`v_family`) and the family of `v_blocks` space every chain uniformly. The controllable-
memory construction allows more: the outgoing chains (F0 down, B1 down) may use one spacing `k0` over the
first `split` rank steps and a tighter `k1 <= k0` over the rest (the activations of the first ranks then
live longer than those of the last, which the first ranks can afford: they hold fewer microbatches of the
returning chunk), and each of the three turns (F0 -> F1 on the last rank, F1 -> B1 on the first, B1 -> B0 on
the last) may take 1 to 5 slots. The returning chains (F1 up, B0 up) keep spacing 1. A block is valid when
no two of a rank's four ops share a slot modulo 6.

That space has about 60 p distinct blocks (480 at p = 8). Each is repeated over max(m, 2p) microbatches, so
that even a small m gets a full warm-up; each rank's warm-up is then front-loaded (`front_load`) and the
order cut back to m microbatches. The orders within the cap are timed under the real costs, comm included
(on their first 2p microbatches first when m is larger), and the best `KEEP`, with their cool-down rebuilt
(`tight_tail`), join the other candidates of the cost model's pick (`refine.pick_refined`). Building the
space costs about one node per block and repeated op: under effort="auto" it is thinned, then skipped,
beyond `SPACE_WORK` nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from itertools import accumulate, pairwise

import numpy as np

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search.portfolio import score, timed_score
from primuspp.algorithms.v import auto_grid as g
from primuspp.algorithms.v.blocks import PERIOD
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.errors import PrimusppError
from primuspp.schedule.costs import StageCosts, unit_costs
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import v_shape
from primuspp.schedule.timing import node_times

#: spacings of the outgoing chains and gaps at the turns (slots)
SPACINGS = (1, 2, 3, 4, 5)
TURNS = (1, 2, 3, 4, 5)


def chains(
    p: int, k0: int, k1: int, split: int, turns: tuple[int, int, int]
) -> tuple[list[int], list[int]] | None:
    """Slot of F and of B of microbatch 0 on every stage (stage s < p on rank s, stage 2p-1-r on rank r), or
    None when two ops of a rank collide modulo 6. `split` rank steps use spacing k0, the rest k1."""
    n = 2 * p
    fo, bo = [0] * n, [0] * n
    for i in range(1, p):
        fo[i] = fo[i - 1] + (k0 if i - 1 < split else k1)
    fo[p] = fo[p - 1] + turns[0]
    for s in range(p + 1, n):
        fo[s] = fo[s - 1] + 1
    bo[n - 1] = fo[n - 1] + turns[1]
    for r in range(1, p):  # B1 down: stage n-1-r on rank r
        bo[n - 1 - r] = bo[n - r] + (k0 if r - 1 < split else k1)
    bo[p - 1] = bo[p] + turns[2]
    for s in range(p - 2, -1, -1):
        bo[s] = bo[s + 1] + 1
    for r in range(p):
        if len({fo[r] % PERIOD, fo[n - 1 - r] % PERIOD, bo[r] % PERIOD, bo[n - 1 - r] % PERIOD}) < 4:
            return None
    return fo, bo


def space(p: int, thin: bool = False) -> Iterator[tuple[str, list[int], list[int]]]:
    """Every valid block of the space, distinct by its chains: (name, fo, bo). `thin`: the regime switch
    only after 1, p/2 or p-1 rank steps (a third of the blocks on large p)."""
    seen: set[tuple[int, ...]] = set()
    splits = sorted({1, p // 2, p - 1}) if thin else list(range(1, p))
    for k0 in SPACINGS:
        for k1 in SPACINGS:
            if k1 > k0:
                continue
            for split in splits if k1 < k0 else (p - 1,):
                for t0 in TURNS:
                    for t1 in TURNS:
                        for t2 in TURNS:
                            got = chains(p, k0, k1, split, (t0, t1, t2))
                            if got is None:
                                continue
                            sig = (*got[0], *got[1])
                            if sig in seen:
                                continue
                            seen.add(sig)
                            yield f"k{k0}{k1}x{split}t{t0}{t1}{t2}", got[0], got[1]


def front_load(ops: np.ndarray, lens: np.ndarray, p: int, chunks: int, m: int) -> np.ndarray | None:
    """The ranks' op ids (`v_grid.SlotSchedule`'s, rank after rank, `lens` each) with each rank's warm-up
    (everything before its first chunk-0 B) laid out again by the construction's rule
    (`auto_grid.warm_layout`, holding at most min(r+1, chunks/2) chunk-1 activations before the first B and
    `chunks` in all), so that the pipeline fills as fast as the memory allows. The warm-up's ops stay the
    same, so only the timing changes; None where a rank's warm-up has no layout (a W whose B is not in it)."""
    code = 2 * (ops % 3) + (ops // 3 % (2 * p) >= p)
    starts = np.concatenate(([0], np.cumsum(lens)))
    b0 = np.append(np.flatnonzero(code == g.B0), len(ops))
    firsts = np.minimum(b0[np.searchsorted(b0, starts[:-1])], starts[1:]).tolist()
    out = ops.copy()
    for r, (a, k) in enumerate(zip(starts[:-1].tolist(), firsts, strict=True)):
        codes = code[a:k]
        want1 = min(r + 1, chunks // 2, m)
        have = tuple(np.bincount(codes, minlength=g.SLOTS).tolist())
        perm = _warm_perm(r, p, have, min(chunks - want1, m), want1)
        if perm is None:
            return None
        out[a:k] = ops[a:k][np.argsort(codes, kind="stable")[perm]]
    return out


@lru_cache(maxsize=4096)
def _warm_perm(r: int, p: int, have: tuple[int, ...], most_f0: int, most_f1: int) -> np.ndarray | None:
    """`auto_grid.warm_layout` as positions in the warm-up's ops grouped by code (None: no layout)."""
    layout = g.warm_layout(r, p, list(have), most_f0, most_f1, strict=False)
    if layout is None:
        return None
    start = [sum(have[:code]) for code in range(g.SLOTS)]
    perm = []
    for code in layout:
        if code >= 0:
            perm.append(start[code])
            start[code] += 1
    return np.array(perm, dtype=np.intp)


def warm_candidates(p: int, m: int, chunks: int, blocks) -> list[tuple[str, ComputeOrder]]:
    """Each (name, fo, bo) block repeated over max(m, 2p) microbatches (a full warm-up even when m is
    small), its warm-up front-loaded, cut back to m microbatches; only orders within `chunks` live chunk
    activations, each distinct repetition once."""
    big = max(m, 2 * p)
    n = 2 * p
    nodes = _nodes(p, big)
    live = np.array([1, 0, -1])  # per kind: a forward keeps its activation, a W frees it
    out = []
    seen: set[bytes] = set()
    for name, fo, bo in blocks:
        sched = SlotSchedule(p, big, fo, bo, tighten=False)  # the order does not need the tightening
        ops = sched.occ[sched.occ >= 0]  # rank after rank, each in slot order
        lens = (sched.occ >= 0).sum(axis=1)
        key = ops.tobytes() + lens.tobytes()
        if key in seen:
            continue
        seen.add(key)
        loaded = front_load(ops, lens, p, min(sched.peak(), n), big)
        ops = ops if loaded is None else loaded
        keep = ops < 3 * n * m  # cut back to m microbatches
        ops, lens = ops[keep], np.bincount(np.repeat(np.arange(p), lens)[keep], minlength=p)
        held = np.cumsum(live[ops % 3])
        held -= np.repeat(np.concatenate(([0], held[np.cumsum(lens)[:-1] - 1])), lens)
        if max(int(held.max(initial=0)), 0) <= chunks:
            flat, cuts = [nodes[op] for op in ops.tolist()], [0, *accumulate(lens.tolist())]
            out.append((f"warm/{name}", [flat[a:b] for a, b in pairwise(cuts)]))
    return out


def truncate(order: ComputeOrder, m: int) -> ComputeOrder:
    """The order without the nodes of microbatches >= m (a longer repetition cut back to m)."""
    return [[nd for nd in seq if nd.microbatch < m] for seq in order]


def _nodes(p: int, m: int) -> list[Node]:
    """The node of every op id of `v_grid.SlotSchedule` ((mb * stages + stage) * 3 + kind)."""
    n = 2 * p
    kinds = (NodeKind.F, NodeKind.B, NodeKind.W)
    return [Node(kinds[op % 3], op // 3 // n, op // 3 % n) for op in range(3 * n * m)]


def tight_tail(order: ComputeOrder, p: int, m: int) -> ComputeOrder | None:
    """The same order with each rank's cool-down rebuilt on unit slots by the construction's rule
    (`auto_grid.cool_down`): the last chunk-0 B's (about half the peak) and the last chunk-1 B's (at most
    rank + 1) are set two slots apart so that they follow each other down and up the pipeline without
    waiting, and the W's held back fill the free slots after them. None when that does not give a valid
    order."""
    placement = v_shape(p)
    try:
        timing = node_times(placement, m, order, unit_costs(placement))
    except PrimusppError:
        return None
    width = max(round(seq[-1]) for seq in timing.starts if seq) + 2 * p + 2  # room for the formula's B's
    grid = [[g.EMPTY] * width for _ in range(p)]
    for row, seq, starts in zip(grid, order, timing.starts, strict=True):
        for nd, t in zip(seq, starts, strict=True):
            row[round(t)] = g.code_of(nd, p)
    try:
        grid = g.cool_down(grid, m, tight=False)
        if sum(code >= 0 for row in grid for code in row) != sum(map(len, order)):
            return None  # a B laid on another op
        return g.to_order(g.pair_wgrads(grid))
    except g._Invalid:
        return None


#: blocks of the space kept (by their timed warm order) for the cool-down rebuild and the final pick
KEEP = 4
#: effort="auto": nodes the block space may build (blocks x 6p * max(m, 2p)); beyond, the thinned space,
#: and beyond that again none (about 2 CPU s at this size; p=16, m=16 builds 2.9 million)
SPACE_WORK = 3_000_000
#: with m > 2p, blocks timed in full after the ranking on 2p microbatches: PRE * KEEP
PRE = 4


def candidates(
    p: int,
    m: int,
    chunks: int,
    costs: StageCosts,
    keep: int = KEEP,
    effort: str = "auto",
    report: dict | None = None,
) -> list[tuple[str, ComputeOrder]]:
    """The `keep` best orders of the whole block space (repeated over max(m, 2p), warm-up front-loaded, cut
    back to m) that fit `chunks` live chunk activations, by the cost model (longest rank span, step time,
    peak), and the same `keep` with their cool-down rebuilt (`tight_tail`). With effort="auto" the space is
    thinned, then skipped, beyond `SPACE_WORK` (stated in `report["block space"]`); "full" takes it whole."""
    placement = v_shape(p)
    fractions = costs.fractions()
    units_cap = chunks / 2 + 1e-9
    nodes = 6 * p * max(m, 2 * p)
    blocks = list(space(p))
    how = "whole"
    if effort != "full" and len(blocks) * nodes > SPACE_WORK:
        blocks, how = list(space(p, thin=True)), "thinned"
        if len(blocks) * nodes > SPACE_WORK:
            blocks, how = [], "skipped"
    if report is not None:
        report["block space"] = f"{how}: {len(blocks)} blocks of {nodes} nodes (limit {SPACE_WORK:,} nodes)"
    if not blocks:
        return []
    warm = warm_candidates(p, m, chunks, blocks)
    short = 2 * p
    if m > short:  # rank on the first 2p microbatches (warm-up and cool-down differ most), then time in full
        pre = []
        for i, (_, order) in enumerate(warm):
            try:
                pre.append((timed_score(placement, short, truncate(order, short), costs, 0.0).key("span"), i))
            except PrimusppError:
                continue
        pre.sort()
        warm = [warm[i] for _, i in pre[: PRE * keep]]
    scored = []
    for i, (name, order) in enumerate(warm):
        try:
            key = timed_score(placement, m, order, costs, 0.0).key("span")
        except PrimusppError:  # the front-loaded warm-up waits on itself: not a schedule
            continue
        scored.append((key, i, name, order))
    scored.sort(key=lambda x: (x[0], x[1]))
    out = []
    for _, _, name, order in scored:
        if len(out) == keep:
            break
        if score(placement, m, order, costs, fractions).peak <= units_cap:
            out.append((name, order))
    for name, order in list(out):
        tail = tight_tail(order, p, m)
        if tail is None:
            continue
        try:
            sc = score(placement, m, tail, costs, fractions)
        except PrimusppError:
            continue
        if sc.peak <= units_cap:
            out.append((f"{name}+tail", tail))
    return out
