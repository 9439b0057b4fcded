"""`compare`, `simulate --costs-from` and result roots as a user meets them (issue 34): units on every
figure, recommendations only between choices, sizes from the measured run, one size per results root."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.commands.app import main
from primuspp.sim.engine import simulate
from primuspp.trace.pp_data import write_pp_data

DATA = Path(__file__).parents[1] / "data" / "primus"
PRIMUS_SIM = DATA / "simulator_output_p8_m32"
MIB = 2**20


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(err: str, *parts: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(p in lines[0] for p in parts), lines[0]


def _measured(directory: Path, algo: str = "zbv", pp: int = 4, mb: int = 8) -> Path:
    """A measured-looking dump of `algo` (times in ms, memory in bytes: 1 MiB per activation unit)."""
    tl = simulate(build_schedule(algo, pp, None, mb)).timeline
    ranks = [
        replace(rt, memory=[(t, m * MIB) for t, m in rt.memory], peak_memory=rt.peak_memory * MIB)
        for rt in tl.ranks
    ]
    directory.mkdir(parents=True)
    write_pp_data([replace(tl, ranks=ranks, source="measured", memory_unit="bytes")], directory)
    return directory


def test_mem_limit_on_a_measured_run_is_in_gib(capsys, tmp_path):
    run = shutil.copytree(DATA / "pp_data_example" / "pp4_zb_new", tmp_path / "pp4_zb_new")
    code, out, err = _run(capsys, "compare", str(run), "--mem-limit", "5")
    assert code == 0, err
    assert "nanx" not in out and "1.000x" in out
    text = " ".join(out.split())
    assert "nothing fits a per-rank limit of 5 GiB; the lowest peak is pp4_zb_new at 55.5 GiB" in text
    code, out, _ = _run(capsys, "compare", str(run), "--mem-limit", "60", "--json")
    doc = json.loads(out)
    assert doc["recommendation"] == "pp4_zb_new" and "GiB" in doc["reason"]


def test_mem_limit_is_refused_where_its_unit_is_ambiguous(capsys, tmp_path):
    assert (
        _run(capsys, "simulate", "--algo", "zbv", "--pp", "4", "--mb", "8", "--out", str(tmp_path / "s"))[0]
        == 0
    )
    measured = _measured(tmp_path / "m")
    code, out, err = _run(capsys, "compare", str(tmp_path / "s" / "zbv"), str(measured), "--mem-limit", "4")
    assert code == 2 and out == ""
    _one_line(err, "--mem-limit 4", "microbatches", "GiB")
    code, _, err = _run(
        capsys, "compare", str(measured), "--algo", "1f1b", "--pp", "4", "--mb", "8", "--mem-limit", "4"
    )
    assert code == 2
    _one_line(err, "--mem-limit 4", "ambiguous")


def test_a_simulation_and_its_measurement_are_not_ranked_against_each_other(capsys, tmp_path):
    """`compare SIM MEASURED`: predicted vs measured, no recommendation between the two."""
    assert (
        _run(capsys, "simulate", "--algo", "zbv", "--pp", "4", "--mb", "8", "--out", str(tmp_path / "s"))[0]
        == 0
    )
    measured = _measured(tmp_path / "m")
    code, out, err = _run(capsys, "compare", str(tmp_path / "s" / "zbv"), str(measured), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["results"] == [] and doc["recommendation"] is None
    (pair,) = doc["predicted_vs_measured"]
    assert pair["same_schedule"] and [m["unit"] for m in pair["metrics"]] == ["ms", "", "bytes"]
    code, out, _ = _run(capsys, "compare", str(tmp_path / "s" / "zbv"), str(measured))
    assert "recommendation" not in out and "step time ms" in out


def test_a_simulation_of_another_size_is_not_paired(capsys, tmp_path):
    """The only two given pair only at the same p and m; the measured run says how to simulate its size."""
    assert _run(capsys, "simulate", "--algo", "zbv", "--out", str(tmp_path / "s"))[0] == 0  # p 8, m 32
    measured = _measured(tmp_path / "m")
    code, out, err = _run(capsys, "compare", str(tmp_path / "s"), str(measured))
    assert code == 0, err
    text = " ".join(out.split())
    assert "Simulated at p 8, m 32" in text and "Measured at p 4, m 8" in text
    assert f"primuspp simulate --algo zbv --vpp 2 --costs-from {measured} (p 4, m 8 from the run)" in text
    assert "Predicted" not in out


def test_bare_compare_after_simulate_and_train_of_another_size(capsys, tmp_path, monkeypatch):
    """The design card's flow: `simulate` (p 8, m 32), a run of zbv at p 4 m 8, `compare`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUMP_PP_DIR", raising=False)
    assert _run(capsys, "simulate")[0] == 0
    _measured(tmp_path / "output" / "pp_data")
    code, out, err = _run(capsys, "compare")
    assert code == 0, err
    text = " ".join(out.split())
    assert "pp_simulation_result/ holds zbv at p 8 m 32, the run is p 4 m 8" in text
    assert "primuspp simulate --costs-from output/pp_data" in text
    assert "recommendation" not in text and "Predicted (zbv-v2) vs measured" in text
    # simulating every algorithm at the run's size (sizes from the run) gives the choices
    code, _, err = _run(capsys, "simulate", "--costs-from", "output/pp_data")
    assert code == 0 and "p 4, m 8 from the run" in err
    code, out, err = _run(capsys, "compare", "--json")
    doc = json.loads(out)
    assert [g["title"] for g in doc["groups"]] == ["Simulated at p 4, m 8"]
    assert {(r["pp"], r["micro_batches"], r["source"]) for r in doc["results"]} == {(4, 8, "simulated")}
    assert doc["recommendation"] in {r["name"] for r in doc["results"]} and " ms, peak " in doc["reason"]
    assert "microbatches" in doc["reason"]


def test_costs_from_takes_the_sizes_the_command_line_leaves_out(capsys, tmp_path):
    run = tmp_path / "pp4"
    shutil.copytree(DATA / "pp_data_example" / "pp4", run)
    code, out, err = _run(
        capsys, "simulate", "--costs-from", str(run), "--algo", "zbv", "--json", "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    (res,) = json.loads(out)["results"]
    assert (res["pp"], res["micro_batches"]) == (4, 8)
    code, out, err = _run(
        capsys,
        "simulate",
        "--costs-from",
        str(run),
        "--algo",
        "zbv",
        "--mb",
        "16",
        "--json",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0 and "p 4 from the run" in err
    assert [(r["pp"], r["micro_batches"]) for r in json.loads(out)["results"]] == [(4, 16)]


def test_primus_simulator_output_is_read_as_a_root_of_simulations(capsys):
    code, out, err = _run(capsys, "compare", str(PRIMUS_SIM), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["results"]) == 5
    assert {r["source"] for r in doc["results"]} == {"simulated (Primus' simulator)"}
    assert doc["recommendation"] == "zbv-formatted"
    code, out, _ = _run(capsys, "compare", str(PRIMUS_SIM / "zerobubble"), str(PRIMUS_SIM / "v-half"))
    assert code == 0 and "measured" not in out.lower() and "Primus' simulator" in out


@pytest.mark.parametrize("verb", ["simulate", "compare"])
def test_step_time_and_peak_carry_units(capsys, tmp_path, monkeypatch, verb):
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, verb, "--algo", "1f1b", "--algo", "zbv", "--pp", "4", "--mb", "8")
    assert code == 0
    assert "step ms" in out and "peak (microbatches)" in out


def test_a_root_holding_two_sizes_is_grouped(capsys, tmp_path):
    """A results root written before sizes were kept apart (or by hand): compare shows one set per size."""
    root = tmp_path / "root"
    for pp, mb in ((8, 32), (4, 8)):
        assert (
            _run(
                capsys,
                "simulate",
                "--algo",
                "1f1b",
                "--pp",
                str(pp),
                "--mb",
                str(mb),
                "--out",
                str(tmp_path / "t"),
            )[0]
            == 0
        )
        shutil.copytree(tmp_path / "t" / "1f1b", root / f"1f1b-p{pp}")
    out = _run(capsys, "compare", str(root), "--json")[1]
    doc = json.loads(out)
    assert [g["title"] for g in doc["groups"]] == ["Simulated at p 4, m 8", "Simulated at p 8, m 32"]
    assert doc["recommendation"] is None and all(g["recommendation"] is None for g in doc["groups"])


def test_simulate_keeps_one_size_per_results_root(capsys, tmp_path):
    """Runs of another size an earlier simulate left are removed (primuspp's own, whole); one holding a
    user's file is kept and named."""
    out = tmp_path / "res"
    assert (
        _run(capsys, "simulate", "--algo", "1f1b", "--algo", "gpipe", "--algo", "zbv", "--out", str(out))[0]
        == 0
    )
    (out / "gpipe" / "NOTES.txt").write_text("mine\n")
    code, _, err = _run(capsys, "simulate", "--algo", "zbv", "--pp", "4", "--mb", "8", "--out", str(out))
    assert code == 0, err
    assert f"removed 1 earlier run at p 8 m 32 from {out}/ (1f1b)" in err
    assert f"kept gpipe (p 8 m 32) in {out}/" in err
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["gpipe", "zbv"]
    assert (out / "gpipe" / "NOTES.txt").read_text() == "mine\n"
