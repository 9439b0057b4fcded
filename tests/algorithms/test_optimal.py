"""zb-optimal: proven optimal where it can be, a reported gap elsewhere, never worse than the heuristic."""

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule, solver_available
from primuspp.algorithms.zero_bubble.zb_optimal import lower_bound
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear
from primuspp.sim import simulate

needs_solver = pytest.mark.skipif(
    not solver_available(), reason="highspy (the 'optimal' extra) not installed"
)


def step(table, costs):
    return simulate(table, costs).metrics.step_time


@needs_solver
def test_p4_m8_equal_costs_is_proven_optimal():
    costs = CostModel(1000, 1000, 1000)
    table = build_schedule("zb-optimal", 4, None, 8, costs, time_limit=5)
    report = table.params["report"]
    assert report["gap"] == 0
    assert report["lower_bound"] == report["step_time"] == step(table, costs) == 27_000


@needs_solver
def test_tighter_cap_solved_by_the_milp():
    costs = CostModel(1000, 1000, 1000)
    table = build_schedule("zb-optimal", 4, None, 8, costs, max_mem=2, time_limit=20)
    report = table.params["report"]
    assert report["status"] == "Optimal" and report["gap"] == pytest.approx(0, abs=1e-6)
    assert simulate(table, costs).metrics.peak_memory <= 2


@needs_solver
@pytest.mark.parametrize(
    "pp,m,costs,params",
    [
        (4, 8, CostModel((1, 1.5, 1, 2), (1, 1, 2, 1), (0.5, 1, 1, 1), comm=0.1), {}),
        (3, 6, CostModel((1, 1.5, 1), (1, 1, 2), (0.5, 1, 1)), {"max_mem": 2}),
        (5, 4, CostModel(2, 3, 1, comm=0.5), {"max_mem": 3}),
    ],
)
def test_reports_a_gap_and_never_loses_to_the_heuristic(pp, m, costs, params):
    table = build_schedule("zb-optimal", pp, None, m, costs, time_limit=1.0, **params)
    heuristic = build_schedule("zero-bubble-heuristic", pp, None, m, costs, **params)
    report = table.params["report"]
    assert 0 <= report["gap"] < 1 and report["lower_bound"] <= report["step_time"] + 1e-9
    assert step(table, costs) <= step(heuristic, costs) * (1 + 1e-12)
    assert step(table, costs) == pytest.approx(report["step_time"])
    cap = params.get("max_mem", pp)
    assert simulate(table, costs).metrics.peak_memory <= cap


def test_lower_bound_is_zb_h1_at_the_1f1b_cap():
    pl = linear(8)
    costs = CostModel(1000, 1000, 1000).for_placement(pl)
    assert lower_bound(8, 32, costs, 8) == 32 * 3000 + 7 * 1000


def test_refused_in_one_line_without_the_solver(monkeypatch):
    import primuspp.algorithms.registry as registry

    monkeypatch.setattr(registry, "solver_available", lambda: False)
    reason = ALGORITHMS["zb-optimal"].refuse(4, 1, 8, {})
    assert reason and "\n" not in reason and "primuspp[optimal]" in reason
