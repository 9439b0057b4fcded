"""The measured `fb_overlap`: an FB node's time over its parts' F and B (+ W) medians."""

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import calibrate


@pytest.mark.parametrize("factor", [0.6, 1.0])
def test_fb_overlap_is_recovered_from_fb_nodes(factor):
    truth = CostModel(forward=2.0, backward=3.0, wgrad=1.0, fb_overlap=factor)
    table = build_schedule("dualpipe-v", 4, 2, 12)
    assert any(n.kind.value == "FB" for nodes in table.ranks for n in nodes)
    cal = calibrate([simulate(table, truth).timeline])
    assert cal.costs.fb_overlap == pytest.approx(factor)


def test_no_fb_nodes_no_overlap():
    truth = CostModel(forward=2.0, backward=3.0, wgrad=1.0, fb_overlap=0.5)
    cal = calibrate([simulate(build_schedule("zbv", 4, 2, 8), truth).timeline])
    assert cal.costs.fb_overlap == 1.0
