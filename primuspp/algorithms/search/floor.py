"""A floor under a cost-aware generator: its result is never behind a timed construction on either figure.

The timed constructions (`zbv_timed`, `zb_timed`) place every node by the clock of the cost model, comm
included, and each names its floor: the variant it would pick by its own clock. `with_floor` wraps a
generator so that, when the generator's search was full (`report["effort"]`), its result competes with the
timed orders, their W post-pass and local search (`refine.refined_pool`) and a local search from the floor
that keeps only swaps improving one figure without worsening the other (`local_search.improve_both`), all
within the generator's memory budget. The winner is picked by the generator's objective among the
candidates whose longest span and step time are both at most the floor's, so a search that shortens one
figure never pays for it with the other beyond the floor; the generator's own result comes first and wins
exact ties (at F = B = W without comm the tables do not change).
"""

from __future__ import annotations

from collections.abc import Callable

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.search import local_search, score_memo
from primuspp.algorithms.search.bounds import Proof
from primuspp.algorithms.search.bounds import kept as bounds_at_hand
from primuspp.algorithms.search.portfolio import Score, lower_bounds, pick
from primuspp.algorithms.search.refine import refined_pool
from primuspp.errors import ValidationError
from primuspp.schedule.array_order import copied
from primuspp.schedule.costs import CostModel, StageCosts
from primuspp.schedule.placement import Placement

#: how many of the best timed orders get the W post-pass and the local search (the floor gets its own)
TOP = 1

#: results kept per wrapped generator (same request, same table: zero-bubble-heuristic's guard is the
#: registered zero-bubble, which a sweep has usually just built)
MEMO = 8

#: every wrapped generator's memo, so that `forget()` can empty them all
_MEMOS: list[dict] = []


def forget() -> None:
    """Empty every floored generator's memo: benchmarks call it before each timed run (a memo hit would
    time a dictionary lookup, not the generator)."""
    for memo in _MEMOS:
        memo.clear()
    score_memo.forget()


Construct = Callable[[int, int, StageCosts, float], tuple[list[tuple[str, ComputeOrder]], int]]


def not_worse(sc: Score, floor: Score) -> bool:
    """Neither the longest span nor the step time above the floor's (relative tolerance 1e-9)."""
    tol = 1e-9 * max(1.0, floor.makespan)
    return sc.max_span <= floor.max_span + tol and sc.makespan <= floor.makespan + tol


def with_floor(
    inner: Callable[[GenerationRequest], ComputeOrder],
    placement: Callable[[int], Placement],
    construct: Construct,
    budget: Callable[[int, dict], float],
    objective: str = "span",
    planning: Callable[[GenerationRequest], CostModel] = lambda req: req.costs,
    guards: Callable[[GenerationRequest], list[tuple[str, ComputeOrder]]] | None = None,
) -> Callable[[GenerationRequest], ComputeOrder]:
    """`inner` with the floor of `construct` (see the module docstring) at `budget(p, params)` activation
    per rank (or the inner result's peak when that is higher: a budget the generator raised). `guards`:
    orders the generator promises to match in its objective (zero-bubble-heuristic: ZB-H1's and 1F1B's
    step time); they join the candidates, and when no candidate within the floor matches the best guard
    that fits the cap, the floor is dropped (the objective alone picks)."""
    memo: dict[tuple, tuple[ComputeOrder, dict]] = {}
    _MEMOS.append(memo)

    def generate(req: GenerationRequest) -> ComputeOrder:
        key = _key(req)
        if key is not None and key in memo:
            order, report = memo[key]
            req.report.update(report)
            return copied(order)
        before = dict(req.report)
        order = search(req)
        if key is not None:
            if len(memo) >= MEMO:
                memo.pop(next(iter(memo)))
            said = {k: v for k, v in req.report.items() if before.get(k) != v}
            memo[key] = (copied(order), said)
        return order

    def search(req: GenerationRequest) -> ComputeOrder:
        order = inner(req)
        if req.params.get("offload") or not str(req.report.get("effort", "")).startswith("full"):
            return order
        p, m = req.pp, req.micro_batches
        place = placement(p)
        costs = planning(req).for_placement(place)
        mine = score_memo.score(place, m, order, costs)
        cap = max(budget(p, req.params), mine.peak)
        if (
            "candidate" in req.report
            and bounds_at_hand(place, m, costs)
            and Proof(place, m, costs, cap).unbeatable(order, mine)
        ):
            return order  # the Proof below, asked first where its bounds are at hand: the same result
        span_lb, step_lb = lower_bounds(place, order, costs)
        tol = 1e-9 * max(1.0, step_lb)
        if mine.max_span <= span_lb + tol and mine.makespan <= step_lb + tol:
            return order  # no order beats it on either figure (F = B = W zbv, for one)
        if Proof(place, m, costs, cap).unbeatable(order, mine):
            # no order within the cap has a smaller key (F = B = W ZB-H1, for one): the search below would
            # keep the generator's own order, first among equals
            req.report["candidate"] = req.report.get("candidate", "own")
            return order
        timed, floor = construct(p, m, costs, budget(p, req.params))
        if not timed:
            return order
        own = (req.report.get("candidate", "own"), order, mine)
        guarded = []
        for gname, gorder in guards(req) if guards is not None else ():
            sc = score_memo.score(place, m, gorder, costs)
            if sc.peak <= cap + 1e-9:
                guarded.append((gname, gorder, sc))
        scored = []
        for name, o in timed:
            try:
                sc = score_memo.score(place, m, o, costs)
            except ValidationError:  # a construction that cannot happen; never let it fail a generator
                continue
            if sc.peak <= cap + 1e-9:
                scored.append((name, o, sc))
        pool = [own, *guarded, *scored]
        base = next((c for c in scored if floor >= 0 and c[1] is timed[floor][1]), None)
        if base is not None:  # None: the floor is over the cap (B keeping more than F saved)
            kept = [c for c in pool if not_worse(c[2], base[2])]
            if pick(place, m, kept, costs, cap, objective)[1] is not order:
                # the generator's order is behind the floor or a timed one: refine the timed ones too,
                # and search from the floor for an order better in one figure and no worse in the other
                extra = (refined_pool(place, m, scored, costs, cap, objective, top=TOP) or [])[len(scored) :]
                pool += extra
                kept += [c for c in extra if not_worse(c[2], base[2])]
                if pick(place, m, kept, costs, cap, objective)[1] is base[1]:
                    better = local_search.improve_both(place, m, base[1], costs, cap, base[2])
                    if better is not None:
                        pool.append((f"{base[0]}+both", better[0], better[1]))
                        kept.append(pool[-1])
            ceiling = min((c[2].key(objective)[0] for c in guarded), default=float("inf"))
            if any(c[2].key(objective)[0] <= ceiling + 1e-9 * max(1.0, abs(ceiling)) for c in kept):
                pool = kept
        name, best, _ = pick(place, m, pool, costs, cap, objective)
        req.report["candidate"] = name
        return best

    return generate


def _key(req: GenerationRequest) -> tuple | None:
    """A hashable key of everything the generator reads (None if something is unhashable)."""
    try:
        key = (req.pp, req.vpp, req.micro_batches, req.costs, tuple(sorted(req.params.items())))
        hash(key)
    except TypeError:
        return None
    return key
