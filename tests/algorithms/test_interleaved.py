"""1f1b-interleaved (megatron-core's order, tests/megatron/test_interleaved_order.py holds it equal) against
the padded order: never longer at m >= p, equal where p | m, the padded one for m < p."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule, refusal
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate


def step(name: str, p: int, v: int, m: int, costs: CostModel | None = None, **params) -> float:
    return simulate(build_schedule(name, p, v, m, costs, **params), costs).metrics.step_time


@pytest.mark.parametrize(
    "p,v,m,group,ours,padded",
    [(4, 2, 6, 6, 22.5, 24.5), (4, 2, 10, 5, 34.5, 36.5), (8, 2, 12, 12, 46.5, 50.5), (4, 3, 9, 5, 30, 34)],
)
def test_megatrons_order_where_p_does_not_divide_m(p, v, m, group, ours, padded):
    table = build_schedule("1f1b-interleaved", p, v, m)
    assert table.params["report"]["group_size"] == group  # the least group size megatron-core accepts
    assert step("1f1b-interleaved", p, v, m) == pytest.approx(ours)
    assert step("1f1b-interleaved-padded", p, v, m) == pytest.approx(padded)


def test_p_dividing_m_is_unchanged():
    table = build_schedule("1f1b-interleaved", 4, 2, 8)
    assert "report" not in table.params and step("1f1b-interleaved", 4, 2, 8) == 28.5
    assert table.ranks == build_schedule("1f1b-interleaved-padded", 4, 2, 8).ranks


def test_refusals_name_the_rule():
    assert "1f1b-interleaved-padded" in refusal("1f1b-interleaved", 4, 2, 3, {})
    assert refusal("1f1b-interleaved-padded", 4, 2, 3, {}) is None
    for n, says in (
        (3, r"pp=4 <= group_size .*got 3"),
        (11, r"micro_batches=10 \(got 11"),
        (4, "last group of 2"),
    ):
        with pytest.raises(ScheduleError, match=says):
            build_schedule("1f1b-interleaved", 4, 2, 10, group_size=n)


@settings(max_examples=30, deadline=None)
@given(
    p=st.integers(2, 8),
    v=st.integers(2, 4),
    extra=st.integers(0, 20),
    bwd=st.sampled_from([1.0, 2.0]),
    comm=st.sampled_from([0.0, 0.3]),
)
def test_never_longer_than_the_padded_order(p, v, extra, bwd, comm):
    costs = CostModel(backward=bwd, wgrad=0.5, comm=comm)
    m = p + extra
    assert step("1f1b-interleaved", p, v, m, costs) <= step("1f1b-interleaved-padded", p, v, m, costs) + 1e-9
