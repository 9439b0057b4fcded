"""Search effort: `effort` picks the branch, `auto` switches at a documented size, the report says which."""

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.zero_bubble import zb_h2 as zero_bubble_h2
from primuspp.algorithms.zero_bubble import zero_bubble_heuristic as heuristic
from primuspp.schedule.formats import to_json

LIMITS = {
    "zbv": (v_family, 6),
    "v-half": (v_family, 6),
    "v-min": (v_family, 6),
    "v-auto": (v_family, 6),
    "zb-h2": (zero_bubble_h2, 3),
    "zero-bubble-heuristic": (heuristic, 3),
}


def _order(table) -> str:
    return to_json(table).split('"ranks"', 1)[1]  # the nodes only (params carry the report)


@pytest.mark.parametrize("algo", sorted(LIMITS))
def test_auto_switches_at_the_documented_size(monkeypatch, algo):
    module, per_mb = LIMITS[algo]
    p, small_m, large_m = 3, 2, 6
    monkeypatch.setattr(module, "FULL_SEARCH_LIMIT", per_mb * p * 4)  # between the two sizes
    below = build_schedule(algo, p, None, small_m)
    above = build_schedule(algo, p, None, large_m)
    assert below.params["report"]["effort"].startswith("full (auto:")
    assert above.params["report"]["effort"].startswith("fast (auto:")
    # each side is exactly the branch it names
    assert _order(below) == _order(build_schedule(algo, p, None, small_m, effort="full"))
    assert _order(above) == _order(build_schedule(algo, p, None, large_m, effort="fast"))


@pytest.mark.parametrize("algo", sorted(LIMITS))
def test_explicit_effort_ignores_the_size(monkeypatch, algo):
    module, _ = LIMITS[algo]
    monkeypatch.setattr(module, "FULL_SEARCH_LIMIT", 0)
    assert build_schedule(algo, 3, None, 6, effort="full").params["report"]["effort"] == "full"
    monkeypatch.setattr(module, "FULL_SEARCH_LIMIT", 10**9)
    assert build_schedule(algo, 3, None, 6, effort="fast").params["report"]["effort"] == "fast"


def test_full_search_is_never_worse():
    """The full search's candidates include the fast one's, so by the measure each picks by (the longest
    rank span for the V family and zb-h2, the step time for the heuristic) full is never worse."""
    from primuspp.sim import simulate

    for algo in LIMITS:
        full = simulate(build_schedule(algo, 4, None, 12, effort="full")).metrics
        fast = simulate(build_schedule(algo, 4, None, 12, effort="fast")).metrics
        if algo == "zero-bubble-heuristic":
            assert full.step_time <= fast.step_time, algo
        else:
            span = lambda m: max(r.span for r in m.per_rank)  # noqa: E731
            assert span(full) <= span(fast), algo


def test_unknown_effort_is_refused():
    from primuspp.errors import ScheduleError

    with pytest.raises(ScheduleError, match="effort='max' not allowed"):
        build_schedule("zbv", 4, None, 8, effort="max")


@pytest.mark.parametrize("algo", ["zbv", "v-half", "v-min"])
def test_the_report_says_how_the_v_blocks_were_squeezed(monkeypatch, algo):
    """The size switch of `v_block_orders.squeezed_orders` (a long m from its steady-state period,
    `v_period`) is reported too, for each block built; the period's nodes are the full squeeze's."""
    from primuspp.algorithms.search import floor
    from primuspp.algorithms.v import period as v_period

    p = 4
    m = 3 * (v_period.starts(2 * p)[0] + 1)  # long enough for every cap the V family passes
    period = build_schedule(algo, p, None, m, effort="fast")
    said = period.params["report"]["squeeze"]
    assert ";" not in said and ": period (from m = " in said
    monkeypatch.setattr(v_period, "applies", lambda *args, **kw: False)  # the full squeeze, always
    floor.forget()  # zbv's generator keeps its results: generate again
    full = build_schedule(algo, p, None, m, effort="fast")
    assert full.params["report"]["squeeze"].endswith(": full")
    assert _order(full) == _order(period)
