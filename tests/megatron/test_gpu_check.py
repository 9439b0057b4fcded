"""bench/gpu_check.py, the GPU check, run on the CPU over gloo (--cpu) on tiny dense and MoE models: every
algorithm's gradients equal one process, and it prints the split cost and step time per algorithm."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--layers", "4", "--mb", "4", "--steps", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16"]


def test_gpu_check_runs_on_cpu():
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", *TINY, "--vocab", "64", "--json"]
    cmd += ["--models", "dense", "moe", "--moe-experts", "4", "--moe-topk", "2", "--ep", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    # per step: every parameter of the 4-layer model; an MoE layer has 15 (no linear biases; router, 4 x 2
    # expert weights), a dense layer 12, plus the embeddings, final norm and output layer
    tensors = {"dense": 2 * 53, "moe": 2 * (4 * 15 + 5)}
    for model in ("dense", "moe"):
        rows = {r["algorithm"]: r for r in doc["rows"] if r["model"] == model}
        assert set(rows) == {"zbv", "dualpipe-v", "1f1b"}, model
        for r in rows.values():
            assert r["passed"] and r["grad_diff"] <= 1e-6 and r["loss_diff"] <= 1e-6, (model, r)
            assert r["tensors"] == tensors[model], (model, r["tensors"])
            assert r["step_ms"] > 0
        assert rows["zbv"]["split_cost"] > 0 and rows["zbv"]["W_ms"] > 0  # split: B and W nodes
        assert rows["1f1b"]["W_ms"] is None and rows["1f1b"]["BW_ms"] > 0  # unsplit


def test_gpu_check_bad_moe_flags_are_one_line():
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--moe-experts", "6", "--ep", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.startswith("error: --ep 4: must divide --moe-experts 6") and done.stderr.count("\n") == 1
    )


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
