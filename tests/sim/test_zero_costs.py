"""Zero costs: events at equal times keep the table's order, so memory is never negative and the peak is the
one the order implies (the peak under tiny positive costs, where times alone already order the events)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate

#: one admissible (vpp, params) per algorithm; the exact solver is kept short
VPP = {name: a.vpp_default for name, a in ALGORITHMS.items()}
PARAMS = {"zb-optimal": {"time_limit": 0.2}}
#: the tiny positive costs the zero-cost peaks are checked against
TINY = CostModel(forward=1e-3, backward=1e-3, wgrad=1e-3)


def _table(name: str, pp: int, m: int, **extra):
    try:
        return build_schedule(name, pp, VPP.get(name, 1), m, **{**PARAMS.get(name, {}), **extra})
    except ScheduleError:
        return None


def _check(table, costs: CostModel) -> None:
    result = simulate(table, costs)
    reference = simulate(table, TINY)
    for rank, tiny in zip(result.timeline.ranks, reference.timeline.ranks, strict=True):
        levels = [level for _, level in rank.memory]
        assert min(levels) >= 0, f"{table.algorithm} rank {rank.rank}: memory {min(levels)}"
        assert rank.peak_memory == pytest.approx(tiny.peak_memory), f"{table.algorithm} rank {rank.rank}"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_all_zero_costs_keep_the_order_peak(name):
    table = _table(name, 4, 8)
    assert table is not None
    zero = CostModel(forward=0, backward=0, wgrad=0)
    _check(table, zero)
    assert simulate(table, zero).metrics.peak_memory > 0


def test_offload_at_zero_costs():
    table = _table("v-half", 4, 8, offload=True)
    assert table is not None and any(n.kind.text == "OFFLOAD" for nodes in table.ranks for n in nodes)
    _check(table, CostModel(forward=0, backward=0, wgrad=0))


cost = st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0])


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(ALGORITHMS)),
    pp=st.integers(2, 5),
    data=st.data(),
    f=cost,
    b=cost,
    w=cost,
    comm=st.sampled_from([0.0, 0.0, 0.25]),
    b_free=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_random_costs_never_negative(name, pp, data, f, b, w, comm, b_free):
    m = data.draw(st.integers(1, 3 * pp), label="m")
    table = _table(name, pp, m)
    if table is None:
        return
    costs = CostModel(forward=f, backward=b, wgrad=w, comm=comm, b_free_fraction=b_free)
    result = simulate(table, costs)
    reference = simulate(table, CostModel(forward=1e-3, backward=1e-3, wgrad=1e-3, b_free_fraction=b_free))
    for rank, tiny in zip(result.timeline.ranks, reference.timeline.ranks, strict=True):
        assert min(level for _, level in rank.memory) >= 0
        # a rank's events follow its own order whatever the costs: its peak does not depend on them
        assert rank.peak_memory == pytest.approx(tiny.peak_memory)
