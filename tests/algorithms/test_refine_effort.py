"""The refine width is part of the search effort: a documented switch, reported above it, tested on both
sides."""

from primuspp.algorithms import effort
from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.search import greedy, refine
from primuspp.algorithms.search.floor import forget
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear

COSTS = CostModel(forward=(900.0, 960.0, 1020.0), backward=(1500.0, 1450.0, 1400.0), wgrad=600.0, comm=55.0)


def _pool(p: int, m: int, top: int | None) -> list[str]:
    placement = linear(p)
    costs = COSTS.for_placement(placement)
    cap = 2 * p - 1
    candidates = [(pol.name, greedy.schedule(placement, m, costs, cap, pol).order) for pol in greedy.POLICIES]
    pool = refine.refined_pool(placement, m, candidates, costs, cap, "span", top)
    return [name for name, _, _ in pool]


def test_refine_width_switches_at_the_documented_size(monkeypatch):
    p, m = 3, 8  # 72 compute nodes
    wide, narrow = _pool(p, m, effort.REFINE_TOP_SMALL), _pool(p, m, effort.REFINE_TOP)
    assert len(wide) > len(narrow)  # the width changes what is searched here
    monkeypatch.setattr(effort, "REFINE_SMALL", 3 * p * m)  # at the switch: still the small side
    assert _pool(p, m, None) == wide
    monkeypatch.setattr(effort, "REFINE_SMALL", 3 * p * m - 1)  # just above it
    assert _pool(p, m, None) == narrow


def test_the_report_names_the_width_above_the_switch(monkeypatch):
    p, m = 3, 8
    forget()
    below = build_schedule("zb-h2", p, None, m, COSTS).params["report"]["effort"]
    monkeypatch.setattr(effort, "REFINE_SMALL", 3 * p * m - 1)
    forget()
    above = build_schedule("zb-h2", p, None, m, COSTS).params["report"]["effort"]
    assert below == "full (auto: 72 compute nodes <= 20000)"
    assert above == "full (auto: 72 compute nodes <= 20000); refined: the 2 best, 3 up to 71 compute nodes"
    forget()
    explicit = build_schedule("zb-h2", p, None, m, COSTS, effort="full").params["report"]["effort"]
    assert explicit == "full; refined: the 2 best, 3 up to 71 compute nodes"
