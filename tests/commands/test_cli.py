"""The CLI contract: outputs, files, and one-line errors with exit code 2."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys

import pytest

from primuspp.algorithms.registry import ALGORITHMS, solver_available
from primuspp.commands.app import main


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_simulate_json_acceptance(capsys, tmp_path):
    code, out, _ = run_cli(
        capsys, "simulate", "--algo", "1f1b", "--pp", "8", "--mb", "32", "--json", "--out", str(tmp_path)
    )
    assert code == 0
    doc = json.loads(out)
    (res,) = doc["results"]
    assert res["step_time"] == 117000 and round(res["bubble_rate"], 4) == 0.1795
    assert [r["peak_memory"] for r in res["per_rank"]] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert set(res) >= {
        "name",
        "algorithm",
        "pp",
        "vpp",
        "micro_batches",
        "step_time",
        "bubble_rate",
        "steady_bubble_rate",
        "peak_memory",
        "per_rank",
    }
    assert set(res["per_rank"][0]) == {"rank", "busy", "span", "total", "peak_memory"}
    files = sorted(p.name for p in (tmp_path / "1f1b").iterdir())
    assert files == ["config.json", *[f"pp_rank_{r}.json" for r in range(8)], "schedule.json", "summary.json"]
    rank0 = json.loads((tmp_path / "1f1b" / "pp_rank_0.json").read_text())["0"]
    assert rank0["total"] == 117000 and len(rank0["fwd_start"]) == 32


def test_simulate_default_table(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "simulate", "--out", str(tmp_path))
    assert code == 0
    assert "117,000" in out and "103,000" in out and "106,500" in out and "99,500" in out
    left_out = ("1f1b-interleaved", "1f1b-interleaved-padded", "zb-optimal")
    expected = sorted(a for a in ALGORITHMS if a not in left_out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*expected, "1f1b-interleaved-v2"])


def test_primus_yaml_output_matches_primus(capsys, tmp_path, primus_data):
    cfg = tmp_path / "cfg.yaml"
    text = (primus_data / "pp_simulation.yaml").read_text()
    # only the schedulers this build knows; the file is otherwise Primus' own
    cfg.write_text(text)
    code, out, err = run_cli(
        capsys, "simulate", "--config", str(cfg), "--algo", "1f1b", "--json", "--out", str(tmp_path / "o")
    )
    assert code == 0, err
    assert json.loads(out)["results"][0]["step_time"] == 117000


def test_dump_formats(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "dump", "--algo", "1f1b", "--pp", "2", "--mb", "2")
    assert code == 0 and out.splitlines()[1].startswith("F0.0 SEND_F0.0>1 F1.0")
    path = tmp_path / "t.json"
    assert (
        run_cli(
            capsys, "dump", "--algo", "zb1p", "--pp", "4", "--mb", "6", "--format", "json", "--out", str(path)
        )[0]
        == 0
    )
    code, out, _ = run_cli(capsys, "dump", "--algo", f"file:{path}", "--check")
    assert code == 0 and "valid" in out
    code, out, _ = run_cli(capsys, "dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--format", "csv")
    assert out.splitlines() == ["0F0,0F1,0B0,0B1", "1F0,1B0,1F1,1B1"]
    code, out, _ = run_cli(capsys, "dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--format", "chrome")
    trace = json.loads(out)
    assert {e["ph"] for e in trace["traceEvents"]} >= {"X", "M", "s", "f"}


def test_file_reads_what_dump_writes_and_compute_only_orders(capsys, tmp_path):
    """Issue 34: `dump --format csv` (torch's compute_only CSV) reads back through file:, and a hand-written
    compute-only text order is lowered (p2p nodes inserted) and validated."""
    path = tmp_path / "zb.csv"
    args = ("--algo", "zero-bubble", "--pp", "2", "--mb", "3", "--format", "csv", "--out", str(path))
    assert run_cli(capsys, "dump", *args)[0] == 0
    code, out, err = run_cli(capsys, "dump", "--algo", f"file:{path}", "--check")
    assert code == 0 and "valid zb: custom (placement=linear, pp=2, vpp=1, micro_batches=3)" in out, err
    mine = tmp_path / "mine.txt"
    mine.write_text(
        "# primuspp schedule algorithm=custom placement=linear pp=2 vpp=1 micro_batches=1\n"
        "F0.0 B0.0 W0.0\nF0.1 B0.1 W0.1\n"
    )
    code, out, err = run_cli(capsys, "dump", "--algo", f"file:{mine}", "--check")
    assert code == 0 and "10 nodes (4 p2p)" in out, err


def test_dump_several_tables_to_a_directory(capsys, tmp_path):
    code, _, _ = run_cli(capsys, "dump", "--format", "json", "--out", str(tmp_path / "d"))
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(
        f"{a}.json"
        for a in [*ALGORITHMS, "1f1b-interleaved-v2"]
        if a not in ("1f1b-interleaved", "1f1b-interleaved-padded", "zb-optimal")
    )


def test_compare_recommends_under_a_limit(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "compare", "--mem-limit", "8", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["recommendation"] == "zbv"
    fits = {r["name"]: r["fits"] for r in doc["results"]}
    assert fits["1f1b-interleaved"] is False and fits["gpipe"] is False
    assert fits["1f1b-interleaved-v4"] is False  # p + (p-1)/v = 9.75
    assert run_cli(capsys, "simulate", "--algo", "1f1b", "--out", str(tmp_path))[0] == 0
    code, out, _ = run_cli(capsys, "compare", str(tmp_path), "--algo", "zero-bubble", "--json")
    assert [r["name"] for r in json.loads(out)["results"]] == ["zero-bubble", "1f1b"]


def test_algorithms_json(capsys):
    code, out, _ = run_cli(capsys, "algorithms", "--json")
    algos = {a["name"]: a for a in json.loads(out)["algorithms"]}
    assert code == 0 and set(algos) == set(ALGORITHMS)
    for record in algos.values():
        assert set(record) >= {"name", "aliases", "placement", "vpp", "constraints", "memory"}
        assert record["constraints"] and record["memory"]
    assert (
        "zb1p" in algos["zero-bubble"]["aliases"] and "zb-auto" in algos["zero-bubble-heuristic"]["aliases"]
    )
    assert algos["dualpipe"]["placement"] == "bidirectional" and algos["zbv"]["vpp"] == "2"
    code, out, _ = run_cli(capsys, "algorithms")
    assert code == 0 and all(name[:8] in out for name in ALGORITHMS)


def test_primus_config_runs_every_scheduler(capsys, tmp_path, primus_data):
    code, out, err = run_cli(
        capsys,
        "simulate",
        "--config",
        str(primus_data / "pp_simulation.yaml"),
        "--json",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    results = {r["name"]: r for r in json.loads(out)["results"]}
    assert (
        results["zbv-formatted"]["step_time"] == 99_500
        and results["zbv-formatted"]["steady_bubble_rate"] == 0
    )
    assert results["v-half"]["peak_memory"] == 5 and results["v-min"]["peak_memory"] == 4
    assert results["zb-heuristic-mem10"]["params"]["max_mem"] == 10
    assert results["zb-heuristic-mem10"]["peak_memory"] <= 10


def test_mem_limit_reaches_memory_aware_algorithms(capsys, tmp_path):
    args = ["simulate", "--algo", "v-auto", "--algo", "zb-auto", "--pp", "4", "--mb", "8"]
    code, out, _ = run_cli(capsys, *args, "--mem-limit", "3", "--json", "--out", str(tmp_path))
    assert code == 0
    for res in json.loads(out)["results"]:
        assert res["params"]["max_mem"] == 3 and res["peak_memory"] <= 3


@pytest.mark.skipif(not solver_available(), reason="highspy not installed")
def test_json_stdout_stays_clean_with_the_solver(tmp_path):
    args = ["simulate", "--algo", "zb-optimal", "--pp", "3", "--mb", "6", "--mem-limit", "2", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "primuspp.commands", *args, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (res,) = json.loads(proc.stdout)["results"]
    assert res["params"]["report"]["gap"] == 0


BAD_INPUT = [
    (["simulate", "--algo", "nope"], "unknown algorithm 'nope' (allowed: gpipe, 1f1b"),
    (
        ["simulate", "--algo", "1f1b", "--pp", "0"],
        "Invalid value for '--pp': 0: expected an integer from 1 to",
    ),
    (["simulate", "--algo", "1f1b", "--mb", "0"], "'--micro-batches': 0: expected an integer from 1 to"),
    (["simulate", "--algo", "1f1b", "--vpp", "2"], "vpp=2 is not allowed for 1f1b (allowed: 1)"),
    (
        ["simulate", "--algo", "interleaved", "--vpp", "1"],
        "vpp=1 is not allowed for 1f1b-interleaved (allowed: >= 2)",
    ),
    (["simulate", "--fwd", "-1"], "'--fwd': -1: expected a finite number ≥ 0"),
    (["simulate", "--comm", "-0.5"], "'--comm': -0.5: expected a finite number ≥ 0"),
    (["simulate", "--pp", "abc"], "--pp"),
    (["simulate", "--bogus"], "No such option: --bogus"),
    (["dump", "--format", "xml"], "'xml' is not one of 'text', 'json', 'csv', 'chrome'"),
    (["dump", "--algo", "file:/nonexistent.json"], "file:/nonexistent.json: no such file"),
    (["compare", "/nonexistent/dir"], "/nonexistent/dir: no such file or directory"),
    (["simulate", "--config", "/nonexistent.yaml"], "--config /nonexistent.yaml: no such file"),
    (["frobnicate"], "No such command"),
    (["simulate", "--algo", "1f1b", "--mem-limit", "x"], "--mem-limit"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT)
def test_bad_input_one_line_exit_2(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        ("pp: [8\n", "malformed YAML at line 2"),
        ("pp: 8\nruns: [{algorithm: 1f1b, foo: 1}]\n", "unknown key 'runs[0].foo'"),
        ("pp: 8\ncosts: {forward: -3}\nruns: [{algorithm: 1f1b}]\n", "costs.forward: must be a number >= 0"),
    ],
)
def test_bad_config_files(capsys, tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, _, err = run_cli(capsys, "simulate", "--config", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_bad_json_table(capsys, tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"ranks": 1}')
    code, _, err = run_cli(capsys, "dump", "--algo", f"file:{path}", "--check")
    assert code == 2 and "not a primuspp schedule" in err


def test_debug_shows_traceback(capsys):
    code, _, err = run_cli(capsys, "--debug", "simulate", "--algo", "nope")
    assert code == 2 and "Traceback" in err


def test_console_script_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "primuspp.commands", "algorithms", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["algorithms"]


def test_a_killed_write_leaves_no_temp_file(tmp_path):
    """Issue 34: a `dump` killed while it writes its file (SIGKILL: no handler runs) leaves nothing in the
    directory for the next run to trip on. The writer is killed once it holds a file open there."""
    import os
    import signal
    import time

    out = tmp_path / "d"
    out.mkdir()
    script = (
        "import sys; from primuspp.outputs import write_file\n"
        "print(flush=True); write_file(sys.argv[1], b'x' * (1 << 28), '--out')\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(out / "t.json")], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()
        fds = f"/proc/{child.pid}/fd"
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if any(os.readlink(f"{fds}/{n}").startswith(str(out)) for n in os.listdir(fds)):
                    break
        assert child.poll() is None, "the write ended before it was seen"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert sorted(p.name for p in out.iterdir()) == []


def test_cost_flags_say_their_unit_and_default(capsys):
    assert main(["simulate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    for part in ("Forward (F) time", "Input-grad (B) time", "Weight-grad (W) time", "p2p transfer in ms"):
        assert part in text
    assert text.count(" in ms (default: the config's, packaged 1000).") == 3 and "packaged 0)." in text


def test_zb_optimal_bound_and_gap_on_the_console(capsys, tmp_path):
    pytest.importorskip("highspy")
    args = ["simulate", "--algo", "zb-optimal", "--pp", "2", "--mb", "4", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "zb-optimal: lower bound 13,000, gap 0.00% (optimal" in out
