"""Public API: run training steps of any schedule table on plain `nn.Module` stages.

    pipe = TorchPipeline(table, rank, {s: module_s, ...}, loss_fn, boundary=TensorSpec((b, t, h)))
    result = pipe.step(microbatches)      # [(input, target)] * num_microbatches
    optimizer.step(); optimizer.zero_grad()

One process per pipeline rank, `torch.distributed` initialised (gloo on CPU, nccl on GPU); a table with one
rank needs none. Gradients accumulate into the modules' `.grad` (sum over microbatches of loss / m), exactly
as one process running the whole model would compute them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from primuspp.backends.torch.executor import LossFn, Microbatch, ModuleExecutor
from primuspp.runtime.executor import TensorSpec
from primuspp.runtime.memory import ActivationMeter
from primuspp.runtime.p2p import P2P
from primuspp.runtime.replicas import replica_groups, sum_replica_grads
from primuspp.runtime.runner import RankStep, ScheduleRunner
from primuspp.schedule.table import ScheduleTable


@dataclass
class StepResult:
    """One rank's view of a step: the scaled losses of the microbatches that end here, and what it measured.

    `loss` is this rank's share of the step loss (sum of loss / m); sum it over ranks for the step loss."""

    losses: dict[int, float]
    measured: RankStep

    @property
    def loss(self) -> float:
        return sum(self.losses.values())


class TorchPipeline:
    """Executes `table` on this rank's stage modules, one step per `step()` call.

    `stages` maps every virtual stage this rank holds to its module; in the bidirectional placement, stage
    p+j is a copy of part j (build it as a deep copy of the same initial weights): after each step the
    copies' gradients are summed so each ends with its part's full gradient. `boundary` gives the tensor
    between stages (one spec, or a function of (microbatch, stage)). `offload_mode` is the activation
    meter's ("copy" or "account"; default: copy on CUDA, account on CPU).
    """

    def __init__(
        self,
        table: ScheduleTable,
        rank: int,
        stages: Mapping[int, nn.Module],
        loss_fn: LossFn,
        boundary: TensorSpec | Callable[[int, int], TensorSpec],
        *,
        device: torch.device | str = "cpu",
        p2p: P2P | None = None,
        track_memory: bool = True,
        offload_mode: str | None = None,
        check: bool = True,
        recv_ahead: int | None = None,
    ) -> None:
        expected = table.placement.stages_of_rank(rank)
        if sorted(stages) != expected:
            raise ValueError(f"rank {rank} holds stages {expected}, got modules for {sorted(stages)}")
        self.table, self.rank = table, rank
        self.device = torch.device(device)
        self.stages = dict(stages)
        if p2p is None and table.pp > 1 and dist.is_available() and dist.is_initialized():
            p2p = P2P()
        self.p2p = p2p
        self.executor = ModuleExecutor(self.stages, loss_fn, boundary, self.device)
        meter: ActivationMeter | bool = False
        if track_memory:
            meter = ActivationMeter(offload_mode=offload_mode)
        self.runner = ScheduleRunner(
            table, rank, self.executor, p2p=p2p, meter=meter, check=check, recv_ahead=recv_ahead
        )
        self._replicated = bool(replica_groups(table.placement))

    def step(self, microbatches: Sequence[Microbatch], sync_start: bool = True) -> StepResult:
        if len(microbatches) != self.table.num_microbatches:
            raise ValueError(
                f"the table runs {self.table.num_microbatches} microbatches, got {len(microbatches)}"
            )
        self.executor.begin_step(microbatches)
        if self.runner.meter is not None:  # parameters are not activations (wherever they live now)
            self.runner.meter.set_exclude(p for m in self.stages.values() for p in m.parameters())
        if self._replicated:
            # after the last step every copy of a part holds the part's gradient: keep it in the first copy
            # only, or the sum below would count it twice
            for stages in replica_groups(self.table.placement).values():
                if stages[1] in self.stages:
                    for p in self.stages[stages[1]].parameters():
                        p.grad = None
        measured = self.runner.step(sync_start=sync_start)
        if self._replicated:
            params_of = {s: list(m.parameters()) for s, m in self.stages.items()}
            sum_replica_grads(self.table.placement, self.rank, params_of, self.p2p)
        losses = self.executor.scaled_losses()  # one division and conversion for all microbatches
        self.executor.losses = {}
        return StepResult(losses, measured)


def reference_step(
    parts: Sequence[nn.Module], microbatches: Sequence[Microbatch], loss_fn: LossFn, replicas: int = 1
) -> list[float]:
    """One process, whole model: each microbatch forward then backward of loss / m, in order.

    `parts` are the model's parts in order (one copy each). Returns the scaled loss of each microbatch.
    With `replicas` > 1 (a bidirectional placement: microbatch i runs on replica i % replicas) each
    replica's microbatches accumulate into gradients of their own, which are then summed: the pipeline's
    order of additions, so the two agree bit for bit rather than to fp32 rounding."""
    m = len(microbatches)
    losses = [0.0] * m
    params = [p for part in parts for p in part.parameters()]
    totals: list[torch.Tensor | None] = []
    for replica in range(replicas):
        if replica:  # the first replica adds to gradients already there (TorchPipeline.step does too)
            for p in params:
                p.grad = None
        for i in range(replica, m, replicas):
            x, target = microbatches[i]
            for part in parts:
                x = part(x)
            loss = loss_fn(x, target) / m
            loss.backward()
            losses[i] = float(loss.detach())
        grads = [p.grad for p in params]
        totals = [_add(a, b) for a, b in zip(totals, grads, strict=True)] if replica else grads
    for p, g in zip(params, totals, strict=True):
        p.grad = g
    return losses


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else a + b
