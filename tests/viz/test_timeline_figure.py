"""The figure dict of a timeline, read back without a browser."""

import math

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.trace.timeline import Interval, RankTimeline, Timeline
from primuspp.viz.arrays import decode, typed, typed_rows
from primuspp.viz.style import ms
from primuspp.viz.timeline_figure import describe, timeline_figure


def boxes_per_rank(fig):
    counts = [0] * fig["layout"]["meta"]["pp"]
    for trace in fig["data"]:
        if trace.get("meta", {}).get("role") == "boxes":
            for r in decode(trace["y"]):
                counts[r] += 1
    return counts


def test_typed_arrays_round_trip():
    assert decode(typed([1.5, math.inf, -2], "f8")) == [1.5, math.inf, -2]
    assert decode(typed([3, 255], "u1")) == [3, 255]
    assert decode(typed_rows([(1, 2), (3, 4)], "i2", 2)) == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="2 values"):
        typed_rows([(1, 2), (3,)], "i2", 2)


def test_small_timeline_is_svg_bars_with_numbers_and_hover():
    result = simulate(build_schedule("1f1b", 4, None, 8), CostModel(2, 3, 0))
    fig = timeline_figure(result.timeline)
    assert fig["layout"]["meta"] == {"pp": 4, "boxes": 64, "mode": "bars"}
    assert boxes_per_rank(fig) == [16, 16, 16, 16]
    (f_trace,) = [t for t in fig["data"] if t.get("name") == "F"]
    assert f_trace["type"] == "bar" and f_trace["text"][:2] == ["0", "1"]
    ranks, starts, durations = (decode(f_trace[k]) for k in ("y", "base", "x"))
    first = result.timeline.ranks[0].intervals[0]
    assert (ranks[0], starts[0], durations[0]) == (0, first.start, first.end - first.start)
    assert f_trace["hovertext"][0] == "<b>F mb 0, stage 0</b><br>rank 0 · 0 → 2 ms (2 ms)"
    # idle bands: one grey rectangle per rank under the boxes, over the whole step
    assert len(fig["layout"]["shapes"]) == 4 and fig["layout"]["shapes"][0]["x1"] == result.metrics.step_time
    # memory curves, one per rank, on the second axis pair
    memory = [t for t in fig["data"] if t.get("yaxis") == "y2"]
    assert [t["name"] for t in memory] == [f"rank {r}" for r in range(4)]
    assert max(decode(memory[0]["y"])) == result.timeline.ranks[0].peak_memory


@pytest.mark.parametrize("algo,vpp", [("zero-bubble", None), ("1f1b-interleaved", 2)])
def test_large_timeline_is_webgl_lines_with_hover_markers(algo, vpp):
    tl = simulate(build_schedule(algo, 4, vpp, 8)).timeline
    fig = timeline_figure(tl, bar_limit=0)
    assert fig["layout"]["meta"]["mode"] == "gl"
    assert boxes_per_rank(fig) == [len(rt.intervals) for rt in tl.ranks]
    lines = [t for t in fig["data"] if t.get("mode") == "lines" and "yaxis" not in t]
    markers = [t for t in fig["data"] if t.get("mode") == "markers"]
    assert len(lines) == len(markers) and all(t["type"] == "scattergl" for t in lines + markers)
    xs = decode(lines[0]["x"])
    assert all(math.isnan(x) for x in xs[2::3]) and not any(math.isnan(x) for x in xs[0::3])
    mb, stage, start, end = decode(markers[0]["customdata"])[0]
    first = next(iv for rt in tl.ranks for iv in rt.intervals if (iv.kind, iv.chunk) == ("F", 0))
    assert (mb, stage, start, end) == (first.microbatch, first.stage, first.start, first.end)
    assert "stage %{customdata[1]}" in markers[0]["hovertemplate"]


def test_fb_and_unknown_microbatches():
    fb = Interval("FB", 3, 2, 0, 0.0, 1.0, ("B", 1, 5, 1))
    unknown = Interval("F", -1, -1, -1, 1.0, 2.0)
    tl = Timeline("t", 1, 1, 4, [RankTimeline(0, [fb, unknown])])
    assert describe(fb) == "FB: F mb 3, stage 2 + B mb 1, stage 5"
    assert describe(unknown) == "F (microbatch unknown)"
    fig = timeline_figure(tl, x_range=(0.0, 50.0))
    assert [(t["name"], t["text"]) for t in fig["data"]] == [("F", [""]), ("FB", ["3/1"])]
    assert fig["layout"]["xaxis"]["range"] == [0.0, 50.0]
    assert "yaxis2" not in fig["layout"]  # no memory curve in the source: no memory panel
    gl = timeline_figure(tl, bar_limit=0)
    fb_markers = next(t for t in gl["data"] if t.get("mode") == "markers" and t["name"] == "FB")
    assert decode(fb_markers["customdata"]) == [[3, 2, 0.0, 1.0, 1, 5]]


def test_ms_formatting():
    assert [ms(x) for x in (0, 12000.0, 1599.0000000001, 3204.98974, 1.23456)] == [
        "0",
        "12,000",
        "1,599",
        "3,204.99",
        "1.235",
    ]
