"""zero-bubble-heuristic: never worse than ZB-H1 and 1F1B under one cap, at any cost scale; Primus params."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate


def run(name, pp, m, costs, **params):
    return simulate(build_schedule(name, pp, None, m, costs, **params), costs).metrics


@st.composite
def stage_costs(draw):
    pp = draw(st.integers(1, 8))
    scale = draw(st.sampled_from([0.5, 1.0, 1000.0, 5e6]))
    per_stage = st.lists(st.floats(0.1, 10.0), min_size=pp, max_size=pp)
    costs = CostModel(
        forward=tuple(scale * x for x in draw(per_stage)),
        backward=tuple(scale * x for x in draw(per_stage)),
        wgrad=tuple(scale * x for x in draw(per_stage)),
        comm=scale * draw(st.sampled_from([0.0, 0.01, 0.3, 2.0])),
    )
    return pp, draw(st.integers(1, 4 * pp)), costs


@settings(max_examples=120, deadline=None)
@given(case=stage_costs())
def test_never_worse_than_zero_bubble_and_1f1b(case):
    pp, m, costs = case
    heur = run("zero-bubble-heuristic", pp, m, costs)
    tol = 1e-9 * heur.step_time
    assert heur.peak_memory <= pp + 1e-9  # the default cap: 1F1B's peak
    assert heur.step_time <= run("zero-bubble", pp, m, costs).step_time + tol
    assert heur.step_time <= run("1f1b", pp, m, costs).step_time + tol


@settings(max_examples=60, deadline=None)
@given(case=stage_costs(), cap=st.sampled_from([1.0, 1.5, 2.0, 3.0, 5.0, 20.0]))
def test_any_cap_is_respected(case, cap):
    pp, m, costs = case
    heur = run("zero-bubble-heuristic", pp, m, costs, max_mem=cap)
    assert heur.peak_memory <= cap + 1e-9


@pytest.mark.parametrize("scale", [0.5, 5e6])
def test_cost_scale_does_not_change_the_schedule(scale):
    base = build_schedule("zero-bubble-heuristic", 6, None, 20, CostModel(1.0, 1.3, 0.7, comm=0.05))
    scaled = build_schedule(
        "zero-bubble-heuristic",
        6,
        None,
        20,
        CostModel(1.0 * scale, 1.3 * scale, 0.7 * scale, comm=0.05 * scale),
    )
    assert scaled.ranks == base.ranks


def test_more_memory_helps_and_primus_params_plan():
    costs = CostModel(1000, 1000, 1000)
    tight = run("zero-bubble-heuristic", 8, 32, costs, max_mem=8)
    loose = run("zero-bubble-heuristic", 8, 32, costs, max_mem=15)
    assert loose.steady_bubble_rate < tight.steady_bubble_rate
    assert loose.steady_bubble_rate == 0
    table = build_schedule(
        "zb-auto", 8, None, 32, costs, cost_f=1000, cost_b=1000, cost_w=1000, cost_comm=10, max_mem=10
    )
    assert table.params["report"]["candidate"]
    assert simulate(table, costs).metrics.peak_memory <= 10


def test_refuses_a_cap_below_one_microbatch():
    with pytest.raises(ScheduleError, match=r"max_mem=0.5 is below one microbatch per rank"):
        build_schedule("zero-bubble-heuristic", 4, None, 8, max_mem=0.5)
