"""Memory measured in bytes reads in KiB/MiB/GiB on the page (summary, axis, hover), never `2.169e+07`."""

from primuspp.trace.timeline import Interval, RankTimeline, Timeline
from primuspp.viz.arrays import decode
from primuspp.viz.style import memory_scale
from primuspp.viz.summary import summary_html
from primuspp.viz.timeline_figure import timeline_figure

PEAK = 21_690_000  # bytes: 20.69 MiB


def _measured(unit: str) -> Timeline:
    ranks = [
        RankTimeline(
            r,
            [Interval("F", 0, r, 0, 0.0, 1.0), Interval("BW", 0, r, 0, 2.0, 4.0)],
            memory=[(0.0, 0.0), (1.0, PEAK / (r + 1)), (4.0, 0.0)],
            peak_memory=PEAK / (r + 1),
        )
        for r in range(2)
    ]
    return Timeline("run", 2, 1, 1, ranks, source="measured", memory_unit=unit)


def test_memory_scale_picks_the_unit_by_the_peak():
    assert memory_scale(PEAK, "bytes") == (2**20, "MiB")
    assert memory_scale(3 * 2**30, "bytes") == (2**30, "GiB")
    assert memory_scale(2048, "bytes") == (1024, "KiB")
    assert memory_scale(512, "bytes") == (1.0, "bytes")
    assert memory_scale(PEAK, "microbatches") == (1.0, "microbatches")


def test_summary_shows_bytes_in_mib():
    html = summary_html(_measured("bytes"))
    assert "20.69 MiB" in html and "peak memory (MiB)" in html and "e+07" not in html
    assert "<td>10.34</td>" in html  # rank 1's peak, same unit as the section's


def test_figure_axis_and_curves_in_mib():
    fig = timeline_figure(_measured("bytes"))
    assert "MiB" in fig["layout"]["yaxis2"]["title"]["text"]
    curves = [t for t in fig["data"] if t.get("yaxis") == "y2"]
    assert max(max(decode(t["y"])) for t in curves) == PEAK / 2**20
    assert all(t["hovertemplate"].endswith("MiB<extra></extra>") for t in curves)


def test_microbatch_units_unchanged():
    html = summary_html(_measured("microbatches"))
    assert f"{PEAK:.4g} microbatches" in html
