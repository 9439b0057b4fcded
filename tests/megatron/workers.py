"""What the spawned ranks of the Megatron tests run (importable by the spawn children).

`run_jobs(ctx, jobs)` runs several jobs one after the other in one process group (megatron-core costs ~3 s
and ~130 MB per process to import: one launch per pipeline size). A job trains a small megatron-core GPT for
a few steps (SGD on the DDP grad buffers) with either primuspp's installed schedule or one of Megatron's own,
and returns this rank's losses, gradients (whole-model names) and diagnostics; rank 0 also runs the
one-process Megatron reference (`forward_backward_no_pipelining` on the whole model) on the same data.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from primuspp.algorithms.classic.interleaved import default_group
from primuspp.runtime.launch import WorkerContext

SPEC = dict(layers=8, hidden=32, heads=2, seq_len=16, vocab=64)
MBS = 2
LR = 0.05
OWN = ("megatron-1f1b", "megatron-interleaved")


@dataclass(frozen=True)
class Job:
    algorithm: str  # a registry name, or one of OWN (Megatron's own schedules)
    p: int
    v: int = 1
    m: int = 4
    steps: int = 2
    overlap: bool = False  # DDP overlap_grad_reduce
    grad_sync: bool = False  # config.grad_sync_func = DDP.start_grad_sync per chunk
    per_token: bool = False  # loss func returns (sum, tokens, dict); calculate_per_token_loss
    forward_only: bool = False  # an evaluation call (collect_non_loss_data)
    dp: int = 1  # data-parallel replicas (world = p * dp): each reads its own shard of microbatches
    dump: str | None = field(default=None, compare=False)  # install(dump_pp_data=...) directory

    @property
    def name(self) -> str:
        flags = [f for f in ("overlap", "grad_sync", "per_token", "forward_only") if getattr(self, f)]
        flags += [f"dp{self.dp}"] if self.dp > 1 else []
        return "-".join([self.algorithm, f"p{self.p}", f"v{self.v}", f"m{self.m}", *flags])


def run_jobs(ctx: WorkerContext, jobs: list[Job]) -> list[Any]:
    return [run_job(ctx, job) for job in jobs]


def _data(job: Job, step: int, shard: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1000 * step + 100 * shard + job.m)
    out = []
    for _ in range(job.m):
        t = torch.randint(0, SPEC["vocab"], (MBS, SPEC["seq_len"] + 1), generator=gen)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


def _loss_tokens(output: torch.Tensor) -> tuple:
    losses = output.float()
    total = losses.sum()
    n = torch.tensor(losses.numel(), dtype=torch.int)
    return total, n, {"lm loss": (total.detach().clone(), n.clone())}


def _loss_collect(output: torch.Tensor, non_loss_data: bool = False) -> Any:
    from primuspp.backends.megatron.model import loss_func

    return output.detach().clone() if non_loss_data else loss_func(output)


def _forward_step(loss: Any, data_iterator: Any, model: Any) -> tuple:
    from primuspp.backends.megatron.model import forward_step

    output, _ = forward_step(data_iterator, model)
    return output, loss


def _step_loss(job: Job, store: list, m: int | None = None) -> float:
    if job.per_token:
        return sum(float(x["lm loss"][0]) for x in store)
    return sum(float(x["lm loss"]) for x in store) / (m or job.m)


def run_job(ctx: WorkerContext, job: Job) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import schedules

    from primuspp.algorithms.registry import get_algorithm
    from primuspp.backends.megatron import schedule as S
    from primuspp.backends.megatron import split as SP
    from primuspp.backends.megatron.model import GPTSpec, rank_chunks
    from primuspp.backends.megatron.train import named_parameters, setup_parallel, wrap_ddp
    from primuspp.schedule.placement import make_placement

    setup_parallel(job.p, 1, ctx.device)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(job.v if job.v > 1 else None)
    spec = GPTSpec(**SPEC)
    kind = "linear" if job.algorithm == "megatron-1f1b" else "loop" if job.algorithm in OWN else None
    placement = make_placement(kind or get_algorithm(job.algorithm).placement, job.p, job.v)
    extra: dict[str, Any] = {"calculate_per_token_loss": job.per_token}
    if job.algorithm == "megatron-interleaved":
        # batch_p2p_comm=False: with P=2 Megatron's batched p2p pairs the two directions wrongly on gloo
        extra.update(
            virtual_pipeline_model_parallel_size=job.v,
            microbatch_group_size_per_vp_stage=default_group(job.p, job.m),
            batch_p2p_comm=False,
        )
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    chunks, ranges = rank_chunks(spec, placement, pp_rank, **extra)
    ddps = wrap_ddp(chunks, overlap_grad_reduce=job.overlap or job.grad_sync)
    config = chunks[0].config
    if job.grad_sync:
        config.grad_sync_func = [d.start_grad_sync for d in ddps]
    named = named_parameters(ddps, ranges)

    counts = {"defer": 0, "now": 0}
    original_backward = SP._SplitLinear.backward
    if job.algorithm == "megatron-1f1b":
        fb = schedules.forward_backward_pipelining_without_interleaving
    elif job.algorithm == "megatron-interleaved":
        fb = schedules.forward_backward_pipelining_with_interleaving
    else:
        S.install(job.algorithm, dump_pp_data=job.dump)
        fb = schedules.get_forward_backward_func()

        def counting(ctx_, g):
            counts["defer" if ctx_.store.defer else "now"] += 1
            return original_backward(ctx_, g)

        SP._SplitLinear.backward = staticmethod(counting)

    snapshots: list[tuple[int, torch.Tensor]] = []  # (step, bucket grads when their reduction started)
    if job.overlap:
        step_now = [0]
        for d in ddps:
            for group in d.bucket_groups:
                start = group.start_grad_sync

                def recording(*a, _start=start, _group=group, **k):
                    grads = torch.cat([b.grad_data.clone() for b in _group.buckets])
                    snapshots.append((step_now[0], grads, _group))
                    return _start(*a, **k)

                group.start_grad_sync = recording

    loss_fn = _loss_tokens if job.per_token else _loss_collect
    result: dict[str, Any] = {"losses": [], "grads": [], "outputs": [], "late": []}
    try:
        for step in range(job.steps):
            if job.overlap:
                step_now[0] = step
            for d in ddps:
                d.zero_grad_buffer()
            data = _data(job, step, parallel_state.get_data_parallel_rank())
            iters = [iter(data) for _ in ddps]
            kwargs = dict(
                forward_step_func=partial(_forward_step, loss_fn),
                data_iterator=iters if len(ddps) > 1 else iters[0],
                model=ddps,
                num_microbatches=job.m,
                seq_length=SPEC["seq_len"],
                micro_batch_size=MBS,
            )
            if job.forward_only:
                with torch.no_grad():
                    store = fb(**kwargs, forward_only=True, collect_non_loss_data=True)
                result["outputs"].append([t.clone() for t in store])
                continue
            store = fb(**kwargs)
            result["losses"].append(_step_loss(job, store))
            result["grads"].append({name: p.main_grad.clone() for name, p in named})
            if job.overlap:  # a reduction started during the step must have seen the final gradients
                for s, grads, group in snapshots:
                    final = torch.cat([b.grad_data for b in group.buckets])
                    if s == step and not torch.equal(grads, final):
                        result["late"].append(step)
            with torch.no_grad():
                for _, p in named:
                    p.add_(p.main_grad, alpha=-LR)
    finally:
        SP._SplitLinear.backward = original_backward
        S.uninstall()
    result["split"] = counts
    result["dp_rank"] = parallel_state.get_data_parallel_rank()
    result["reductions_in_step"] = sorted({s for s, _, _ in snapshots})
    result["reference"] = reference(job) if ctx.rank == 0 else None
    return result


#: (SPEC, the job's fields the reference reads) -> the reference: once per rank process, for all the jobs
#: (algorithms) that share it
_REFERENCES: dict[tuple, dict[str, Any]] = {}


def reference(job: Job) -> dict[str, Any]:
    """One process, the whole model, Megatron's `forward_backward_no_pipelining`, the same data and SGD."""
    key = (repr(SPEC), job.m, job.dp, job.steps, job.per_token, job.forward_only)
    if key not in _REFERENCES:
        _REFERENCES[key] = _reference(job)
    return _REFERENCES[key]


def _reference(job: Job) -> dict[str, Any]:
    from megatron.core.pipeline_parallel import schedules

    from primuspp.backends.megatron.model import GPTSpec, whole_model

    model = whole_model(GPTSpec(**SPEC))
    model.config.calculate_per_token_loss = job.per_token
    loss_fn = _loss_tokens if job.per_token else _loss_collect
    out: dict[str, Any] = {"losses": [], "grads": [], "outputs": []}
    for step in range(job.steps):
        model.zero_grad()
        # data parallelism averages the replicas' gradients: one process runs all their microbatches
        data = [mb for shard in range(job.dp) for mb in _data(job, step, shard)]
        kwargs = dict(
            forward_step_func=partial(_forward_step, loss_fn),
            data_iterator=iter(data),
            model=[model],
            num_microbatches=job.m * job.dp,
            seq_length=SPEC["seq_len"],
            micro_batch_size=MBS,
        )
        if job.forward_only:
            with torch.no_grad():
                store = schedules.forward_backward_no_pipelining(
                    **kwargs, forward_only=True, collect_non_loss_data=True
                )
            out["outputs"].append([t.clone() for t in store])
            continue
        store = schedules.forward_backward_no_pipelining(**kwargs)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        if job.per_token:  # what finalize_model_grads does with the token count
            tokens = sum(int(x["lm loss"][1]) for x in store)
            grads = {n: g / tokens for n, g in grads.items()}
        out["losses"].append(_step_loss(job, store, job.m * job.dp))
        out["grads"].append(grads)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.add_(grads[n], alpha=-LR)
    return out
