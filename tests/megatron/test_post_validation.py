"""Optimizer post-validation with the Megatron backend (megatron-core GPT, DDP gradient buffers, Adam) at
p=2: for a few algorithms, the post-validated run equals the synchronous one exactly, step by step, with
clipping never triggered, with clipping on every step (each step rolled back and redone, Adam's state
restored, the next step run again), the same through install()'s path (each step waits for the last one's
check), and with an inf injected into one rank's gradient (that step skipped on every rank). Also loss
scaling with Megatron's grad scaler. The CLI's
`--post-validation --json` reports the outcome counts. With TP 2 and with EP 2 (zbv, p=2, 4 ranks): the
same equalities, and clipping equal to megatron-core's own norm and clip over its optimizers' groups."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.megatron.model import GPTSpec
from primuspp.backends.megatron.train import TrainSpec, train_worker
from primuspp.commands.app import main
from primuspp.runtime.launch import launch
from tests.oracles.megatron_clip import megatron_clip
from tests.runtime.workers import run_jobs

STEPS = 3
INF_STEP = 1
ALGORITHMS = {"1f1b": 1, "zbv": 2, "zero-bubble": 1}  # name -> model chunks per rank
NEVER = 1e6  # a clip threshold no gradient norm here reaches
KINDS = {
    "never": {"clip_grad": NEVER},
    "clip": {"clip_grad": 1e-3},
    "inf": {"clip_grad": NEVER, "inject_inf": (1, INF_STEP)},
    # install()'s path: each step waits for the last one's check (no replay)
    "clip-install": {"clip_grad": 1e-3, "validate_before_step": True},
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
    assert _outcomes(runs[name, "clip-install", "post"]) == ["rolled_back"] * STEPS
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


SCALE_STEPS = 5


def scaler_worker(ctx, job: tuple[bool, float, tuple[int, int] | None]) -> tuple:
    """Adam on one Linear per rank, gradients of a scaled loss (times the scaler's scale, an inf where
    asked), Megatron's DynamicGradScaler: (parameters, scale after each step, outcomes, norms, squared
    true norms, final scale)."""
    import torch
    from megatron.core.optimizer import grad_scaler

    from primuspp.backends.megatron import cpu
    from primuspp.runtime.post_validation import StepValidator

    post, clip, inf_at = job
    grad_scaler.torch = cpu._TORCH_ON_CPU  # its scale tensors on the CPU, as the CPU backend does for DDP
    scaler = grad_scaler.DynamicGradScaler(2.0**12, 1.0, 2.0, 0.5, growth_interval=2, hysteresis=1)
    torch.manual_seed(ctx.rank)
    layer = torch.nn.Linear(4, 3)
    params = list(layer.parameters())
    opt = torch.optim.Adam(params, lr=0.1)
    validator = StepValidator(params, opt.step, optimizer=opt, clip_grad=clip, post=post, scaler=scaler)
    scales, true_sumsq = [], []
    for step in range(SCALE_STEPS):
        validator.finish()
        gen = torch.Generator().manual_seed(100 * step + ctx.rank)
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        true_sumsq.append(sum(float(g.double().square().sum()) for g in grads))
        scale = float(scaler.scale.item())
        for p, g in zip(params, grads, strict=True):
            p.grad = g * scale
        if inf_at == (ctx.rank, step):
            params[0].grad.view(-1)[0] = float("inf")
        validator.step()
        scales.append(float(scaler.scale.item()))  # synchronous: updated by this step (post: at finish())
    validator.finish()
    final = [p.detach().clone() for p in params]
    return final, scales, validator.outcomes, validator.norms, true_sumsq, float(scaler.scale.item())


def test_loss_scaling_and_overflow_with_megatron_grad_scaler():
    jobs = [(post, clip, inf) for inf in (None, (1, 2)) for clip in (None, 1.0) for post in (False, True)]
    results = launch(run_jobs, 2, [(scaler_worker, job) for job in jobs])
    by_job = {job: [per_rank[i] for per_rank in results] for i, job in enumerate(jobs)}
    for (post, clip, inf), per_rank in by_job.items():
        if not post:
            continue
        sync = by_job[False, clip, inf]
        for rank, (got, want) in enumerate(zip(per_rank, sync, strict=True)):
            assert all(a.equal(b) for a, b in zip(got[0], want[0], strict=True)), (clip, inf, rank)
            assert got[5] == want[5]  # the same final loss scale
        outcomes = per_rank[0][2]
        assert all(r[2] == outcomes for r in per_rank)
        # the norm decided on is the unscaled gradients' (both ranks' partials summed)
        totals = [sum(r[4][s] for r in per_rank) for s in range(SCALE_STEPS)]
        for s, norm in enumerate(per_rank[0][3]):
            if outcomes[s] != "skipped":
                assert abs(norm - totals[s] ** 0.5) <= 1e-9 * norm
        if inf is not None:
            assert outcomes[inf[1]] == "skipped"
            assert sync[0][1][inf[1]] == sync[0][1][inf[1] - 1] / 2  # the scale backed off at the overflow
        if clip is not None:
            assert "rolled_back" in outcomes


# -- tensor and expert parallelism: p=2 with TP=2, and p=2 with EP=2 (MoE), 4 gloo ranks each ----------------

#: name -> (algorithm, model chunks per rank, tp, ep, MoE)
PARALLEL = {"tp": ("zbv", 2, 2, 1, False), "ep": ("zbv", 2, 1, 2, True)}
#: kind -> (mode, settings); "megatron": the synchronous step clipped by megatron-core's own functions
PARALLEL_KINDS = {
    ("never", "sync"): {"clip_grad": NEVER},
    ("never", "post"): {"clip_grad": NEVER, "post_validation": True},
    ("clip", "sync"): {"clip_grad": 1e-3},
    ("clip", "post"): {"clip_grad": 1e-3, "post_validation": True},
    ("clip", "megatron"): {"clip_grad": 1e-3, "clip": megatron_clip},
    ("inf", "sync"): {"clip_grad": NEVER, "inject_inf": (1, INF_STEP)},
    ("inf", "post"): {"clip_grad": NEVER, "inject_inf": (1, INF_STEP), "post_validation": True},
}
#: float32 norm (megatron-core) against float64 partials (the validator): the clip coefficients differ in
#: the last float32 bits, and Adam's first steps amplify that little
MEGATRON_TOL = 1e-4
NORM_TOL = 1e-6  # float32 sums of squares against float64 ones


def _parallel_spec(name: str) -> TrainSpec:
    from primuspp.backends.megatron import moe

    algo, vpp, tp, ep, with_moe = PARALLEL[name]
    settings = moe.settings(experts=4, topk=2, ffn=32, shared_ffn=16) if with_moe else ()
    model = GPTSpec(layers=4, hidden=32, heads=2, seq_len=32, settings=settings)
    table = build_schedule(algo, 2, vpp, 4)
    return TrainSpec(table, model, steps=STEPS, track_memory=False, tp=tp, ep=ep)


def _parameters(root, world: int) -> list[dict]:
    """Each rank's parameters after the last step (its checkpoint file)."""
    from primuspp.backends.megatron import checkpoint

    final = checkpoint.step_dir(Path(root), STEPS)
    return [checkpoint.load_state(final / f"rank_{r}.pt")["model"] for r in range(world)]


@pytest.fixture(scope="module")
def parallel_runs(tmp_path_factory):
    out = {}
    for name in PARALLEL:
        base = _parallel_spec(name)
        jobs = {}
        for key, settings in PARALLEL_KINDS.items():
            root = tmp_path_factory.mktemp(f"{name}-{key[0]}-{key[1]}")
            jobs[key] = replace(base, save=str(root), **settings)
        results = launch(run_jobs, base.world, [(train_worker, spec) for spec in jobs.values()])
        for i, (key, spec) in enumerate(jobs.items()):
            per_rank = [per_rank[i] for per_rank in results]
            out[(name, *key)] = (per_rank, _parameters(spec.save, base.world))
    return out


def _max_rel(a: dict, b: dict) -> float:
    worst = 0.0
    for k in a:
        scale = float(b[k].abs().max()) or 1.0
        worst = max(worst, float((a[k] - b[k]).abs().max()) / scale)
    return worst


@pytest.mark.parametrize("name", list(PARALLEL))
def test_post_validated_equals_synchronous_with_tp_and_ep(parallel_runs, name):
    """(a) clipping never triggered, and the rollback and the skip: the post-validated run equals the
    synchronous one bit for bit (losses, and every rank's parameters after the last step)."""
    for kind in ("never", "clip", "inf"):
        (sync, sync_params), (post, post_params) = (parallel_runs[name, kind, m] for m in ("sync", "post"))
        assert _losses(sync) == _losses(post), kind
        for rank, (a, b) in enumerate(zip(sync_params, post_params, strict=True)):
            assert a.keys() == b.keys()
            assert all(a[k].equal(b[k]) for k in a), (kind, rank)
    assert _outcomes(parallel_runs[name, "never", "post"][0]) == ["validated"] * STEPS
    assert _outcomes(parallel_runs[name, "never", "sync"][0]) == ["stepped"] * STEPS
    assert _outcomes(parallel_runs[name, "clip", "post"][0]) == ["rolled_back"] * STEPS
    assert _outcomes(parallel_runs[name, "clip", "sync"][0]) == ["clipped"] * STEPS
    # (c) an inf on one rank (TP rank 1 of stage 0, or EP rank 1 of stage 0) skips the step on every rank
    skipped = ["validated"] * STEPS
    skipped[INF_STEP] = "skipped"
    assert _outcomes(parallel_runs[name, "inf", "post"][0]) == skipped
    assert _outcomes(parallel_runs[name, "inf", "sync"][0])[INF_STEP] == "skipped"
    never = _losses(parallel_runs[name, "never", "post"][0])
    inf = _losses(parallel_runs[name, "inf", "post"][0])
    assert inf[: INF_STEP + 1] == never[: INF_STEP + 1] and inf[INF_STEP + 1] != never[INF_STEP + 1]


@pytest.mark.parametrize("name", list(PARALLEL))
def test_clipping_with_tp_and_ep_equals_megatron_core(parallel_runs, name):
    """(b) clipping forced on every step: the post-validated run (rolled back and redone each step) equals
    the synchronous step clipped by megatron-core's get_grad_norm_fp32 / clip_grad_by_total_norm_fp32 over
    its optimizers' groups, to float32 rounding of the norm; and the clip did something."""
    post, post_params = parallel_runs[name, "clip", "post"]
    ref, ref_params = parallel_runs[name, "clip", "megatron"]
    assert _outcomes(ref) == [None] * STEPS  # megatron-core's path, not the validator
    # the norm each step was decided on: the same on every rank, and megatron-core's (float32) within its
    # rounding at the first step (the same gradients in both runs), within MEGATRON_TOL after
    norms = [[[r.grad_norm for r in records] for records in per_rank] for per_rank in (post, ref)]
    assert all(n == norms[0][0] for n in norms[0]) and all(n == norms[1][0] for n in norms[1])
    for step, (got, want) in enumerate(zip(norms[0][0], norms[1][0], strict=True)):
        assert abs(got - want) <= (NORM_TOL if step == 0 else MEGATRON_TOL) * want, (step, got, want)
    for a, b in zip(_losses(post), _losses(ref), strict=True):
        assert abs(a - b) <= MEGATRON_TOL * abs(b), (a, b)
    for rank, (a, b) in enumerate(zip(post_params, ref_params, strict=True)):
        assert _max_rel(a, b) <= MEGATRON_TOL, rank
    never = parallel_runs[name, "never", "post"]
    assert _losses(post)[1:] != _losses(never[0])[1:]
    assert any(not all(a[k].equal(b[k]) for k in a) for a, b in zip(post_params, never[1], strict=True))


@pytest.mark.parametrize("flags", [("--tp", "2"), ("--moe-experts", "4", "--moe-topk", "2", "--ep", "2")])
def test_cli_post_validation_with_tp_and_ep(capsys, flags):
    """No longer refused: `train --tp 2` / `--ep 2` with `--post-validation --clip-grad` runs and reports."""
    args = ["train", "--algo", "zbv", "--pp", "2", "--mb", "4", "--layers", "4", "--hidden", "32"]
    args += ["--heads", "2", "--seq-len", "32", "--steps", "2", "--no-dump", "--json", *flags]
    code = main([*args, "--post-validation", "--clip-grad", "1e-3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["post_validation"] == {"validated": 0, "rolled_back": 2, "skipped": 0}


def test_uncounted_gradients_still_flag_an_overflow():
    """A TP duplicate or a data-parallel replica does not count in the norm, but its inf skips the step."""
    import torch

    from primuspp.runtime.post_validation import decide, local_partials

    counted, other = torch.tensor([3.0, 4.0]), torch.tensor([1.0, float("inf")])
    assert local_partials([counted], also_check=[other]).tolist() == [25.0, 1.0]
    assert decide(local_partials([counted], also_check=[other]), 1.0).skip
    assert local_partials([counted], also_check=[torch.ones(2), None]).tolist() == [25.0, 0.0]
