"""Train the tiny GPT with a schedule table across ranks, and the same steps on one process for `--verify`.

`train_worker(ctx, spec)` is what each rank runs (under `runtime.launch`); `reference_run(spec)` runs the
same steps on one process with the whole model; `verify.compare` measures the difference.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from primuspp.backends.torch.gpt import GPTConfig, gpt_loss, gpt_microbatches, gpt_parts
from primuspp.backends.torch.pipeline import TorchPipeline, reference_step
from primuspp.errors import ConfigError
from primuspp.runtime.launch import WorkerContext
from primuspp.runtime.post_validation import VALIDATED, StepValidator
from primuspp.runtime.runner import RankStep
from primuspp.schedule.nodes import parse_node
from primuspp.schedule.table import ScheduleTable


@dataclass(frozen=True)
class TrainSpec:
    """Everything a rank needs to train: the table, the model, the data and the optimizer (plain SGD)."""

    table: ScheduleTable
    gpt: GPTConfig = field(default_factory=GPTConfig)
    micro_batch_size: int = 2
    steps: int = 1
    lr: float = 0.1
    seed: int = 0
    collect_grads: bool = False
    track_memory: bool = True
    offload_mode: str | None = None
    #: (rank, node text) where the executor raises, e.g. (2, "F3.2"): failure-handling tests
    fault: tuple[int, str] | None = None
    #: clip the global gradient norm to this (None: no clipping)
    clip_grad: float | None = None
    #: step each rank as soon as its last W is done, check norm and overflow after (runtime/post_validation)
    post_validation: bool = False
    #: (rank, step) where one gradient entry becomes inf before the optimizer step (overflow tests)
    inject_inf: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        # as the megatron backend: every stage holds at least one transformer block (with fewer, a stage
        # would hold the embedding or the head alone and the blocks would not be the schedule's stages)
        if not 1 <= self.num_parts <= self.gpt.layers:
            raise ConfigError(
                f"--layers {self.gpt.layers}: the model has {self.gpt.layers} transformer blocks, fewer than "
                f"the {self.num_parts} pipeline stages of this table (every stage needs at least one block)",
                key="layers",
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"--lr {self.lr}: expected a finite number > 0", key="lr")
        if self.clip_grad is not None and not (math.isfinite(self.clip_grad) and self.clip_grad > 0):
            raise ConfigError(f"--clip-grad {self.clip_grad}: expected a finite number > 0", key="clip-grad")

    @property
    def num_parts(self) -> int:
        return len(set(self.table.placement.model_part))


@dataclass
class StepRecord:
    """One rank, one step: its scaled microbatch losses, its measurements, and optionally its gradients."""

    losses: dict[int, float]
    measured: RankStep
    #: (model part, parameter name) -> gradient, for the parts whose primary copy lives on this rank
    grads: dict[tuple[int, str], torch.Tensor] | None = None
    #: the whole step on this rank: the schedule, the gradients' collection (--verify) and SGD
    wall_ms: float = 0.0
    #: what the optimizer step did (runtime/post_validation's outcomes); None without clipping/validation
    outcome: str | None = None


def step_data(spec: TrainSpec, step: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    m = spec.table.num_microbatches
    return gpt_microbatches(spec.gpt, spec.micro_batch_size, m, spec.seed + 1 + step)


def primary_stages(spec: TrainSpec) -> dict[int, int]:
    """Model part -> the lowest stage holding it (the copy whose gradients are reported)."""
    first: dict[int, int] = {}
    for s, part in enumerate(spec.table.placement.model_part):
        first.setdefault(part, s)
    return first


def rank_stages(spec: TrainSpec, rank: int) -> dict[int, nn.Module]:
    """This rank's stage modules: the primary copy of a part, or a deep copy for a replica."""
    pl = spec.table.placement
    parts = gpt_parts(spec.gpt, spec.num_parts, spec.seed)
    primary = primary_stages(spec)
    stages = {}
    for s in pl.stages_of_rank(rank):
        part = parts[pl.model_part[s]]
        stages[s] = part if primary[pl.model_part[s]] == s else copy.deepcopy(part)
    return stages


def sgd_(modules: Sequence[nn.Module], lr: float) -> None:
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                if p.grad is not None:
                    p.add_(p.grad, alpha=-lr)
                p.grad = None


def _parse_fault(text: str) -> tuple[str, int, int]:
    node = parse_node(text)
    return node.kind.value, node.microbatch, node.stage


def train_worker(ctx: WorkerContext, spec: TrainSpec) -> list[StepRecord]:
    """Run `spec.steps` steps on rank `ctx.rank`; report ("step", i, partial loss, wall ms) after each."""
    stages = rank_stages(spec, ctx.rank)
    for m in stages.values():  # before the pipeline: its activation meter excludes the parameters' storage
        m.to(ctx.device)
    pipe = TorchPipeline(
        spec.table,
        ctx.rank,
        stages,
        gpt_loss,
        spec.gpt.boundary(spec.micro_batch_size),
        device=ctx.device,
        track_memory=spec.track_memory,
        offload_mode=spec.offload_mode,
        check=False,  # validated where the table was built
    )
    if spec.fault is not None and spec.fault[0] == ctx.rank:
        pipe.executor.fault = _parse_fault(spec.fault[1])
    pl = spec.table.placement
    primary = primary_stages(spec)
    validator = _validator(spec, stages) if spec.post_validation or spec.clip_grad is not None else None
    records: list[StepRecord] = []
    for step in range(spec.steps):
        data = step_data(spec, step)
        # post-validated: no barrier after the first step, which starts on the last one's optimistic weights
        if pipe.p2p is not None and (not spec.post_validation or step == 0):
            pipe.p2p.barrier()  # the ranks start the step (and its wall clock) together
        t0 = time.perf_counter()
        result = pipe.step(data, sync_start=False)
        if validator is not None and validator.pending and validator.finish() != VALIDATED:
            # the last step was rolled back or skipped: this one ran on weights that are not final
            _drop_grads(stages)
            result = pipe.step(data, sync_start=False)
        grads = None
        if spec.collect_grads:
            grads = {
                (pl.model_part[s], name): p.grad.detach().cpu().clone()
                for s, module in stages.items()
                if primary[pl.model_part[s]] == s
                for name, p in module.named_parameters()
                if p.grad is not None
            }
        if spec.inject_inf == (ctx.rank, step):
            _inject_inf(stages, validator)
        if validator is None:
            sgd_(list(stages.values()), spec.lr)
        else:
            validator.step()
        wall = (time.perf_counter() - t0) * 1000
        records.append(StepRecord(result.losses, result.measured, grads, wall))
        ctx.report(("step", step, result.loss, wall))
    if validator is not None:
        validator.finish()
        for record, outcome in zip(records, validator.outcomes, strict=True):
            record.outcome = outcome
    return records


def _validator(spec: TrainSpec, stages: dict[int, nn.Module]) -> StepValidator:
    """This rank's optimizer step (SGD) with clipping / post-validation; a replica's gradient is not counted
    in the norm (its primary copy is)."""
    pl, primary = spec.table.placement, primary_stages(spec)
    params, counted = [], []
    for s, module in sorted(stages.items()):
        for p in module.parameters():
            params.append(p)
            counted.append(primary[pl.model_part[s]] == s)
    modules = [stages[s] for s in sorted(stages)]
    return StepValidator(
        params,
        lambda: sgd_(modules, spec.lr),
        clip_grad=spec.clip_grad,
        post=spec.post_validation,
        counted=counted,
    )


def _drop_grads(stages: dict[int, nn.Module]) -> None:
    for module in stages.values():
        for p in module.parameters():
            p.grad = None


def _inject_inf(stages: dict[int, nn.Module], validator: StepValidator | None) -> None:
    """One entry of the first gradient counted in the norm becomes inf (an overflow on this rank)."""
    if validator is not None:
        params = [p for p, c in zip(validator.params, validator.counted, strict=True) if c]
    else:
        params = [p for s in sorted(stages) for p in stages[s].parameters()]
    grad = next(p.grad for p in params if p.grad is not None)
    grad.view(-1)[0] = float("inf")


@dataclass
class ReferenceStep:
    loss: float
    grads: dict[tuple[int, str], torch.Tensor]


def reference_run(spec: TrainSpec) -> list[ReferenceStep]:
    """The same steps on one process: whole model (one copy of each part), same data, same SGD.

    It runs on one thread, as the ranks do: CPU kernels split reductions by thread count, so this keeps
    the reference's rounding identical to the ranks' (a schedule that accumulates microbatches in the
    reference's order then matches bit for bit)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _reference_steps(spec)
    finally:
        torch.set_num_threads(threads)


def _reference_steps(spec: TrainSpec) -> list[ReferenceStep]:
    parts = gpt_parts(spec.gpt, spec.num_parts, spec.seed)
    params = [p for part in parts for p in part.parameters()]
    # the ranks' rule, on one process (one partial): clip or skip, then SGD
    validator = StepValidator(params, lambda: sgd_(parts, spec.lr), clip_grad=spec.clip_grad, post=False)
    out = []
    for step in range(spec.steps):
        replicas = len(spec.table.placement.routes)
        losses = reference_step(parts, step_data(spec, step), gpt_loss, replicas)
        grads = {
            (i, name): p.grad.detach().clone()
            for i, part in enumerate(parts)
            for name, p in part.named_parameters()
            if p.grad is not None
        }
        if spec.clip_grad is not None:
            validator.step()
        else:
            sgd_(parts, spec.lr)
        out.append(ReferenceStep(sum(losses), grads))
    return out
