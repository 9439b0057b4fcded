"""Optimizer post-validation with the Megatron backend (megatron-core GPT, DDP gradient buffers, Adam) at
p=2: for a few algorithms, the post-validated run equals the synchronous one exactly, step by step, with
clipping never triggered, with clipping on every step (each step rolled back and redone, Adam's state
restored), and with an inf injected into one rank's gradient (that step skipped on every rank). The CLI's
`--post-validation --json` reports the outcome counts."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.megatron.model import GPTSpec
from primuspp.backends.megatron.train import TrainSpec, train_worker
from primuspp.commands.app import main
from primuspp.runtime.launch import launch
from tests.runtime.workers import run_jobs

STEPS = 3
INF_STEP = 1
ALGORITHMS = {"1f1b": 1, "zbv": 2, "zero-bubble": 1}  # name -> model chunks per rank
NEVER = 1e6  # a clip threshold no gradient norm here reaches
KINDS = {
    "never": {"clip_grad": NEVER},
    "clip": {"clip_grad": 1e-3},
    "inf": {"clip_grad": NEVER, "inject_inf": (1, INF_STEP)},
}


def _spec(name: str, vpp: int) -> TrainSpec:
    table = build_schedule(name, 2, vpp, 4)
    model = GPTSpec(layers=4, hidden=32, heads=2, seq_len=32)
    return TrainSpec(table, model, steps=STEPS, track_memory=False)


@pytest.fixture(scope="module")
def runs():
    jobs = {}
    for name, vpp in ALGORITHMS.items():
        for kind, settings in KINDS.items():
            for mode in ("sync", "post"):
                spec = replace(_spec(name, vpp), post_validation=mode == "post", **settings)
                jobs[name, kind, mode] = spec
    results = launch(run_jobs, 2, [(train_worker, spec) for spec in jobs.values()])
    return {key: [per_rank[i] for per_rank in results] for i, key in enumerate(jobs)}


def _losses(per_rank: list) -> list[float]:
    return [sum(records[i].loss for records in per_rank) for i in range(STEPS)]


def _outcomes(per_rank: list) -> list[str | None]:
    first = [r.outcome for r in per_rank[0]]
    assert all([r.outcome for r in records] == first for records in per_rank), "ranks decided differently"
    return first


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_post_validated_equals_synchronous(runs, name):
    for kind in KINDS:
        sync, post = runs[name, kind, "sync"], runs[name, kind, "post"]
        assert _losses(sync) == _losses(post), kind
    assert _outcomes(runs[name, "never", "post"]) == ["validated"] * STEPS
    assert _outcomes(runs[name, "never", "sync"]) == ["stepped"] * STEPS
    assert _outcomes(runs[name, "clip", "post"]) == ["rolled_back"] * STEPS
    assert _outcomes(runs[name, "clip", "sync"]) == ["clipped"] * STEPS
    skipped = ["validated"] * STEPS
    skipped[INF_STEP] = "skipped"
    assert _outcomes(runs[name, "inf", "post"]) == skipped
    assert _outcomes(runs[name, "inf", "sync"])[INF_STEP] == "skipped"
    # the clip and the skip did something: the step after them differs from the unclipped run's
    never = _losses(runs[name, "never", "post"])
    assert _losses(runs[name, "clip", "post"])[1:] != never[1:]
    inf = _losses(runs[name, "inf", "post"])
    assert inf[: INF_STEP + 1] == never[: INF_STEP + 1] and inf[INF_STEP + 1] != never[INF_STEP + 1]


def test_cli_reports_post_validation(capsys):
    args = ["train", "--algo", "zbv", "--pp", "2", "--mb", "4", "--layers", "4", "--hidden", "32"]
    args += ["--heads", "2", "--seq-len", "32", "--steps", "3", "--no-dump", "--json"]
    code = main([*args, "--post-validation", "--clip-grad", "1e-3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["post_validation"] == {"validated": 0, "rolled_back": 3, "skipped": 0}
