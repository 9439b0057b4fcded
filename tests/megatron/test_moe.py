"""MoE layers (router, experts, shared expert, load-balancing aux loss) under primuspp's schedule on real gloo
ranks: losses and every gradient (router and experts included) equal the one-process Megatron reference for
every registered algorithm the backend runs at p=2 with EP 1, and for one algorithm of each kind of table
(COVER) at p=2 with EP 2 and at p=4 with EP 1; the experts'
grouped GEMM defers its weight gradients to W on split tables. Plus the expert naming and the flag checks."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import torch

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.errors import ConfigError
from primuspp.runtime.launch import WorkerContext, launch
from tests.megatron.test_pipeline import TOL, differences
from tests.megatron.workers import LR, MBS, SPEC, _data, _forward_step, _loss_collect, _step_loss

MOE = dict(experts=4, topk=2, ffn=32, shared_ffn=16)
SPLIT = ("zero-bubble", "zb-h2", "zero-bubble-heuristic", "zb-optimal", "zbv", "v-half", "v-min", "v-auto")


@dataclass(frozen=True)
class MoEJob:
    algorithm: str
    p: int
    v: int
    m: int
    ep: int = 1
    steps: int = 2

    @property
    def name(self) -> str:
        return f"{self.algorithm}-p{self.p}-v{self.v}-m{self.m}-ep{self.ep}"

    # what tests.megatron.workers' _data and _step_loss read
    @property
    def dp(self) -> int:
        return self.ep

    per_token = False


def _algorithms() -> list[tuple[str, int]]:
    import importlib.util

    out = []
    for a in ALGORITHMS.values():
        if a.placement == "bidirectional":  # dualpipe: refused by the Megatron backend (its own test)
            continue
        if a.name == "zb-optimal" and importlib.util.find_spec("highspy") is None:
            continue
        out.append((a.name, a.vpp_default))
    return out


#: one algorithm of each way the backend runs a table: linear (unsplit, split), loop (interleaved), V
#: (split) and V with FB nodes; the other algorithms differ from these only in their order
COVER = ("1f1b", "zero-bubble", "1f1b-interleaved", "zbv", "dualpipe-v")


def jobs(p: int, ep: int) -> list[MoEJob]:
    """Every algorithm at p=2, EP 1; COVER at the other groups."""
    return [MoEJob(a, p, v, 2 * p, ep) for a, v in _algorithms() if (p, ep) == (2, 1) or a in COVER]


def _spec() -> Any:
    from primuspp.backends.megatron import moe
    from primuspp.backends.megatron.model import GPTSpec

    return GPTSpec(**SPEC, settings=moe.settings(**MOE))


def run_moe_jobs(ctx: WorkerContext, todo: list[MoEJob]) -> list[dict]:
    return [run_moe_job(ctx, job) for job in todo]


def run_moe_job(ctx: WorkerContext, job: MoEJob) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import schedules

    from primuspp.algorithms.registry import get_algorithm
    from primuspp.backends.kernels import grouped as G
    from primuspp.backends.megatron import schedule as S
    from primuspp.backends.megatron.model import rank_chunks
    from primuspp.backends.megatron.train import named_parameters, setup_parallel, wrap_ddp
    from primuspp.schedule.placement import make_placement

    setup_parallel(job.p, 1, ctx.device, ep=job.ep)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(job.v if job.v > 1 else None)
    spec = _spec()
    placement = make_placement(get_algorithm(job.algorithm).placement, job.p, job.v)
    chunks, ranges = rank_chunks(spec, placement, parallel_state.get_pipeline_model_parallel_rank())
    ddps = wrap_ddp(chunks)
    named = named_parameters(ddps, ranges)
    counts = {"defer": 0, "now": 0}
    original = G._GroupedLinear.backward

    def counting(ctx_, dy):
        counts["defer" if ctx_.store is not None and ctx_.store.defer else "now"] += 1
        return original(ctx_, dy)

    G._GroupedLinear.backward = staticmethod(counting)
    S.install(job.algorithm)
    fb = schedules.get_forward_backward_func()
    result: dict[str, Any] = {"losses": [], "grads": []}
    try:
        for step in range(job.steps):
            for d in ddps:
                d.zero_grad_buffer()
            data = _data(job, step, parallel_state.get_data_parallel_rank())
            iters = [iter(data) for _ in ddps]
            store = fb(
                forward_step_func=partial(_forward_step, _loss_collect),
                data_iterator=iters if len(ddps) > 1 else iters[0],
                model=ddps,
                num_microbatches=job.m,
                seq_length=SPEC["seq_len"],
                micro_batch_size=MBS,
            )
            result["losses"].append(_step_loss(job, store) / job.ep)  # share of the replicas' mean
            result["grads"].append({name: p.main_grad.clone() for name, p in named})
            with torch.no_grad():
                for _, p in named:
                    p.add_(p.main_grad, alpha=-LR)
    finally:
        G._GroupedLinear.backward = original
        S.uninstall()
    result["grouped"] = counts
    result["reference"] = reference(job) if ctx.rank == 0 else None
    return result


_REFERENCES: dict[tuple, dict[str, Any]] = {}


def reference(job: MoEJob) -> dict[str, Any]:
    """One process, the whole model (every expert), Megatron's `forward_backward_no_pipelining` over every
    replica's microbatches, the same SGD: once per rank process for the jobs (algorithms) that share it."""
    key = (job.m, job.ep, job.steps)
    if key not in _REFERENCES:
        _REFERENCES[key] = _reference(job)
    return _REFERENCES[key]


def _reference(job: MoEJob) -> dict[str, Any]:
    from megatron.core.pipeline_parallel import schedules

    from primuspp.backends.megatron.model import whole_model

    model = whole_model(_spec())
    out: dict[str, Any] = {"losses": [], "grads": []}
    for step in range(job.steps):
        model.zero_grad()
        data = [mb for shard in range(job.ep) for mb in _data(job, step, shard)]
        store = schedules.forward_backward_no_pipelining(
            forward_step_func=partial(_forward_step, _loss_collect),
            data_iterator=iter(data),
            model=[model],
            num_microbatches=job.m * job.ep,
            seq_length=SPEC["seq_len"],
            micro_batch_size=MBS,
        )
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        out["losses"].append(_step_loss(job, store, job.m * job.ep))
        out["grads"].append(grads)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.add_(grads[n], alpha=-LR)
    out["aux_changes_router_grad"] = _aux_changes_router_grad(job)
    return out


def _aux_changes_router_grad(job: MoEJob) -> bool:
    from dataclasses import replace

    from primuspp.backends.megatron.model import whole_model

    grads = []
    for coeff in (None, 0.0):
        spec = _spec()
        if coeff is not None:
            settings = tuple((k, coeff if k == "moe_aux_loss_coeff" else v) for k, v in spec.settings)
            spec = replace(spec, settings=settings)
        model = whole_model(spec)
        tokens, labels = _data(job, 0)[0]
        output, loss_fn = _forward_step(_loss_collect, iter([(tokens, labels)]), model)
        loss_fn(output)[0].backward()
        grads.append(model.decoder.layers[0].mlp.router.weight.grad.clone())
    return not torch.equal(grads[0], grads[1])


GROUPS = ((2, 1), (2, 2), (4, 1))  # (p, ep): worlds of 2, 4 and 4 ranks


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[MoEJob, list[dict]]]:
    out = {}
    for p, ep in GROUPS:
        todo = jobs(p, ep)
        results = launch(run_moe_jobs, p * ep, todo)
        for i, job in enumerate(todo):
            out[job.name] = (job, [per_rank[i] for per_rank in results])
    return out


def _names() -> list[str]:
    return [job.name for p, ep in GROUPS for job in jobs(p, ep)]


@pytest.mark.parametrize("name", _names())
def test_moe_losses_and_gradients_match_one_process(runs, name):
    job, per_rank = runs[name]
    ref = per_rank[0]["reference"]
    loss, grad, tensors = differences(per_rank, ref)
    names = set(ref["grads"][0])
    assert any(".mlp.router.weight" in n for n in names)
    assert sum(".local_experts." in n for n in names) == SPEC["layers"] * MOE["experts"] * 2
    assert any(".shared_experts." in n for n in names)
    assert all(float(g.abs().max()) > 0 for n, g in ref["grads"][0].items() if ".router." in n)
    assert tensors == job.steps * len(names)
    assert loss <= TOL, (name, loss)
    assert grad <= TOL, (name, grad)


@pytest.mark.parametrize("name", _names())
def test_grouped_experts_defer_weight_grads_on_split_tables(runs, name):
    job, per_rank = runs[name]
    defer = sum(r["grouped"]["defer"] for r in per_rank)
    now = sum(r["grouped"]["now"] for r in per_rank)
    if job.algorithm in SPLIT:
        assert defer > 0 and now == 0, (name, defer, now)
    elif job.algorithm == "dualpipe-v":  # FB nodes (F and BW) and split B/W nodes
        assert defer > 0 and now > 0, (name, defer, now)
    else:
        assert defer == 0 and now > 0, (name, defer, now)


def test_aux_loss_reaches_the_router_gradient(runs):
    """The load-balancing aux loss contributes to the router's gradient (so the equality above covers it)."""
    _, per_rank = runs[jobs(2, 1)[0].name]
    assert per_rank[0]["reference"]["aux_changes_router_grad"]


def test_expert_names_map_local_experts_to_global():
    from primuspp.backends.megatron.model import stage_name, stage_state

    local = "decoder.layers.1.mlp.experts.local_experts.1.linear_fc1.weight"
    want = "decoder.layers.5.mlp.experts.local_experts.3.linear_fc1.weight"
    assert stage_name(local, range(4, 6), (2, 2)) == want
    expert = "decoder.layers.0.mlp.experts.local_experts.{}.linear_fc2.weight"
    whole = {expert.format(e): torch.full((1,), e) for e in range(4)}
    whole["decoder.layers.0.mlp.router.weight"] = torch.zeros(4, 1)
    got = stage_state(whole, range(0, 1), False, False, (2, 2))
    assert sorted(got) == [
        "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight",
        "decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight",
        "decoder.layers.0.mlp.router.weight",
    ]
    assert int(got["decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight"]) == 3


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ((8, 2, 3), "ep"),  # EP does not divide the experts
        ((4, 5, 1), "moe-topk"),  # topk > experts
        ((4, None, 1), "moe-topk"),
        ((0, 1, 1), "moe-experts"),
        ((None, 2, 1), "moe-topk"),  # MoE flags without an MoE model
        ((None, None, 2), "ep"),
    ],
)
def test_bad_moe_flags(args, key):
    from primuspp.backends.megatron import moe

    with pytest.raises(ConfigError) as err:
        moe.check(*args)
    assert err.value.key == key


def _train(args: list[str], capsys) -> dict:
    import json

    from primuspp.commands.app import main

    code = main(["train", *args, "--json", "--no-dump"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_train_cli_moe_with_expert_parallelism_and_resume(tmp_path, capsys):
    """`primuspp train` with MoE layers and EP 2 (4 processes): the loss falls; the JSON names ep, kernels;
    a run resumed from its step-2 checkpoint gives the uninterrupted run's losses exactly (each replica reads
    its own microbatches from the saved stream position)."""
    small = ["--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "32", "--mb", "4"]
    moe = ["--moe-experts", "4", "--moe-topk", "2", "--moe-shared-ffn", "16", "--ep", "2"]
    run = ["--algo", "zbv", "--pp", "2", *small, *moe, "--steps", "4"]
    ckpt = tmp_path / "ckpt"
    doc = _train([*run, "--save", str(ckpt), "--save-interval", "2"], capsys)
    assert doc["ep"] == 2 and doc["kernels"] == "torch" and doc["pp"] == 2
    assert doc["model"]["settings"]["num_moe_experts"] == 4
    assert doc["model"]["settings"]["moe_shared_expert_intermediate_size"] == 16
    assert len(doc["peak_activation_bytes"]) == 2  # the first replica's pipeline ranks
    assert doc["losses"][-1] < doc["losses"][0]
    resumed = _train([*run, "--load", str(ckpt / "step_0000002")], capsys)
    assert [s["step"] for s in resumed["steps"]] == [2, 3]
    assert resumed["losses"] == doc["losses"][2:]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--moe-experts", "8", "--moe-topk", "2", "--ep", "3"], "--ep 3: must divide --moe-experts 8"),
        (["--moe-experts", "4", "--moe-topk", "5"], "--moe-topk 5: must be between 1 and --moe-experts 4"),
        (["--moe-experts", "4", "--moe-topk", "2", "--backend", "torch"], "megatron backend only"),
        (["--ep", "2", "--emulate"], "megatron backend only"),
        (["--kernels", "nope"], "--kernels nope: expected one of auto, torch, turbo, te"),
    ],
)
def test_bad_moe_input_is_one_line_and_starts_nothing(args, message, capsys):
    import multiprocessing

    from primuspp.commands.app import main

    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and message in err, err
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("name", ["turbo", "te"])
def test_kernels_that_do_not_import_are_refused_before_any_rank(name, capsys):
    import multiprocessing

    from primuspp.backends import kernels
    from primuspp.commands.app import main

    if kernels.unavailable(name) is None:
        pytest.skip(f"hardware: {name} runs here (the refusal needs a machine without it)")
    code = main(["train", "--kernels", name])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --kernels {name}: "), err
    assert multiprocessing.active_children() == []


def split_vs_unsplit(ctx: WorkerContext) -> dict[str, Any]:
    """One process: the whole MoE model's backward under a deferring weight-grad store (a B node), then the
    store run (its W), against Megatron's own unsplit backward of the same model and data."""
    warnings.simplefilter("ignore")
    from primuspp.backends.megatron import split
    from primuspp.backends.megatron.model import whole_model
    from primuspp.backends.megatron.train import setup_parallel
    from primuspp.runtime.wgrad import WeightGradStore

    setup_parallel(1, 1, ctx.device)
    model = whole_model(_spec())
    tokens, labels = _data(MoEJob("zbv", 1, 1, 1), 0)[0]

    def backward() -> None:
        output, loss_fn = _forward_step(_loss_collect, iter([(tokens, labels)]), model)
        loss_fn(output)[0].backward()

    backward()  # unsplit: no store, Megatron's own layers
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    split.install()
    try:
        store = WeightGradStore()
        with store.recording():
            output, loss_fn = _forward_step(_loss_collect, iter([(tokens, labels)]), model)
        store.defer = True
        loss_fn(output)[0].backward()  # B
        after_b = {n for n, p in model.named_parameters() if p.grad is not None}
        queued = len(store)
        store.run()  # W
    finally:
        split.uninstall()
    got = {n: p.grad for n, p in model.named_parameters()}
    return {"after_b": after_b, "queued": queued, "want": want, "got": got}


def test_grouped_split_on_the_megatron_moe_layer():
    """After B no expert weight (nor any split linear's weight) has a gradient; after W every gradient equals
    Megatron's unsplit backward."""
    (r,) = launch(split_vs_unsplit, 1)
    experts = [n for n in r["want"] if ".local_experts." in n]
    assert len(experts) == SPEC["layers"] * MOE["experts"] * 2
    assert not any(n in r["after_b"] for n in experts)
    assert any(".router." in n for n in r["after_b"])  # the router's gradient is B's
    assert r["queued"] >= SPEC["layers"] * 2  # the two grouped GEMMs of every layer, and the linears
    for name, want in r["want"].items():
        assert torch.allclose(r["got"][name], want, rtol=0, atol=1e-6 * float(want.abs().max())), name
