"""Pick the best candidate order after giving the leading ones the W post-pass and a local search.

`portfolio.pick` chooses among finished orders; here the few best of them also get their W's re-placed
under the cost model (`w_pass`: each variant keeps every rank's peak, and the gap filling never delays a
node), then the best few of all these get the critical-chain local search (`local_search`, within the
cap), and the best of everything wins. The originals stay in the running, so the result is never worse
than `pick`'s under the same objective. How many count as the best few is part of the search effort
(`effort.refine_top`). The candidates are scored in order, and the first one `bounds.Proof` shows no order
within the cap can beat ends the search: it is what the full search would pick (later candidates and
refinements lose ties), so nothing is refined.

Within `shared_refinements` the W post-pass of an order object already refined (same placement, m, costs and
caps) is not run again: zero-bubble-heuristic refines the very greedy orders the zero-bubble search inside it
refined a moment before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.effort import refine_top
from primuspp.algorithms.search import bounds, local_search, score_memo, w_pass
from primuspp.algorithms.search.portfolio import Score, pick
from primuspp.schedule.array_order import rank_lengths
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.placement import Placement

#: within `shared_refinements`: (step, placement, (m,) costs, (caps,) id(order)) -> (its result, the order)
_REFINED = score_memo.BlockMemo("refine_shared")


def shared_refinements():
    """Within the block, the W post-pass (`w_pass.rank_peaks`, `variants`, `fill_gaps`) of an order object
    seen before with the same placement, m, costs and caps returns the first result again. Orders are told
    apart by identity (the kept entries hold them, so no identity is reused while the block lasts): equal
    orders of other objects are refined again. Dropped on exit."""
    return _REFINED.block()


def _once(key: tuple, order: ComputeOrder, run: Callable, *args: object) -> object:
    """`run(*args)`, or within `shared_refinements` its earlier result for `key` and this order object."""
    return _REFINED.once((*key, id(order)), lambda: (run(*args), order))[0]  # the order kept: see above


Candidates = Sequence[tuple[str, ComputeOrder] | tuple[str, ComputeOrder, Score]]


def pick_refined(
    placement: Placement,
    m: int,
    candidates: Candidates,
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
    top: int | None = None,
) -> tuple[str, ComputeOrder, Score]:
    """`portfolio.pick` over `candidates` plus the W-pass variants of the `top` best of them; a variant is
    named `CANDIDATE+VARIANT` (e.g. `zb/explicit+w-fit`). Nothing fits `cap`: `pick` refuses."""
    pool = refined_pool(placement, m, candidates, costs, cap, objective, top)
    return pick(placement, m, candidates if pool is None else pool, costs, cap, objective)


def refined_pool(
    placement: Placement,
    m: int,
    candidates: Candidates,
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
    top: int | None = None,
) -> list[tuple[str, ComputeOrder, Score]] | None:
    """The candidates within `cap`, scored, followed by their refined variants (`pick_refined` picks from
    this list); None when no candidate fits `cap`. The first order `bounds.Proof` shows unbeatable, an
    original or a refinement, ends the list: anything after it would lose to it or tie it later."""
    if top is None:  # the search effort's width (`effort.refine_top`, reported with the branch)
        top = refine_top(sum(rank_lengths(candidates[0][1])) if candidates else 0)
    proof = bounds.Proof(placement, m, costs, cap)
    pool: list[tuple[str, ComputeOrder, Score]] = []

    def fits(sc: Score) -> bool:
        return cap is None or sc.peak <= cap + 1e-9

    def leaders(items: list) -> Iterator[tuple[str, ComputeOrder, Score]]:
        """The best `top` of `items` within the cap, one per (makespan, span, peak): the same figures are
        most likely the same order, refined the same way."""
        seen: set[tuple[float, float, float]] = set()
        for i in sorted(range(len(items)), key=lambda i: (items[i][2].key(objective), i)):
            sc = items[i][2]
            if len(seen) == top:
                return
            if fits(sc) and (sc.makespan, sc.max_span, sc.peak) not in seen:
                seen.add((sc.makespan, sc.max_span, sc.peak))
                yield items[i]

    def add(name: str, order: ComputeOrder, sc: Score | None = None) -> bool:
        """Append to the pool; whether it ends the search."""
        sc = sc or score_memo.score(placement, m, order, costs)
        pool.append((name, order, sc))
        return proof.unbeatable(order, sc)

    for cand in candidates:
        sc = cand[2] if len(cand) == 3 else score_memo.score(placement, m, cand[1], costs)
        if fits(sc) and add(cand[0], cand[1], sc):
            return pool
    if not pool:
        return None
    for name, order, _ in list(leaders(pool)):
        caps = tuple(_once(("peaks", placement, costs), order, w_pass.rank_peaks, placement, order, costs))
        mine: list[tuple[str, ComputeOrder, Score]] = []
        for vname, new in _once(
            ("variants", placement, m, costs, caps), order, w_pass.variants, placement, m, order, costs, caps
        ):
            mine.append((f"{name}+{vname}", new, score_memo.score(placement, m, new, costs)))
        # the gap filling (never slower; a timing per round) on the original and the best variant
        lead = min(mine, key=lambda c: c[2].key(objective), default=None)
        for vname, new in [(name, order)] + ([lead[:2]] if lead else []):
            filled = _once(
                ("gaps", placement, m, costs, caps), new, w_pass.fill_gaps, placement, m, new, costs, caps
            )
            if filled is not None:
                mine.append((f"{vname}+gaps", filled, score_memo.score(placement, m, filled, costs)))
        if any(add(*c) for c in mine):
            return pool
    for name, order, sc in list(leaders(pool)):
        better = local_search.improve(placement, m, order, costs, cap, objective, sc)
        if better is not None and add(f"{name}+swaps", *better):
            return pool
    return pool
