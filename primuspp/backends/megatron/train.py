"""Train a megatron-core GPT with any primuspp schedule: what each pipeline rank runs (`train_worker`).

Each rank initialises Megatron's parallel state (tensor parallel `tp`, data parallel 1, pipeline = the
table's ranks; world = tp x pp, TP groups are consecutive ranks), applies the CPU shims on CPU, builds its
model chunks for the table's placement (model.py; its TP piece of them: tp.py), wraps each in
Megatron DDP, installs the schedule, and trains with Adam on the DDP gradient buffers (`main_grad`). After
each step it reports its share of the loss and its step span to the launcher (progress), and every
`save_interval` steps and at the end it writes its part of an atomic checkpoint (checkpoint.py).
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from primuspp.backends.megatron import checkpoint
from primuspp.backends.megatron.data import StepData, make_stream
from primuspp.backends.megatron.model import GPTSpec, forward_step, rank_chunks, stage_name
from primuspp.runtime.launch import WorkerContext
from primuspp.runtime.post_validation import VALIDATED, StepValidator
from primuspp.runtime.runner import RankStep
from primuspp.schedule.table import ScheduleTable


@dataclass(frozen=True)
class TrainSpec:
    """Everything a rank needs: the table, the model, the data, Adam, checkpoints."""

    table: ScheduleTable
    model: GPTSpec = field(default_factory=GPTSpec)
    micro_batch_size: int = 2
    steps: int = 100
    lr: float = 1e-3
    seed: int = 0
    data: str | None = None
    save: str | None = None
    save_interval: int | None = None
    keep: int = 2
    load: str | None = None
    ddp: tuple[tuple[str, Any], ...] = ()
    track_memory: bool = True
    #: expert-parallel ranks per pipeline rank (MoE): world = pp * ep, dense layers data-parallel over them
    ep: int = 1
    #: the kernel provider of the B/W split (primuspp.backends.kernels; resolved by the launcher)
    kernels: str = "torch"
    #: ("save", step): the rank `fault_rank` kills itself right after writing its file of that save (tests)
    fault: tuple[str, int] | None = None
    fault_rank: int = 0
    tp: int = 1  # tensor-parallel ranks per pipeline rank
    sequence_parallel: bool = False
    fb_overlap: bool = False  # FB nodes run their forward and backward at once (overlap.py)
    sp_wgrad: str = "regather"  # W's gathered input under sequence parallelism: regather or keep (split.py)

    @property
    def world(self) -> int:
        return self.tp * self.table.pp * self.ep

    def stage_config(self) -> dict[str, Any]:
        """TransformerConfig fields of the stages (not of the whole model: tp.py builds it at TP 1)."""
        if self.tp <= 1:
            return {}
        return {"tensor_model_parallel_size": self.tp, "sequence_parallel": self.sequence_parallel}

    #: clip the global gradient norm to this (None: no clipping)
    clip_grad: float | None = None
    #: step each rank as soon as its last W is done, check norm and overflow after (runtime/post_validation)
    post_validation: bool = False
    #: (rank, step) where one gradient entry becomes inf before the optimizer step (overflow tests)
    inject_inf: tuple[int, int] | None = None
    #: post-validated: wait for the last step's check before each step (install()'s path, for loops that
    #: cannot replay their data) instead of running it on the optimistic weights and replaying it if needed
    validate_before_step: bool = False
    #: synchronous clipping by `clip(params, clip_grad) -> norm` instead of StepValidator's: the tests hold
    #: the validator to megatron-core's own functions (tests/oracles/megatron_clip.py)
    clip: Callable[[list[torch.nn.Parameter], float], float] | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.table.num_microbatches * self.micro_batch_size * self.model.seq_len * self.ep


@dataclass
class StepRecord:
    step: int
    loss: float  # this rank's share of the step loss (mean over microbatches; 0 where no loss is computed)
    measured: RankStep
    wall_ms: float  # the whole step on this rank: schedule, grad finalisation, optimizer
    replica: int = 0  # the data-parallel replica of this rank (expert parallelism folds them into EP)
    #: what the optimizer step did (runtime/post_validation's outcomes); None without clipping/validation
    outcome: str | None = None
    #: the global gradient norm the step was decided on (inf: overflow); None without clipping/validation
    grad_norm: float | None = None


def setup_parallel(pp: int, vpp: int, device: torch.device, tp: int = 1, ep: int = 1) -> None:
    """Megatron's parallel state for a pipeline of `tp`-way tensor-parallel stages (DP = world / (tp x pp),
    which with MoE expert parallelism `ep` is folded into EP as Megatron does), CPU shims on CPU.
    Idempotent."""
    from megatron.core import parallel_state, tensor_parallel

    from primuspp.backends.megatron import cpu
    from primuspp.backends.megatron import tp as tensor_parallelism

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
            expert_model_parallel_size=ep,
        )
        if tp > 1:
            tensor_parallelism.make_solo_groups()
    if device.type == "cpu":
        cpu.apply()
    else:
        tensor_parallel.model_parallel_cuda_manual_seed(1234)


def wrap_ddp(chunks: list[Any], **ddp_settings: Any) -> list[Any]:
    """Megatron DDP around each chunk; the first chunk's config gets `no_sync_func` (one per chunk) and
    `finalize_model_grads_func`, as Megatron-LM sets them."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )

    ddp_config = DistributedDataParallelConfig(**ddp_settings)
    ddps = [
        DistributedDataParallel(c.config, ddp_config, c, disable_bucketing=i > 0)
        for i, c in enumerate(chunks)
    ]
    config = chunks[0].config
    config.no_sync_func = [d.no_sync for d in ddps] if len(ddps) > 1 else ddps[0].no_sync
    config.finalize_model_grads_func = finalize_model_grads
    return ddps


def named_parameters(ddps: list[Any], ranges: list[range]) -> list[tuple[str, torch.nn.Parameter]]:
    """This rank's parameters under their whole-model names (MoE experts numbered globally)."""
    from primuspp.backends.megatron.moe import EXPERTS_ATTR

    return [
        (stage_name(n, r, getattr(d.module, EXPERTS_ATTR, (0, 0))), p)
        for d, r in zip(ddps, ranges, strict=True)
        for n, p in d.module.named_parameters()
    ]


def norm_counted(params: list[torch.nn.Parameter]) -> list[bool]:
    """Which of this rank's parameters count in the global gradient norm when every rank's squares are
    summed over the whole world (TP x PP x EP x DP), so that the sum is Megatron's norm.

    megatron-core's optimizer (0.16.1) takes the squares of the gradients that are neither shared (a tied
    weight's second copy) nor tensor-parallel duplicates (`param_is_not_tensor_parallel_duplicate`:
    layernorms, row-parallel biases count on TP rank 0 only), sums them over its model-parallel group
    (TP x PP) for the dense parameters and over TP x EP x PP for the expert ones (`allreduce == False`), and
    adds the two squared norms (`ChainedOptimizer.get_grad_norm`). Summed over the whole world instead (one
    all-reduce), a dense gradient counts on data-parallel rank 0 only (the other replicas hold the same
    all-reduced values; with expert parallelism the EP ranks are dense data-parallel replicas) and an
    expert gradient on expert-data-parallel rank 0."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    dense_first = parallel_state.get_data_parallel_rank() == 0
    expert_first = parallel_state.get_expert_data_parallel_rank() == 0
    return [
        param_is_not_shared(p)
        and param_is_not_tensor_parallel_duplicate(p)
        and (dense_first if getattr(p, "allreduce", True) else expert_first)
        for p in params
    ]


def _state(named: list[tuple[str, torch.nn.Parameter]], opt: torch.optim.Optimizer) -> dict[str, Any]:
    index = {id(p): name for name, p in named}
    sd = opt.state_dict()
    params = [p for group in opt.param_groups for p in group["params"]]
    optim = {index[id(params[i])]: value for i, value in sd["state"].items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    return {
        "model": {name: p.detach().cpu() for name, p in named},
        "optimizer": optim,
        "param_groups": groups,
    }


def _restore(
    named: list[tuple[str, torch.nn.Parameter]], opt: torch.optim.Optimizer, states: list[dict]
) -> None:
    model: dict[str, torch.Tensor] = {}
    optim: dict[str, Any] = {}
    for st in states:
        model.update(st["model"])
        optim.update(st["optimizer"])
    missing = [name for name, _ in named if name not in model]
    if missing:
        raise RuntimeError(f"checkpoint lacks parameters {missing[:3]}")
    with torch.no_grad():
        for name, p in named:
            p.copy_(model[name])
    params = [p for group in opt.param_groups for p in group["params"]]
    index = {id(p): name for name, p in named}
    sd = opt.state_dict()
    sd["state"] = {i: optim[index[id(p)]] for i, p in enumerate(params) if index[id(p)] in optim}
    for group, saved in zip(sd["param_groups"], states[0]["param_groups"], strict=True):
        group.update({k: v for k, v in saved.items() if k != "params"})
    opt.load_state_dict(sd)


def train_worker(ctx: WorkerContext, spec: TrainSpec) -> list[StepRecord]:
    """Run the steps on rank `ctx.rank`; report ("step", i, loss share, wall ms) after each."""
    warnings.simplefilter("ignore")  # megatron warns about every optional extension it does not find
    from megatron.core import parallel_state

    from primuspp.backends import kernels
    from primuspp.backends.megatron.schedule import install, uninstall

    table = spec.table
    kernels.use(spec.kernels)
    setup_parallel(table.pp, table.vpp, ctx.device, spec.tp, spec.ep)
    replica = parallel_state.get_data_parallel_rank()
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    chunks, ranges = rank_chunks(spec.model, table.placement, pp_rank, spec.seed, **spec.stage_config())
    for c in chunks:
        c.to(ctx.device)
    ddps = wrap_ddp(chunks, **dict(spec.ddp))
    named = named_parameters(ddps, ranges)
    opt = torch.optim.Adam([p for _, p in named], lr=spec.lr)
    stream = make_stream(spec.model.seq_len, spec.seed, spec.data)
    start, position = 0, 0
    if spec.load is not None:
        ckpt = checkpoint.find(spec.load)
        meta = checkpoint.read_meta(ckpt)
        _restore(named, opt, checkpoint.load_states(ckpt))
        start, position = int(meta["step"]), int(meta["data_position"])
    schedule = install(
        table,
        track_memory=spec.track_memory,
        sp_wgrad=spec.sp_wgrad,
        fb_overlap=spec.fb_overlap,
        post_validation=spec.post_validation,
    )
    validator = None
    if (spec.post_validation or spec.clip_grad is not None) and spec.clip is None:
        params = [p for _, p in named]
        validator = StepValidator(
            params,
            opt.step,
            optimizer=opt,
            clip_grad=spec.clip_grad,
            post=spec.post_validation,
            counted=norm_counted(params),  # the world's group: TP x PP x EP, each gradient counted once
            clone_grads=True,  # it finishes after the next zero_grad_buffer
        )
        if spec.validate_before_step:
            schedule.validators.append(validator)
    records: list[StepRecord] = []
    m, mbs = table.num_microbatches, spec.micro_batch_size

    def run(data: StepData) -> list[Any]:
        for d in ddps:
            d.zero_grad_buffer()
        iterators = [data.iterator() for _ in ddps]
        return schedule(
            forward_step_func=forward_step,
            data_iterator=iterators if len(ddps) > 1 else iterators[0],
            model=ddps,
            num_microbatches=m,
            seq_length=spec.model.seq_len,
            micro_batch_size=mbs,
        )

    try:
        for step in range(start, spec.steps):
            t0 = time.perf_counter()
            # each data-parallel replica reads its own microbatches of the step
            data = StepData(stream, position + replica * m * mbs, m, mbs)
            store = run(data)  # post-validated: on the last step's optimistic weights
            if validator is not None and validator.pending and validator.finish() != VALIDATED:
                store = run(data)  # the last step was rolled back or skipped: this one again
            for _, p in named:
                p.grad = p.main_grad
            if spec.inject_inf == (ctx.rank, step):
                named[0][1].grad.view(-1)[0] = float("inf")
            norm = None
            if validator is None:
                if spec.clip is not None and spec.clip_grad is not None:
                    norm = spec.clip([p for _, p in named], spec.clip_grad)
                opt.step()
                for _, p in named:
                    p.grad = None
            else:
                validator.step()
            position += spec.ep * m * mbs
            loss = sum(float(x["lm loss"]) for x in store) / m / spec.ep  # this rank's share of the mean
            if parallel_state.get_tensor_model_parallel_rank() != 0:
                loss = 0.0  # every TP rank of the last stage has the loss: counted once
            wall = (time.perf_counter() - t0) * 1000
            measured = schedule.last_step
            assert measured is not None
            records.append(StepRecord(step, loss, measured, wall, replica, grad_norm=norm))
            ctx.report(("step", step, loss, wall))
            done = step + 1
            if spec.save is not None and (
                done == spec.steps or (spec.save_interval and done % spec.save_interval == 0)
            ):
                if validator is not None:  # a checkpoint holds validated weights only
                    validator.finish()
                _save(ctx, spec, done, position, named, opt)
        if validator is not None:
            validator.finish()
            for record, outcome, norm in zip(records, validator.outcomes, validator.norms, strict=True):
                record.outcome, record.grad_norm = outcome, norm
    finally:
        uninstall()
    return records


def _save(
    ctx: WorkerContext,
    spec: TrainSpec,
    step: int,
    position: int,
    named: list[tuple[str, torch.nn.Parameter]],
    opt: torch.optim.Optimizer,
) -> None:
    table = spec.table
    meta = {
        "data_position": position,
        "pp": table.pp * spec.ep,  # the rank files: pipeline ranks x expert-parallel ranks
        "ep": spec.ep,
        "vpp": table.vpp,
        "algorithm": table.algorithm,
        "micro_batches": table.num_microbatches,
        "micro_batch_size": spec.micro_batch_size,
        "model": spec.model.as_dict(),
        "seed": spec.seed,
        "data": spec.data,
    }
    after_write = None
    if spec.fault == ("save", step) and ctx.rank == spec.fault_rank:

        def after_write() -> None:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.save(
        spec.save,  # type: ignore[arg-type]
        step,
        ctx.rank,
        {**_state(named, opt), "rank": ctx.rank},
        meta,
        barrier=dist.barrier,
        keep=spec.keep,
        after_write=after_write,
    )
