"""`primuspp viz` / `visualize`: files written, and one-line errors (exit 2) for bad PATHs."""

from __future__ import annotations

import json

import pytest

from primuspp.commands.app import main
from tests.trace.test_chrome import check_trace


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def sim_dir(tmp_path, capsys):
    out = tmp_path / "sim"
    assert (
        run_cli(
            capsys,
            "simulate",
            "--algo",
            "1f1b",
            "--algo",
            "zb1p",
            "--pp",
            "4",
            "--mb",
            "8",
            "--out",
            str(out),
        )[0]
        == 0
    )
    return out


def test_viz_writes_one_self_contained_page(capsys, tmp_path, sim_dir):
    page = tmp_path / "v.html"
    code, out, err = run_cli(capsys, "viz", str(sim_dir), "--out", str(page))
    assert code == 0 and out == ""
    assert err.startswith(f"wrote {page} (2 sections, ")
    html = page.read_text()
    assert "<script src=" not in html and "https://" not in html.split("<script>var PP=")[1]
    data = json.loads(html.split("<script>var PP=")[1].split(";</script>")[0])
    assert [s["label"] for s in data["sections"]] == ["1f1b", "zero-bubble"]


def test_visualize_alias_and_yaml(capsys, tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pp: 2\nmicro_batches: 3\nruns:\n  - algorithm: gpipe\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "visualize", str(cfg))
    assert code == 0 and (tmp_path / "pp_viz.html").exists(), err


def test_chrome_only(capsys, tmp_path, sim_dir):
    trace = tmp_path / "t.json"
    code, _, err = run_cli(capsys, "viz", str(sim_dir / "1f1b"), "--chrome", str(trace))
    assert code == 0 and err.strip() == f"wrote {trace} (Chrome/Perfetto trace JSON)"
    assert not (tmp_path / "pp_viz.html").exists()
    # pp_data keeps no transfers; the run's schedule.json and costs give them back for the arrows
    flows = check_trace(json.loads(trace.read_text()))
    assert len(flows) == 2 * 3 * 8  # 1f1b, p=4, m=8: an activation and a gradient per link and microbatch


def test_iteration_selects_what_is_shown(capsys, tmp_path, primus_data):
    trace = tmp_path / "t.json"
    sample = str(primus_data / "pp_data_example" / "pp4")
    assert run_cli(capsys, "viz", sample, "--iteration", "3", "--chrome", str(trace))[0] == 0
    assert json.loads(trace.read_text())["otherData"]["iteration"] == "3"
    code, _, err = run_cli(capsys, "viz", sample, "--iteration", "99", "--chrome", str(trace))
    assert code == 2 and err == "error: --iteration 99: no source has it (pp4: 1..6)\n"


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d / "nope", "{d}/nope: no such file or directory"),
        (lambda d: d, "{d}: no summary.json or pp_rank_<r>.json files, nor run directories holding them"),
        (
            lambda d: (d / "pp_rank_0.json").write_text('{"1": [1, 2]}') and d,
            "{d}/pp_rank_0.json iteration 1: expected an object with fwd_start/fwd_end lists",
        ),
        (
            lambda d: (d / "pp_rank_0.json").write_text('{"1": {"fwd_start": "x", "fwd_end": []}}') and d,
            "{d}/pp_rank_0.json iteration 1: 'fwd_start' must be a list of numbers",
        ),
        (lambda d: (d / "pp_rank_0.json").write_text("{") and d, "{d}/pp_rank_0.json: not valid JSON"),
    ],
)
def test_bad_path_is_one_line_naming_the_file(capsys, tmp_path, make, message):
    code, out, err = run_cli(capsys, "viz", str(make(tmp_path)), "--out", str(tmp_path / "v.html"))
    assert code == 2 and out == ""
    assert err.startswith("error: " + message.format(d=tmp_path)) and err.count("\n") == 1, err
    assert not (tmp_path / "v.html").exists()


def test_simulate_show_draws_each_run(capsys, tmp_path):
    args = ("simulate", "--algo", "1f1b", "--algo", "gpipe", "--pp", "4", "--mb", "4", "--out", str(tmp_path))
    code, out, _ = run_cli(capsys, *args, "--show")
    assert code == 0
    assert "1f1b  p=4 v=1 m=4: step time" in out and "gpipe  p=4 v=1 m=4" in out
    assert out.count("F forward") == 2
    # with --json, stdout stays one JSON document; the drawings go to stderr
    code, out, err = run_cli(capsys, *args, "--show", "--json")
    assert code == 0 and len(json.loads(out)["results"]) == 2 and "F forward" in err


def test_dump_show_replaces_the_text_on_stdout(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "dump", "--algo", "zb1p", "--pp", "2", "--mb", "3", "--show")
    assert code == 0 and "# primuspp schedule" not in out and "zero-bubble  p=2 v=1 m=3" in out
    path = tmp_path / "t.txt"
    code, out, _ = run_cli(
        capsys, "dump", "--algo", "zb1p", "--pp", "2", "--mb", "3", "--show", "--out", str(path)
    )
    assert code == 0 and "zero-bubble  p=2 v=1 m=3" in out
    assert path.read_text().startswith("# primuspp schedule")  # the round-trippable text, unchanged
