"""`compare --html`: one bar per run in each of the three charts, ranking order, recommendation marked."""

import json

from primuspp.commands.app import main
from primuspp.viz.compare_figure import BEST, UNFIT, compare_figure


def test_compare_html_page(capsys, tmp_path):
    page = tmp_path / "c.html"
    code = main(["compare", "--pp", "4", "--mb", "8", "--mem-limit", "4", "--html", str(page), "--json"])
    captured = capsys.readouterr()
    assert code == 0 and captured.err.strip() == f"wrote {page}"
    doc = json.loads(captured.out)  # --json output untouched by --html
    html = page.read_text()
    data = json.loads(html.split("<script>var PP=")[1].split(";</script>")[0])
    bars = [t for t in data["figure"]["data"] if t["type"] == "bar"]
    names = [r["name"] for r in doc["results"]]
    assert len(bars) == 3 and all(t["y"] == names for t in bars)
    assert bars[0]["x"] == [r["step_time"] for r in doc["results"]]
    assert f"<b>recommendation:</b> {doc['reason']}" in html


def test_colours_mark_best_and_unfit():
    rows = [
        {
            "name": "a",
            "step_time": 1.0,
            "bubble_rate": 0.1,
            "steady_bubble_rate": 0.1,
            "peak_memory": 2,
            "fits": True,
        },
        {
            "name": "b",
            "step_time": 2.0,
            "bubble_rate": 0.2,
            "steady_bubble_rate": 0.1,
            "peak_memory": 9,
            "fits": False,
        },
    ]
    fig = compare_figure(rows, "a", mem_limit=4)
    assert fig["data"][0]["marker"]["color"] == [BEST, UNFIT]
    assert fig["data"][1]["x"] == [10.0, 20.0] and fig["data"][1]["text"] == ["10.00%", "20.00%"]
    assert fig["layout"]["shapes"][0]["x0"] == 4
