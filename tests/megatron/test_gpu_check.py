"""bench/gpu_check.py, the GPU check, run on the CPU over gloo (--cpu) on a tiny model: every algorithm's
gradients equal one process, and it prints the split cost and step time per algorithm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_cpu():
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--layers", "4", "--mb", "4"]
    cmd += ["--steps", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--vocab", "64", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    rows = {r["algorithm"]: r for r in doc["rows"]}
    assert set(rows) == {"zbv", "dualpipe-v", "1f1b"}
    for r in rows.values():
        assert r["passed"] and r["grad_diff"] <= 1e-6 and r["loss_diff"] <= 1e-6
        assert r["tensors"] == 2 * 53  # every parameter of the 4-layer model, both steps
        assert r["step_ms"] > 0
    assert rows["zbv"]["split_cost"] > 0 and rows["zbv"]["W_ms"] > 0  # split: B and W nodes
    assert rows["1f1b"]["W_ms"] is None and rows["1f1b"]["BW_ms"] > 0  # unsplit


def test_gpu_check_without_a_gpu_says_so():
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available: the check would run")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py")], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1"}
