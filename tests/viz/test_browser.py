"""The pages in headless Chromium: no JS errors, and every box drawn on its rank (read back from the page).

Screenshots land in each test's tmp_path (and in $PRIMUSPP_TEST_ARTIFACTS when set)."""

from __future__ import annotations

import json

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.commands.app import main
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.output import write_result
from tests.viz.browser import chromium, page_status


@pytest.fixture(autouse=True)
def _needs_chromium():
    chromium()


def _viz(*args: str) -> None:
    assert main(["viz", *args]) == 0


@pytest.mark.parametrize("algo,vpp", [("zbv", None), ("1f1b-interleaved", 2), ("zero-bubble", None)])
def test_simulated_p8_m32_page(tmp_path, algo, vpp):
    result = simulate(build_schedule(algo, 8, vpp, 32), CostModel(1000, 1000, 1000))
    run_dir = write_result(result, tmp_path / "sim")
    page = tmp_path / f"{algo}.html"
    _viz(str(run_dir), "--out", str(page))
    status = page_status(page, png=tmp_path / f"viz-{algo}-p8-m32.png", size=(1400, 880))
    assert status["ready"] and status["errors"] == []
    (section,) = status["sections"]
    expected = [len(rt.intervals) for rt in result.timeline.ranks]
    assert section["mode"] == "bars" and section["boxes_per_rank"] == expected
    assert section["svg_bars"] == sum(expected)  # drawn as SVG, not only held in the data


def test_primus_real_run_sample_page(tmp_path, primus_data):
    page = tmp_path / "pp4_vpp2.html"
    _viz(str(primus_data / "pp_data_example" / "pp4_vpp2"), "--out", str(page))
    status = page_status(page, png=tmp_path / "viz-pp4_vpp2.png", size=(1400, 760))
    assert status["errors"] == []
    (section,) = status["sections"]
    # 8 microbatches x 2 chunks, F and full backward, on every rank; the iteration of median step time first
    assert section["iteration"] == "5" and section["boxes_per_rank"] == [32] * 4
    assert section["svg_bars"] == 128
    picked = page_status(page, fragment="iteration=3")["sections"][0]
    assert picked["iteration"] == "3" and picked["boxes_per_rank"] == [32] * 4


def test_webgl_page_and_two_sections(tmp_path):
    big = simulate(build_schedule("zero-bubble", 8, None, 256))  # 6144 boxes: WebGL
    for result in (big, simulate(build_schedule("1f1b", 8, None, 16))):
        write_result(result, tmp_path / "sim")
    page = tmp_path / "two.html"
    _viz(str(tmp_path / "sim"), "--out", str(page))
    status = page_status(page)
    assert status["errors"] == []
    # a root of two sizes labels each run with its size: "zero-bubble (p 8, m 256)"
    by_label = {s["label"].split(" (")[0]: s for s in status["sections"]}
    assert by_label["zero-bubble"]["mode"] == "gl" and by_label["zero-bubble"]["svg_bars"] == 0
    assert by_label["zero-bubble"]["boxes_per_rank"] == [len(rt.intervals) for rt in big.timeline.ranks]
    assert by_label["1f1b"]["boxes_per_rank"] == [32] * 8


def test_compare_page(tmp_path):
    page = tmp_path / "compare.html"
    assert main(["compare", "--pp", "8", "--mb", "32", "--mem-limit", "9", "--html", str(page)]) == 0
    status = page_status(page, png=tmp_path / "compare.png", size=(1400, 560))
    assert status["ready"] and status["errors"] == []
    runs = json.loads(page.read_text().split("<script>var PP=")[1].split(";</script>")[0])["figure"]["data"][
        0
    ]["y"]
    assert len(runs) >= 4 and status["bars"] == 3 * len(runs)  # three charts, one bar per run
