"""More V building blocks for the cost-aware search: every spacing the block family admits, not only the
named ones.

`vshape` builds a V schedule from a block (the spacings of the four chains and the two turns), squeezed
under a memory cap; which block is best depends on the costs (a wider spacing gives a transfer time to
arrive, a tighter one saves memory). The named blocks of `v_family` were chosen at unit costs. Here the
family is enumerated — chain spacings 1 to 4 on the outgoing chains (F0, B1), 1 or 2 on the returning ones,
turns 1 to 3 — the blocks whose estimated peak fits the cap are squeezed, and the candidates go to the
cost model (`refine.pick_refined`) like the others.
"""

from __future__ import annotations

from functools import cache

from primuspp.algorithms import vshape
from primuspp.algorithms.base import ComputeOrder


@cache
def family() -> tuple[vshape.Block, ...]:
    blocks = []
    for f0 in range(1, 5):
        for b1 in range(1, 5):
            for back in (1, 2):
                for f_turn in (1, 2, 3):
                    for b_turn in (1, 2, 3):
                        name = f"s{f0}{back}{b1}{back}t{f_turn}{b_turn}"
                        blocks.append(vshape.Block(name, f0, back, b1, back, f_turn, b_turn))
    return tuple(blocks)


#: blocks squeezed per search: the widest that fit (by estimated peak), then the tighter spacings
LIMIT = 12


def candidates(p: int, m: int, chunks: int, limit: int = LIMIT) -> list[tuple[str, ComputeOrder]]:
    """Squeezed orders of up to `limit` of the family's blocks that fit `chunks` live chunk activations per
    rank (the widest first), each with the derived squeeze."""
    out: list[tuple[str, ComputeOrder]] = []
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    ranked = sorted(
        ((vshape.estimated_peak(p, b), i) for i, b in enumerate(family())), key=lambda x: (-x[0], x[1])
    )
    for estimate, i in ranked:
        if len(seen) == limit:
            break
        if estimate > chunks + 1:
            continue
        block = family()[i]
        offs = vshape.offsets(p, block)
        sig = (tuple(offs[0]), tuple(offs[1]))
        if sig in seen:  # different spacings, same slots (the shifts resolved them alike)
            continue
        seen.add(sig)
        _, orders = vshape.squeezed_orders(p, m, block, chunks, both=False)
        out.extend((f"family/{name}", order) for name, order in orders)
    return out
