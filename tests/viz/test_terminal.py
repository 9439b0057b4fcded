"""The terminal view: one row per rank that fits the width, readable without colour."""

import pytest
from rich.console import Console

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.viz.terminal import render_timeline


def plain(timeline, width):
    console = Console(width=width, color_system=None, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_timeline(timeline, width))
    return console.export_text()


def test_small_timeline_exactly():
    tl = simulate(build_schedule("zero-bubble", 2, None, 3), CostModel(2, 2, 1)).timeline
    assert plain(tl, 70) == (
        "zero-bubble  p=2 v=1 m=3: step time 18 ms, bubble 16.67%\n"
        "  0             4.5             9            13.5            18   idle\n"
        "0    F0     F1  ······   B0   W0   F2     B1   W1 ··   B2    W2  16.7%\n"
        "1 ······   F0     B0     F1     B1   W0   F2     B2   W1 W2 ···  16.7%\n"
        "   F  F forward   B  B input grad   W  W weight grad  · idle\n"
    )


@pytest.mark.parametrize("algo,vpp", [("zbv", None), ("1f1b-interleaved", 2), ("zero-bubble", None)])
def test_p8_m32_fits_200_columns(algo, vpp):
    tl = simulate(build_schedule(algo, 8, vpp, 32), CostModel(1000, 1000, 1000)).timeline
    lines = plain(tl, 200).splitlines()
    rows = lines[2:10]
    assert len(lines) == 11 and all(len(line) <= 200 for line in lines)
    assert [row.split(" ")[0] for row in rows] == [str(r) for r in range(8)]
    for row in rows:  # boxes too narrow for numbers at this scale: kind letters, dots where idle
        cells = row[2:-7]
        assert len(cells) == 200 - 2 - 7 and len(row) == 200 and set(cells) <= set("FBWfbwX·")
    # the idle share printed on the right is the rank's
    first_idle = float(rows[0].split()[-1].rstrip("%"))
    assert first_idle == pytest.approx(100 * (1 - 96 * 1000 / tl_step(tl)), abs=0.06)


def tl_step(tl):
    return max(iv.end for rt in tl.ranks for iv in rt.intervals)
