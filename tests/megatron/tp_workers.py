"""What the spawned ranks of the tensor-parallel tests run (importable by the spawn children).

A job trains the small megatron-core GPT of workers.py for a few steps on TP x PP ranks (Megatron's rank
order: TP groups are consecutive ranks) with primuspp's installed schedule, and returns, on TP rank 0 of
each pipeline rank, the losses and the whole-model gradients (the TP pieces gathered, tp.gather); rank 0
also runs the one-process reference (workers.reference, at TP 1 through tp.solo). `kind` names the model:
"dense" or "moe" (MODELS).
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from primuspp.backends.megatron import moe
from primuspp.runtime.launch import WorkerContext
from tests.megatron import workers

#: model kind -> extra GPTSpec settings (TransformerConfig fields) on top of workers.SPEC; "moe": every
#: layer MoE (4 experts, top-2, a shared expert), EP 1: the experts TP-sharded like a dense MLP
MODELS: dict[str, tuple[tuple[str, Any], ...]] = {
    "dense": (),
    "moe": moe.settings(experts=4, topk=2, ffn=32, shared_ffn=16),
}


@dataclass(frozen=True)
class TPJob:
    algorithm: str
    p: int
    v: int
    tp: int = 2
    sp: bool = False
    sp_wgrad: str = "regather"
    m: int = 4
    steps: int = 2
    kind: str = "dense"
    fb_overlap: bool = False  # FB nodes run F and B at once (overlap.py)
    # what workers.reference reads
    dp: int = 1
    per_token: bool = False
    forward_only: bool = False

    @property
    def name(self) -> str:
        sp = f"sp-{self.sp_wgrad}" if self.sp else "nosp"
        fb = "-overlap" if self.fb_overlap else ""
        return f"{self.kind}-{self.algorithm}-tp{self.tp}-p{self.p}-v{self.v}-m{self.m}-{sp}{fb}"


def run_tp_jobs(ctx: WorkerContext, jobs: list[TPJob]) -> list[Any]:
    return [run_tp_job(ctx, job) for job in jobs]


def run_tp_job(ctx: WorkerContext, job: TPJob) -> dict[str, Any] | None:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import schedules

    from primuspp.algorithms.registry import get_algorithm
    from primuspp.backends.megatron import overlap, tp
    from primuspp.backends.megatron import schedule as S
    from primuspp.backends.megatron import split as SP
    from primuspp.backends.megatron.model import GPTSpec, rank_chunks, stage_name
    from primuspp.backends.megatron.train import setup_parallel, wrap_ddp
    from primuspp.schedule.placement import make_placement

    setup_parallel(job.p, 1, ctx.device, tp=job.tp)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(job.v if job.v > 1 else None)
    spec = GPTSpec(**workers.SPEC, settings=MODELS[job.kind])
    placement = make_placement(get_algorithm(job.algorithm).placement, job.p, job.v)
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    extra = {"tensor_model_parallel_size": job.tp, "sequence_parallel": job.sp}
    chunks, ranges = rank_chunks(spec, placement, pp_rank, **extra)
    ddps = wrap_ddp(chunks)

    counts = {"defer": 0, "now": 0}
    original_backward = SP._SplitLinear.backward

    def counting(ctx_, g):
        counts["defer" if ctx_.store.defer else "now"] += 1
        return original_backward(ctx_, g)

    schedule = S.install(job.algorithm, sp_wgrad=job.sp_wgrad, fb_overlap=job.fb_overlap)
    fb = schedules.get_forward_backward_func()
    SP._SplitLinear.backward = staticmethod(counting)
    overlapped = {"fb": 0, "threads": set()}
    original_run_fb = overlap.run_fb

    def counting_run_fb(run_f, run_b):
        overlapped["fb"] += 1

        def b():
            overlapped["threads"].add(threading.current_thread().name)
            run_b()

        original_run_fb(run_f, b)

    overlap.run_fb = counting_run_fb
    result: dict[str, Any] = {"losses": [], "grads": [], "tp_rank": tp_rank, "pp_rank": pp_rank}
    try:
        for step in range(job.steps):
            for d in ddps:
                d.zero_grad_buffer()
            data = workers._data(job, step)  # type: ignore[arg-type]  (every TP rank: the same data)
            iters = [iter(data) for _ in ddps]
            store = fb(
                forward_step_func=partial(workers._forward_step, workers._loss_collect),
                data_iterator=iters if len(ddps) > 1 else iters[0],
                model=ddps,
                num_microbatches=job.m,
                seq_length=workers.SPEC["seq_len"],
                micro_batch_size=workers.MBS,
            )
            result["losses"].append(workers._step_loss(job, store))  # type: ignore[arg-type]
            grads: dict[str, torch.Tensor] = {}
            for d, r in zip(ddps, ranges, strict=True):
                mine = {n: p.main_grad.clone() for n, p in d.module.named_parameters()}
                grads.update({stage_name(n, r): g for n, g in tp.gather(d.module, mine).items()})
            result["grads"].append(grads)
            with torch.no_grad():
                for d in ddps:
                    for p in d.module.parameters():
                        p.add_(p.main_grad, alpha=-workers.LR)
    finally:
        SP._SplitLinear.backward = original_backward
        overlap.run_fb = original_run_fb
        S.uninstall()
    result["split"] = counts
    result["overlapped"] = overlapped["fb"], sorted(overlapped["threads"])
    result["fb_nodes"] = sum(1 for iv in schedule.last_step.intervals if iv.kind == "FB")
    with tp.solo():
        result["reference"] = _reference(job) if ctx.rank == 0 else None
    if tp_rank != 0:  # its loss and gathered gradients are TP rank 0's
        return {"tp_rank": tp_rank, "split": counts, "overlapped": result["overlapped"]}
    return result


def _reference(job: TPJob) -> dict[str, Any]:
    """workers.reference (it builds GPTSpec(**SPEC)), with the model kind's settings."""
    settings = MODELS[job.kind]
    if not settings:
        return workers.reference(job)  # type: ignore[arg-type]
    saved = workers.SPEC
    workers.SPEC = {**saved, "settings": settings}
    try:
        return workers.reference(job)  # type: ignore[arg-type]
    finally:
        workers.SPEC = saved
