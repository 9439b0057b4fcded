"""`refine.shared_refinements`: the W post-pass of an order object refined before is not run again inside
the block, and changes nothing: the same pool as a fresh refinement, and zero-bubble-heuristic (which opens
the block) picks the same order with and without it."""

import pytest

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.search import greedy, refine
from primuspp.algorithms.search.floor import forget
from primuspp.algorithms.zero_bubble import zero_bubble
from primuspp.algorithms.zero_bubble import zero_bubble_heuristic as heuristic
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear

COSTS = (
    CostModel(1.0, 2.0, 1.0, comm=0.25),
    CostModel(1.25, 2.2, 0.6, comm=0.1, b_free_fraction=0.5),
    CostModel(1000.0, 1300.0, 400.0, comm=120.0),
)


def _flat(pool):
    return [(name, sc, [list(seq) for seq in order]) for name, order, sc in pool]


def test_refinements_shared_equal_fresh():
    p, m = 4, 12
    placement = linear(p)
    costs = COSTS[0].for_placement(placement)
    req = GenerationRequest(p, 1, m, COSTS[0], {})
    candidates = [
        (f"greedy/{pol.name}", greedy.schedule(placement, m, costs, float(p), pol).order)
        for pol in greedy.POLICIES[:4]
    ] + [("zb", zero_bubble.generate(req))]
    fresh = refine.refined_pool(placement, m, candidates, costs, float(p), "span", top=2)
    with refine.shared_refinements():
        first = refine.refined_pool(placement, m, candidates, costs, float(p), "span", top=2)
        again = refine.refined_pool(placement, m, candidates, costs, float(p), "step", top=2)
    assert _flat(first) == _flat(fresh)
    step = refine.refined_pool(placement, m, candidates, costs, float(p), "step", top=2)
    assert _flat(again) == _flat(step)
    # the W-pass variants of the same leaders came back as the same objects (not refined twice)
    variants = {name: order for name, order, _ in first if "+w-" in name and "+swaps" not in name}
    assert variants and all(order is variants[name] for name, order, _ in again if name in variants)
    outside = refine.refined_pool(placement, m, candidates, costs, float(p), "span", top=2)
    assert not any(order is variants.get(name) for name, order, _ in outside)


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("p,m", [(3, 6), (4, 10)])
def test_heuristic_same_with_and_without_sharing(costs, p, m):
    forget()  # each run searches: no memo of the zero-bubble search inside
    req = GenerationRequest(p, 1, m, costs, {})
    shared = heuristic.generate(req)
    forget()
    plain_req = GenerationRequest(p, 1, m, costs, {})
    with greedy.shared_plans():
        plain = heuristic._generate(plain_req)
    assert [list(seq) for seq in shared] == [list(seq) for seq in plain]
    assert req.report == plain_req.report
