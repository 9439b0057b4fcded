"""zero-bubble-heuristic [zb-auto]: greedy search over the cost model under a per-rank activation cap.

Several tie-break policies of the capped list scheduler (`greedy`) each produce a schedule from the
planning costs (per-stage F/B/W and comm; Primus' `cost_f`, `cost_b`, `cost_w`, `cost_comm` replace the
cost model's when given). ZB-H1's order (the registered zero-bubble's, itself cost-aware) and 1F1B's join
as candidates whenever they fit the cap, so the result is never slower than either. The one with the
shortest step time (then the shortest longest-rank span) wins, after the leaders get the W post-pass and
the local search (`refine`); `report["candidate"]` names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.classic import one_f_one_b
from primuspp.algorithms.effort import full_search
from primuspp.algorithms.search import cost_aware, greedy, refine
from primuspp.algorithms.zero_bubble import zb_timed, zero_bubble
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear

FULL_SEARCH_LIMIT = 20_000  # with effort="auto": compute nodes up to which every policy is tried
LINEAR_POLICIES = tuple(
    p
    for p in greedy.POLICIES
    if p.name
    in ("alt-fit", "alt-fit-wait", "alt-eager", "alt-lag", "alt-lag-wait", "b-eager-deep", "b-fit-wait")
)


def planning_costs(costs: CostModel, params: dict) -> CostModel:
    """The cost model with Primus' planning costs (cost_f, cost_b, cost_w, cost_comm) put in."""
    overrides = {
        field: params[key]
        for key, field in (
            ("cost_f", "forward"),
            ("cost_b", "backward"),
            ("cost_w", "wgrad"),
            ("cost_comm", "comm"),
        )
        if params.get(key) is not None
    }
    if "comm" in overrides:
        overrides["comm_bytes"] = 0.0
    return replace(costs, **overrides) if overrides else costs


def default_cap(p: int, params: dict) -> float:
    value = params.get("max_mem")
    return float(p) if value is None else float(value)


def generate(req: GenerationRequest) -> ComputeOrder:
    # the zero-bubble search below reruns some of these policies' passes, and refines some of their orders
    with greedy.shared_plans(), refine.shared_refinements():
        return _generate(req)


def _generate(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    placement = linear(p)
    costs = planning_costs(req.costs, req.params).for_placement(placement)
    given = "max_mem" if req.params.get("max_mem") is not None else None
    cap = greedy.fit_cap(placement, costs, default_cap(p, req.params), given, req.report)
    small = full_search(req.params.get("effort", "auto"), 3 * p * m, FULL_SEARCH_LIMIT, req.report)

    def built() -> Iterator[tuple[str, ComputeOrder]]:
        for policy in LINEAR_POLICIES if small else LINEAR_POLICIES[:1]:
            yield f"greedy/{policy.name}", greedy.schedule(placement, m, costs, cap, policy).order
        # the registered zero-bubble's table (cost-aware itself), kept only if it fits the cap, like 1F1B's
        zb_req = GenerationRequest(
            p, 1, m, planning_costs(req.costs, req.params), {"effort": req.params.get("effort", "auto")}
        )
        yield "zero-bubble", zero_bubble.generate_floored(zb_req)
        yield "1f1b", one_f_one_b.generate(req)

    # with a full search the leaders also get the W post-pass (refine)
    return cost_aware.best_of(placement, m, costs, built(), cap, "step", small, req.report)


def _planning(req: GenerationRequest) -> CostModel:
    return planning_costs(req.costs, req.params)


def _guards(req: GenerationRequest) -> list[tuple[str, ComputeOrder]]:
    """The orders the result must match in step time: the registered zero-bubble's and 1F1B's."""
    # called only after a full search (`floor.with_floor`): zero-bubble's is full too, with the same
    # parameters as a sweep's zero-bubble run (whose table `with_floor` keeps)
    params = {"effort": req.params.get("effort", "auto")}
    zb_req = GenerationRequest(req.pp, 1, req.micro_batches, _planning(req), params)
    return [("zero-bubble", zero_bubble.generate_floored(zb_req)), ("1f1b", one_f_one_b.generate(req))]


#: the registered generator (`registry`), floored by the timed construction at its cap
generate_floored = zb_timed.floored(generate, default_cap, "step", planning=_planning, guards=_guards)
