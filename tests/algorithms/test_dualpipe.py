"""DualPipe and DualPipe-V: FB overlap nodes, closed-form bubbles, memory, refusals."""

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import NodeKind
from primuspp.sim import simulate

F, B, W = 1000.0, 1000.0, 1000.0


def run(name, pp, m, costs):
    table = build_schedule(name, pp, None, m, costs)
    return table, simulate(table, costs).metrics


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (6, 12), (8, 16), (8, 32)])
def test_dualpipe_bubble_is_the_closed_form(pp, m):
    """(p/2 - 1)(F&B + B - 3W), B the full backward, F&B = F + B (no overlap gain)."""
    costs = CostModel(F, B, W)
    table, r = run("dualpipe", pp, m, costs)
    fb = F + B + W
    assert max(x.span for x in r.per_rank) == m * (F + B + W) + (pp // 2 - 1) * (fb + (B + W) - 3 * W)
    assert r.peak_memory == pp + 1
    assert any(n.kind is NodeKind.FB for _, n in table.compute_nodes())


@pytest.mark.parametrize("name", ["dualpipe", "dualpipe-v"])
def test_overlap_gain_shortens_the_step(name):
    plain = run(name, 8, 32, CostModel(F, B, W))[1]
    overlapped = run(name, 8, 32, CostModel(F, B, W, fb_overlap=0.7))[1]
    assert overlapped.step_time < plain.step_time


@pytest.mark.parametrize("pp,m", [(1, 2), (2, 4), (3, 6), (4, 8), (8, 32)])
def test_dualpipe_v_bubble(pp, m):
    """Folded onto V the halves are p long: (p - 1)(F&B + B - 3W) in chunk costs."""
    costs = CostModel(F, B, W)
    _, r = run("dualpipe-v", pp, m, costs)
    f, b, w = F / 2, B / 2, W / 2
    assert max(x.span for x in r.per_rank) == m * (F + B + W) + (pp - 1) * ((f + b + w) + (b + w) - 3 * w)
    assert r.peak_memory == pp + 0.5  # 2p + 1 chunk activations


def test_refusals_name_the_constraint():
    with pytest.raises(ScheduleError, match=r"dualpipe needs an even pp \(got pp=3\)"):
        build_schedule("dualpipe", 3, None, 12)
    with pytest.raises(ScheduleError, match=r"micro_batches even and >= 2\*pp = 8 \(got 6\)"):
        build_schedule("dualpipe", 4, None, 6)
    with pytest.raises(ScheduleError, match=r"micro_batches even and >= 2\*pp = 8 \(got 9\)"):
        build_schedule("dualpipe", 4, None, 9)
    with pytest.raises(ScheduleError, match=r"dualpipe-v needs micro_batches >= 2\*pp = 8 \(got 7\)"):
        build_schedule("dualpipe-v", 4, None, 7)
