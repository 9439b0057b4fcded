"""Pick the best candidate order after giving the leading ones the W post-pass (`w_pass`).

`portfolio.pick` chooses among finished orders; here the few best of them also get their W's re-placed
under the cost model (each variant keeps its rank's peak), and the best of originals and variants wins.
The originals stay in the running, so the result is never worse than `pick`'s under the same objective.
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.algorithms import local_search, w_pass
from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.portfolio import Score, pick, score
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.placement import Placement

#: how many of the best candidates get the W post-pass
TOP = 3


def pick_refined(
    placement: Placement,
    m: int,
    candidates: Sequence[tuple[str, ComputeOrder] | tuple[str, ComputeOrder, Score]],
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
    top: int = TOP,
) -> tuple[str, ComputeOrder, Score]:
    """`portfolio.pick` over `candidates` plus the W-pass variants of the `top` best of them; a variant is
    named `CANDIDATE+VARIANT` (e.g. `zb/explicit+w-fit`)."""
    fractions = costs.fractions()
    scored: list[tuple[str, ComputeOrder, Score]] = []
    for cand in candidates:
        sc = cand[2] if len(cand) == 3 else score(placement, m, cand[1], costs, fractions)
        if cap is None or sc.peak <= cap + 1e-9:
            scored.append((cand[0], cand[1], sc))
    if not scored:  # let `pick` refuse with its message
        return pick(placement, m, candidates, costs, cap, objective)
    ranked = sorted(range(len(scored)), key=lambda i: (scored[i][2].key(objective), i))
    extra: list[tuple[str, ComputeOrder, Score]] = []
    seen: set[tuple[float, float, float]] = set()
    for i in ranked:
        if len(seen) == top:
            break
        name, order, sc = scored[i]
        sig = (sc.makespan, sc.max_span, sc.peak)
        if sig in seen:  # the same figures: most likely the same order, refined the same way
            continue
        seen.add(sig)
        caps = w_pass.rank_peaks(placement, order, costs)
        for vname, new in [("", order), *w_pass.variants(placement, m, order, costs, caps)]:
            if vname:
                extra.append((f"{name}+{vname}", new, score(placement, m, new, costs, fractions)))
            filled = w_pass.fill_gaps(placement, m, new, costs, caps)
            if filled is not None:
                label = f"{name}+{vname}+gaps" if vname else f"{name}+gaps"
                extra.append((label, filled, score(placement, m, filled, costs, fractions)))
    name, order, sc = pick(placement, m, [*scored, *extra], costs, cap, objective)
    better = local_search.improve(placement, m, order, costs, cap, objective, sc)
    if better is not None:
        return f"{name}+swaps", better[0], better[1]
    return name, order, sc
