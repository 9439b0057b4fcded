"""FB overlap (overlap.py): dualpipe-v's FB nodes run their forward on the rank's thread and their backward on
a helper thread at the same time, at PP 2, at TP 2 x PP 2 (the backward's TP all-reduces on the twin TP
group) and on MoE layers at EP 2 x PP 2 (the backward's all-to-alls on the twin EP group); losses and every
gradient equal the one-process reference as without overlap."""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import torch

from primuspp.runtime.launch import WorkerContext, launch
from tests.megatron.test_pipeline import TOL, differences
from tests.megatron.tp_workers import TPJob, run_tp_jobs

JOBS = {
    4: [TPJob("dualpipe-v", 2, 2, tp=2, m=6, fb_overlap=True)],
    2: [TPJob("dualpipe-v", 2, 2, tp=1, m=6, fb_overlap=True), TPJob("dualpipe-v", 2, 2, tp=1, m=6)],
}


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[TPJob, list[dict]]]:
    out = {}
    for world, jobs in JOBS.items():
        results = launch(run_tp_jobs, world, jobs)
        out.update({job.name: (job, [r[i] for r in results]) for i, job in enumerate(jobs)})
    return out


@pytest.mark.parametrize("name", [j.name for jobs in JOBS.values() for j in jobs])
def test_overlapped_fb_keeps_gradients(runs, name):
    job, per_rank = runs[name]
    lead = [r for r in per_rank if r["tp_rank"] == 0]
    loss, grad, tensors = differences(lead, per_rank[0]["reference"])
    assert tensors == job.steps * 101
    assert loss <= TOL and grad <= TOL, (name, loss, grad)
    calls = sum(r["overlapped"][0] for r in per_rank)
    if job.fb_overlap:  # every FB node of every step ran its backward on the helper thread
        fb_nodes = sum(r["fb_nodes"] for r in lead) * job.tp * job.steps
        assert fb_nodes > 0 and calls == fb_nodes, (calls, fb_nodes)
        assert all(r["overlapped"][1] == ["primuspp-fb-backward"] for r in per_rank if r["overlapped"][0])
    else:
        assert calls == 0


def test_overlap_leaves_bits_unchanged(runs):
    """With and without overlap: the same arithmetic, bit for bit."""
    _, on = runs[TPJob("dualpipe-v", 2, 2, tp=1, m=6, fb_overlap=True).name]
    _, off = runs[TPJob("dualpipe-v", 2, 2, tp=1, m=6).name]
    for a, b in zip(on, off, strict=True):
        assert a["losses"] == b["losses"]
        for ga, gb in zip(a["grads"], b["grads"], strict=True):
            assert all(ga[n].equal(gb[n]) for n in gb)


@dataclass(frozen=True)
class MoEOverlapJob:
    """dualpipe-v on the MoE model of test_moe.py at p=2 x EP 2 (4 ranks), with or without FB overlap."""

    fb_overlap: bool
    algorithm: str = "dualpipe-v"
    p: int = 2
    v: int = 2
    m: int = 6
    ep: int = 2
    steps: int = 2
    per_token = False

    @property
    def dp(self) -> int:  # what tests.megatron.workers' _data and _step_loss read
        return self.ep


def run_moe_overlap(ctx: WorkerContext, todo: list[MoEOverlapJob]) -> list[dict[str, Any]]:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state

    from primuspp.backends.megatron.train import setup_parallel

    setup_parallel(2, 1, ctx.device, ep=2)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(2)
    out = [_run_moe(ctx, job) for job in todo]
    out[0]["reference"] = _moe_reference(todo[0]) if ctx.rank == 0 else None
    return out


def _run_moe(ctx: WorkerContext, job: MoEOverlapJob) -> dict[str, Any]:
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import schedules

    from primuspp.algorithms.registry import get_algorithm
    from primuspp.backends.megatron import overlap
    from primuspp.backends.megatron import schedule as S
    from primuspp.backends.megatron.model import rank_chunks
    from primuspp.backends.megatron.train import named_parameters, wrap_ddp
    from primuspp.schedule.placement import make_placement
    from tests.megatron.test_moe import _spec
    from tests.megatron.workers import LR, MBS, SPEC, _data, _forward_step, _loss_collect, _step_loss

    placement = make_placement(get_algorithm(job.algorithm).placement, job.p, job.v)
    chunks, ranges = rank_chunks(_spec(), placement, parallel_state.get_pipeline_model_parallel_rank())
    ddps = wrap_ddp(chunks)
    named = named_parameters(ddps, ranges)
    schedule = S.install(job.algorithm, fb_overlap=job.fb_overlap)
    fb = schedules.get_forward_backward_func()
    overlapped: dict[str, Any] = {"fb": 0, "threads": set()}
    original_run_fb = overlap.run_fb

    def counting_run_fb(run_f, run_b):
        overlapped["fb"] += 1

        def b():
            overlapped["threads"].add(threading.current_thread().name)
            run_b()

        original_run_fb(run_f, b)

    overlap.run_fb = counting_run_fb
    ep_group = parallel_state.get_expert_model_parallel_group()
    original_backward_group = overlap.backward_group
    twin_all_to_alls = [0]

    def counting_backward_group(group):  # what the patched all-to-all backward asks (overlap.py)
        got = original_backward_group(group)
        twin_all_to_alls[0] += group is ep_group and got is not group
        return got

    overlap.backward_group = counting_backward_group
    result: dict[str, Any] = {"losses": [], "grads": []}
    try:
        for step in range(job.steps):
            for d in ddps:
                d.zero_grad_buffer()
            data = _data(job, step, parallel_state.get_data_parallel_rank())  # type: ignore[arg-type]
            store = fb(
                forward_step_func=partial(_forward_step, _loss_collect),
                data_iterator=[iter(data) for _ in ddps],
                model=ddps,
                num_microbatches=job.m,
                seq_length=SPEC["seq_len"],
                micro_batch_size=MBS,
            )
            result["losses"].append(_step_loss(job, store) / job.ep)  # type: ignore[arg-type]
            result["grads"].append({name: p.main_grad.clone() for name, p in named})
            with torch.no_grad():
                for _, p in named:
                    p.add_(p.main_grad, alpha=-LR)
    finally:
        overlap.run_fb = original_run_fb
        overlap.backward_group = original_backward_group
        S.uninstall()
    result["overlapped"] = overlapped["fb"], sorted(overlapped["threads"])
    result["fb_nodes"] = sum(1 for iv in schedule.last_step.intervals if iv.kind == "FB")
    result["twin_all_to_alls"] = twin_all_to_alls[0]
    return result


def _moe_reference(job: MoEOverlapJob) -> dict[str, Any]:
    from tests.megatron.test_moe import MoEJob, reference

    return reference(MoEJob(job.algorithm, job.p, job.v, job.m, job.ep, job.steps))


@pytest.fixture(scope="module")
def moe_runs() -> list[list[dict[str, Any]]]:
    """[with overlap, without] per rank."""
    results = launch(run_moe_overlap, 4, [MoEOverlapJob(True), MoEOverlapJob(False)])
    return [[r[i] for r in results] for i in range(2)]


def test_overlapped_fb_on_moe_with_expert_parallelism(moe_runs):
    """Every FB node ran its backward on the helper thread, its all-to-alls on the twin EP group; losses and
    every gradient (router and experts included) equal one process, and equal the run without overlap bit
    for bit."""
    on, off = moe_runs
    job = MoEOverlapJob(True)
    ref = on[0]["reference"]
    loss, grad, tensors = differences(on, ref)
    assert tensors == job.steps * len(ref["grads"][0])
    assert any(".local_experts." in n for n in ref["grads"][0])
    assert loss <= TOL and grad <= TOL, (loss, grad)
    fb_nodes = sum(r["fb_nodes"] for r in on) * job.steps
    assert fb_nodes > 0 and sum(r["overlapped"][0] for r in on) == fb_nodes
    assert all(r["overlapped"][1] == ["primuspp-fb-backward"] for r in on)
    assert sum(r["overlapped"][0] for r in off) == 0
    # the backward halves' all-to-alls went to the twin EP group (on every rank); never without overlap
    assert all(r["twin_all_to_alls"] > 0 for r in on) and all(r["twin_all_to_alls"] == 0 for r in off)
    for a, b in zip(on, off, strict=True):
        assert a["losses"] == b["losses"]
        for ga, gb in zip(a["grads"], b["grads"], strict=True):
            assert set(ga) == set(gb) and all(ga[n].equal(gb[n]) for n in gb)
