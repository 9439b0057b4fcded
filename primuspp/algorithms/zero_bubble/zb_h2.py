"""ZB-H2: zero bubble in the steady metric at 2p-1 microbatches of activations on the first rank.

The capped list scheduler (`greedy`) at 2p-1: with that much room rank r keeps forwarding through the
warm-up (up to 2(p-r)-1 forwards before its first B), keeps the 1F1B rhythm in the steady phase, and fills
every wait with pending W's, so the tail is W's. With F = B = W and m >= 2p every rank runs without a gap
from its first forward to its last W. A few tie-break policies are tried; the shortest longest-rank span,
then the shortest step time, wins; a full search is floored, like zero-bubble's, by the timed construction
at 2p - 1 (`zb_timed.floored`), which keeps it level with sail-sg's ZB-H2 when W or B outweighs F.
"""

from __future__ import annotations

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.effort import full_search
from primuspp.algorithms.search import cost_aware, greedy
from primuspp.algorithms.search.portfolio import pick
from primuspp.algorithms.zero_bubble import zb_timed
from primuspp.schedule.placement import linear

FULL_SEARCH_LIMIT = 20_000  # with effort="auto": compute nodes up to which every policy is tried
POLICIES = tuple(p for p in greedy.POLICIES if p.name in ("alt-fit", "alt-eager", "b-eager-deep"))
EXTRA_POLICIES = tuple(p for p in greedy.POLICIES if p.name in ("alt-fit-wait", "alt-lag-wait", "b-fit-wait"))


def generate(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    placement = linear(p)
    costs = req.costs.for_placement(placement)
    cap = greedy.fit_cap(placement, costs, float(2 * p - 1), None, req.report)
    candidates = []
    full = full_search(req.params.get("effort", "auto"), 3 * p * m, FULL_SEARCH_LIMIT, req.report)
    if full:  # every policy, plus more of them and the W post-pass (cost_aware)
        return cost_aware.best_linear(
            placement, m, costs, [], cap, POLICIES + EXTRA_POLICIES, "span", True, req.report
        )
    for policy in POLICIES[:1]:
        plan = greedy.schedule(placement, m, costs, cap, policy)
        candidates.append((policy.name, plan.order))
    name, order, _ = pick(placement, m, candidates, costs, cap, "span")
    req.report["candidate"] = name
    return order


#: the registered generator (`registry`), floored by the timed construction at 2p - 1
generate_floored = zb_timed.floored(generate, lambda p, params: float(2 * p - 1))
