"""Optimizer post-validation on real gloo processes (torch backend, fp32): every algorithm at p=2 and p=4
trains the same steps synchronously and post-validated, and the two must agree bit for bit: losses, every
parameter after the last step, and each step's outcome, on every rank.

Three situations: clipping never triggered (every post-validated step validated); clipping forced on one
step by a tiny threshold there (that step rolled back and redone); an inf in one rank's gradient on one step
(that step skipped on every rank, the parameters left as they were). A few cases use Adam, so a rollback
restores optimizer state too; the CLI reports the outcome counts."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
import torch
import torch.distributed as dist

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.backends.torch.gpt import GPTConfig, gpt_loss
from primuspp.backends.torch.pipeline import TorchPipeline
from primuspp.backends.torch.train import (
    TrainSpec,
    _drop_grads,
    _inject_inf,
    _validator,
    rank_stages,
    step_data,
)
from primuspp.commands.app import main
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.runtime.post_validation import StepValidator, decide, local_partials
from tests.runtime.test_distributed import admissible_sizes
from tests.runtime.workers import run_jobs

GPT = dict(vocab=32, seq_len=8, hidden=16, heads=2)
STEPS = 3
NEVER = 1e6  # a clip threshold no gradient norm here reaches
FORCED_STEP, TINY = 1, 1e-3
INF_STEP = 1
ADAM = ("zbv", "1f1b", "zero-bubble")


@dataclass(frozen=True)
class Case:
    spec: TrainSpec
    clips: tuple[float, ...]  # the clip threshold of each step
    inf_at: tuple[int, int] | None = None  # (rank, step) where a gradient entry becomes inf
    adam: bool = False


_GROUP: list = []


def _group():
    """One gloo group for every case's reductions (groups are collective to create: same order everywhere)."""
    if not _GROUP:
        _GROUP.append(dist.new_group(backend="gloo"))
    return _GROUP[0]


def case_worker(ctx: WorkerContext, case: Case) -> tuple[list[float], list[str], dict]:
    """The torch backend's training loop (train_worker's) with a per-step clip threshold: (losses,
    outcomes, parameters, replays: steps run again because the step before them was rolled back or
    skipped after they had started on its optimistic weights)."""
    spec = case.spec
    stages = rank_stages(spec, ctx.rank)
    pipe = TorchPipeline(
        spec.table, ctx.rank, stages, gpt_loss, spec.gpt.boundary(spec.micro_batch_size), check=False
    )
    validator = _validator(spec, stages)
    validator.group = _group()
    if case.adam:
        opt = torch.optim.Adam(validator.params, lr=1e-2)
        validator = StepValidator(
            validator.params,
            opt.step,
            optimizer=opt,
            post=spec.post_validation,
            counted=validator.counted,
            group=_group(),
        )
    losses, replays = [], 0
    for step in range(spec.steps):
        data = step_data(spec, step)
        result = pipe.step(data, sync_start=not spec.post_validation)  # on the optimistic weights
        if validator.pending and validator.finish() != "validated":
            _drop_grads(stages)
            result = pipe.step(data, sync_start=False)
            replays += 1
        validator.clip_grad = case.clips[step]
        if case.inf_at == (ctx.rank, step):
            _inject_inf(stages, validator)
        validator.step()
        losses.append(result.loss)
    validator.finish()
    params = {(s, n): p.detach().clone() for s, m in stages.items() for n, p in m.named_parameters()}
    return losses, validator.outcomes, params, replays


def small_size(name: str, p: int) -> tuple[int, int] | None:
    """(vpp, m) for `name` at p ranks: the smallest admitted m above p that is not a multiple of p (a
    steady phase and a partial round, as the larger sizes of test_distributed have, at half their cost),
    else test_distributed's first size."""
    sizes = admissible_sizes(name, p)
    if not sizes:
        return None
    v = sizes[0][0]
    algo = ALGORITHMS[name]
    odd = [m for m in range(p + 1, 2 * p + 2) if m % p and not algo.refuse(p, v, m, {})]
    return (v, odd[0]) if odd else sizes[0]


def cases(p: int) -> dict[str, Case]:
    out = {}
    for name in ALGORITHMS:
        size = small_size(name, p)
        if size is None:
            continue
        v, m = size
        table = build_schedule(name, p, v, m)
        parts = len(set(table.placement.model_part))
        spec = TrainSpec(table, GPTConfig(layers=parts, **GPT), steps=STEPS, track_memory=False)
        forced = tuple(TINY if s == FORCED_STEP else NEVER for s in range(STEPS))
        kinds = {
            "never": Case(spec, (NEVER,) * STEPS),
            "forced": Case(spec, forced),
            "overflow": Case(spec, (NEVER,) * STEPS, inf_at=(p - 1, INF_STEP)),
        }
        if name in ADAM:
            kinds["adam-forced"] = Case(spec, forced, adam=True)
        for kind, case in kinds.items():
            for mode in ("sync", "post"):
                job = replace(case, spec=replace(case.spec, post_validation=mode == "post"))
                out[f"{name}-p{p}-{kind}-{mode}"] = job
    return out


@pytest.fixture(scope="module")
def runs():
    out = {}
    for p in (4, 2):
        jobs = cases(p)
        results = launch(run_jobs, p, [(case_worker, case) for case in jobs.values()])
        for i, name in enumerate(jobs):
            out[name] = [per_rank[i] for per_rank in results]
    return out


def _names(kind: str) -> list[str]:
    return [n.removesuffix("-sync") for p in (4, 2) for n in cases(p) if f"-{kind}-sync" in n]


def _same(sync: list, post: list) -> None:
    for rank, ((l_s, _, p_s, _), (l_p, _, p_p, _)) in enumerate(zip(sync, post, strict=True)):
        assert l_s == l_p, f"rank {rank}: losses {l_s} != {l_p}"
        assert p_s.keys() == p_p.keys()
        for key in p_s:
            assert torch.equal(p_s[key], p_p[key]), f"rank {rank}: parameter {key} differs"


def _step_loss(per_rank: list, step: int) -> float:
    return sum(losses[step] for losses, _, _, _ in per_rank)


def _outcomes(per_rank: list, post: bool) -> list[str]:
    first = per_rank[0][1]
    assert all(outcomes == first for _, outcomes, _, _ in per_rank), "the ranks decided differently"
    # each step rolled back or skipped (but the last) made every rank run the next step again
    replays = sum(1 for outcome in first[:-1] if outcome in ("rolled_back", "skipped")) if post else 0
    assert all(r == replays for _, _, _, r in per_rank)
    return first


@pytest.mark.parametrize("name", _names("never"))
def test_never_clipped_equals_synchronous(runs, name):
    sync, post = runs[f"{name}-sync"], runs[f"{name}-post"]
    _same(sync, post)
    assert _outcomes(sync, post=False) == ["stepped"] * STEPS
    assert _outcomes(post, post=True) == ["validated"] * STEPS


@pytest.mark.parametrize("name", _names("forced") + _names("adam-forced"))
def test_forced_clip_rolls_back_to_the_synchronous_result(runs, name):
    sync, post = runs[f"{name}-sync"], runs[f"{name}-post"]
    _same(sync, post)
    want = ["validated"] * STEPS
    want[FORCED_STEP] = "rolled_back"
    assert _outcomes(post, post=True) == want
    assert _outcomes(sync, post=False)[FORCED_STEP] == "clipped"
    if "adam" not in name:  # the clip changed the trajectory: the redone step is not the optimistic one
        never = runs[name.replace("forced", "never") + "-sync"]
        assert _step_loss(never, FORCED_STEP + 1) != _step_loss(post, FORCED_STEP + 1)


@pytest.mark.parametrize("name", _names("overflow"))
def test_overflow_skips_the_step_everywhere(runs, name):
    sync, post = runs[f"{name}-sync"], runs[f"{name}-post"]
    _same(sync, post)
    want = ["validated"] * STEPS
    want[INF_STEP] = "skipped"
    assert _outcomes(post, post=True) == want
    assert _outcomes(sync, post=False)[INF_STEP] == "skipped"
    never = runs[name.replace("overflow", "never") + "-sync"]
    # the same run up to the overflow, which then changed nothing: the next loss is not the stepped run's
    assert _step_loss(never, INF_STEP) == _step_loss(post, INF_STEP)
    assert _step_loss(never, INF_STEP + 1) != _step_loss(post, INF_STEP + 1)


def test_skip_leaves_the_parameters_untouched():
    """One step with an overflow on the last rank: every rank ends with its initial parameters."""
    table = build_schedule("zbv", 2, 2, 4)
    spec = TrainSpec(table, GPTConfig(layers=4, **GPT), steps=1, track_memory=False, post_validation=True)
    per_rank = launch(run_jobs, 2, [(case_worker, Case(spec, (NEVER,), inf_at=(1, 0)))])
    for rank, (results,) in enumerate(per_rank):
        _, outcomes, params, _ = results
        assert outcomes == ["skipped"]
        initial = rank_stages(spec, rank)
        for (s, n), value in params.items():
            assert torch.equal(value, dict(initial[s].named_parameters())[n].detach()), (rank, s, n)


def test_decide_follows_megatron_clip_rule():
    grads = [torch.tensor([3.0, 4.0]), None, torch.tensor([12.0])]
    partials = local_partials(grads)
    assert partials.tolist() == [169.0, 0.0]
    assert decide(partials, None) == decide(partials, 13.5)
    assert decide(partials, None).coeff == 1.0 and decide(partials, None).norm == 13.0
    clipped = decide(partials, 6.5)
    assert not clipped.skip and clipped.coeff == 6.5 / (13.0 + 1e-6)
    assert decide(local_partials([torch.tensor([1.0, float("nan")])]), 1.0).skip
    assert local_partials([torch.tensor([1e30, 1e30])]).tolist()[1] == 0.0  # fp64: no false overflow
    assert local_partials([torch.tensor([20.0])], inv_scale=0.25).tolist() == [25.0, 0.0]


def test_train_cli_reports_post_validation(capsys):
    base = ["train", "--backend", "torch", "--algo", "zbv", "--pp", "2", "--mb", "4", "--steps", "3"]
    base += ["--hidden", "16", "--heads", "2", "--seq-len", "8", "--no-dump", "--json", "--clip-grad"]
    docs = {}
    post = ["--post-validation"]
    for threshold, flags in (("1000", post), ("0.001", post), ("0.001", [])):
        assert main([*base, threshold, *flags]) == 0
        docs[threshold, bool(flags)] = json.loads(capsys.readouterr().out)
    assert docs["1000", True]["post_validation"] == {"validated": 3, "rolled_back": 0, "skipped": 0}
    assert docs["0.001", True]["post_validation"] == {"validated": 0, "rolled_back": 3, "skipped": 0}
    assert "post_validation" not in docs["0.001", False]
    losses = {key: [s["loss"] for s in doc["steps"]] for key, doc in docs.items()}
    assert losses["0.001", True] == losses["0.001", False]
    assert losses["1000", True][2] != losses["0.001", True][2]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--clip-grad", "0"], "error: --clip-grad 0.0: expected a finite number > 0"),
        (["--clip-grad", "nan"], "error: --clip-grad nan: expected a finite number > 0"),
        (["--clip-grad", "1", "--emulate"], "error: --clip-grad the emulated cluster computes nothing"),
    ],
)
def test_train_cli_refuses(capsys, flags, message):
    args = ["train", "--backend", "torch", "--pp", "2", "--mb", "2", "--no-dump", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
