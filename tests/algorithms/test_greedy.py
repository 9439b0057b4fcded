"""The capped list scheduler: never stalls, respects the cap, plans times the simulator can only better."""

from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search import greedy
from primuspp.algorithms.search.portfolio import memory_units, order_peak, score
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["linear", "v"]),
    pp=st.integers(1, 6),
    m=st.integers(1, 14),
    cap=st.sampled_from([1.0, 1.5, 2.0, 3.0, 4.5, 100.0]),
    policy=st.sampled_from(greedy.POLICIES),
    fwd=st.lists(st.floats(0.01, 5.0), min_size=12, max_size=12),
    comm=st.sampled_from([0.0, 0.05, 1.0]),
    b_free=st.sampled_from([0.0, 0.5]),
)
def test_valid_capped_and_timed_like_the_simulator(kind, pp, m, cap, policy, fwd, comm, b_free):
    placement = make_placement(kind, pp, 2 if kind == "v" else 1)
    n = placement.num_stages
    costs = CostModel(
        forward=tuple(fwd[:n]), backward=tuple(reversed(fwd[:n])), wgrad=fwd[n % 12], comm=comm,
        b_free_fraction=b_free,
    ).for_placement(placement)  # fmt: skip
    plan = greedy.schedule(placement, m, costs, cap, policy)
    validate(ScheduleTable(placement, m, lower_comms(placement, m, plan.order)))
    peak = order_peak(plan.order, memory_units(placement, costs.activation), b_free)
    assert peak <= cap + 1e-9 and abs(peak - plan.peak) < 1e-9
    # the plan is one feasible timing of its order; the simulator's as-soon-as-possible timing is never later
    # (equal unless a policy idled on purpose: patience)
    timed = score(placement, m, plan.order, costs, b_free)
    assert timed.makespan <= plan.makespan * (1 + 1e-9)
    if policy.patience == 0:
        assert abs(timed.makespan - plan.makespan) <= 1e-9 * max(1.0, plan.makespan)
