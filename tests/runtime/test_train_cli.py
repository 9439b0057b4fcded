"""`primuspp train --backend torch`: JSON output, --verify, pp_data that `compare` reads, one-line errors,
and a failing rank ending the whole run quickly with no process left behind; ranks dying with a killed
launcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from primuspp.commands.app import main
from primuspp.trace.pp_data import read_pp_data


def test_train_verify_json_and_pp_data(capsys, tmp_path):
    dump = tmp_path / "pp"
    args = ["train", "--backend", "torch", "--algo", "zero-bubble", "--pp", "2", "--mb", "3", "--steps", "2"]
    args += ["--hidden", "16"]
    code = main([*args, "--heads", "2", "--seq-len", "8", "--verify", "--json", "--dump-pp-data", str(dump)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["algorithm"] == "zero-bubble" and doc["pp"] == 2 and doc["micro_batches"] == 3
    assert len(doc["steps"]) == 2 and all(s["loss"] > 0 for s in doc["steps"])
    assert all(len(s["peak_activation_bytes"]) == 2 for s in doc["steps"])
    # one meaning in every backend: the step's wall time and, within it, the schedule's span
    assert all(s["step_time_ms"] > 0 and s["pipeline_ms"] > 0 for s in doc["steps"])
    assert doc["step_times_ms"] == [s["step_time_ms"] for s in doc["steps"]] and doc["tokens_per_s"] > 0
    assert doc["verify"]["max_rel_loss_diff"] <= 1e-6 and doc["verify"]["max_rel_grad_diff"] <= 1e-6
    timelines = read_pp_data(dump)
    assert [tl.iteration for tl in timelines] == ["1", "2"]
    kinds = {iv.kind for rt in timelines[0].ranks for iv in rt.intervals}
    assert kinds == {"F", "B", "W"}
    assert sum(1 for iv in timelines[0].ranks[0].intervals if iv.kind == "F") == 3
    assert main(["compare", str(dump), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]


def test_failing_rank_ends_the_run_without_leftovers():
    marker = f"primuspp-test-{uuid.uuid4()}"
    env = {**os.environ, "PRIMUSPP_TEST_MARKER": marker}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "primuspp.commands",
            "train",
            "--backend",
            "torch",
            "--pp",
            "4",
            "--mb",
            "8",
            "--steps",
            "2",
            "--inject-fault",
            "2:F3.2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,  # a hang guard only: how fast ranks are reaped is bench/'s business
    )
    assert proc.returncode == 1
    assert "error: rank 2 failed at F3.2: RuntimeError: injected fault at F3.2" in proc.stderr
    deadline = time.monotonic() + 60  # polls; multiprocessing's resource tracker exits just after its parent
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def sleeping_worker(ctx, ready: str) -> None:
    """Says it started (a file named after its rank in `ready`), then waits longer than any test."""
    (Path(ready) / str(ctx.rank)).touch()
    time.sleep(600)


def test_ranks_die_with_a_killed_launcher(tmp_path):
    marker = f"primuspp-test-{uuid.uuid4()}"
    code = "import sys; from primuspp.runtime.launch import launch; from tests.runtime import test_train_cli"
    code += "; launch(test_train_cli.sleeping_worker, 2, sys.argv[1])"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PRIMUSPP_TEST_MARKER": marker}
    launcher = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=root, env=env)
    try:
        deadline = time.monotonic() + 300  # a hang guard only
        while len(list(tmp_path.iterdir())) < 2 and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    deadline = time.monotonic() + 60
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (the CLI and every rank it spawned)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found
