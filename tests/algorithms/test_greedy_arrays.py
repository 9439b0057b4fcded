"""`greedy.schedule` emits an ArrayOrder equal to its Node reference (`tests/oracles/constructions.py`:
every node decided, decoded one by one), and the search's array bookkeeping (peak, timing, bounds) reads it
as the Node path reads the reference's lists."""

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search import bounds, greedy, portfolio
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import make_placement
from tests.oracles import constructions

COSTS = (
    dict(forward=1.0, backward=1.0, wgrad=1.0),
    dict(forward=1.0, backward=2.0, wgrad=0.5, comm=0.1),
    dict(
        forward=(0.5, 1.5, 1.0, 2.0, 0.7, 1.1, 0.9, 1.3),
        backward=2.2,
        wgrad=0.3,
        comm=1.0,
        b_free_fraction=0.5,
    ),
    dict(
        forward=(2.0, 0.5, 1.0, 1.5, 0.7, 1.1, 0.9, 1.3),
        backward=1.0,
        wgrad=0.0,
        comm=0.3,
        b_free_fraction=-0.25,
    ),
)


def _placement_costs(kind, pp, cost):
    placement = make_placement(kind, pp, 2 if kind == "v" else 1)
    n = placement.num_stages
    values = {
        k: (v[:n] + (1.0,) * max(0, n - len(v)) if isinstance(v, tuple) else v) for k, v in cost.items()
    }
    return placement, CostModel(**values).for_placement(placement)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(("linear", "v")),
    pp=st.sampled_from((1, 2, 5)),
    m=st.sampled_from((1, 3, 11)),
    cap=st.sampled_from((1.0, 2.5, 100.0)),
    policy=st.sampled_from(greedy.POLICIES),
    cost=st.sampled_from(COSTS),
)
def test_schedule_equals_reference(kind, pp, m, cap, policy, cost):
    """Every policy and cost set, at the caps the greedy accepts (`least_cap`: below it the pass refuses,
    which test_greedy covers; a V's capped pass needs room for the turn)."""
    assume(kind == "linear" or cap >= 2)
    placement, costs = _placement_costs(kind, pp, cost)
    assume(greedy.least_cap(placement, costs) <= cap + 1e-9)
    plan = greedy.schedule(placement, m, costs, cap, policy)
    ref = constructions.greedy_schedule(placement, m, costs, cap, policy)
    assert isinstance(plan.order, ArrayOrder) and isinstance(ref.order, list)
    assert (plan.policy, plan.makespan, plan.max_span, plan.peak) == (
        ref.policy, ref.makespan, ref.max_span, ref.peak
    )  # fmt: skip
    assert plan.order == ref.order and plan.order.lengths() == [len(seq) for seq in ref.order]
    cols = ArrayOrder.from_nodes(ref.order).rows
    for name in ("node_kind", "kind", "mb", "stage", "rank", "index", "part"):
        assert np.array_equal(plan.order.rows[name], cols[name]), name
    # the array bookkeeping on the columns, the Node path on the reference's lists: the same figures
    units = portfolio.memory_units(placement, costs.activation)
    fr = costs.fractions()
    assert portfolio.order_peak(plan.order, units, fr) == portfolio.order_peak(ref.order, units, fr)
    assert portfolio.score(placement, m, plan.order, costs, fr) == portfolio.score(
        placement, m, ref.order, costs, fr
    )
    assert portfolio.lower_bounds(placement, plan.order, costs) == portfolio.lower_bounds(
        placement, ref.order, costs
    )
    assert bounds.all_simple(plan.order) and bounds.all_simple(ref.order)
