"""The emulated cluster: the real runner, processes and p2p, with compute replaced by cost-model waits.

`EmulatedExecutor` implements the executor protocol without computing anything: each F, B, W or BW waits
for its node's cost-model duration (ms; `time.sleep` for the bulk and a short spin for the last fraction of a
millisecond, so sleeping ranks leave the cores free and 8 ranks on 2 cores behave like 8 devices), and hands
small correctly shaped tensors to the runner, which sends them over the real p2p path (gloo on CPU). The
F part of an FB node waits `fb_overlap` x F and its backward part `fb_overlap` x B (or BW), so the pair
costs `fb_overlap` x (F + B) as in the simulator.

Memory follows the cost model through the real activation meter: F allocates its stage's activation
(`activation` units x `unit_bytes`, an untouched `torch.empty`, so nothing is paged in) and saves it through
autograd's saved-tensor hooks like a real forward; B drops the `b_free_fraction` part (or, when the fraction
is negative, leaves more behind in the weight-grad store, as split layers do); W drops the rest; BW all.
OFFLOAD/RELOAD move it like real activations. A dump then carries a memory curve in bytes.

`run_emulation(spec)` launches one process per rank and returns one measured Timeline per step.

Between two steps each rank runs its optimizer step (a wait of `optimizer_ms`, 0 by default) as the
simulator lays out iterations (primuspp/sim/iterations.py): synchronously (a barrier stands for the global
grad-norm all-reduce, every rank waits for the slowest, then steps) or, with `post_validation`, as soon as
its own last node is done: it posts the validation all-reduce asynchronously (on a process group of its own,
checked before its next optimizer step; clipping and overflow never trigger here, so nothing is rolled back)
and starts the next step at once. `EmulatedRun.iterations` then holds the measured iteration ends, steady
step time and steady bubble, defined as the simulator defines them.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from primuspp.runtime.executor import Cell, TensorSpec
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.runtime.memory import ActivationMeter
from primuspp.runtime.p2p import P2P
from primuspp.runtime.runner import RankStep, ScheduleRunner
from primuspp.runtime.trace import step_timelines
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.semantics import SEMANTICS, kind_durations
from primuspp.schedule.table import ScheduleTable
from primuspp.sim.iterations import optimizer_per_rank
from primuspp.trace.pp_data import write_pp_data
from primuspp.trace.timeline import Timeline

if TYPE_CHECKING:
    from primuspp.runtime.backend import RunSummary

#: bytes of one activation unit (the cost model's `activation` = 1: one microbatch through a whole rank)
UNIT_BYTES = 1 << 20
#: the last part of a wait is spun rather than slept (sleep wake-ups overshoot by ~0.1 ms)
SPIN_S = 0.0003
_BOUNDARY = TensorSpec((4,), torch.float32)


class _Hold(torch.autograd.Function):
    """Saves `tensors` for backward (through the meter's saved-tensor hooks); the tiny output keeps the
    graph, and with it the saved tensors, alive until the cell drops it."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*tensors)
        return anchor.detach().clone()

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:  # never called: the graph is only dropped
        return (None, *(None for _ in ctx.saved_tensors))


def wait_until(deadline: float, spin: float = SPIN_S) -> None:
    """Sleep until `spin` seconds before `deadline` (perf_counter), then spin to it."""
    now = time.perf_counter()
    if deadline - now > spin:
        time.sleep(deadline - now - spin)
    while time.perf_counter() < deadline:
        pass


class EmulatedExecutor:
    """Waits cost-model durations instead of computing (see the module doc). Durations are ms."""

    def __init__(
        self,
        table: ScheduleTable,
        rank: int,
        costs: CostModel,
        *,
        unit_bytes: int = UNIT_BYTES,
        spin: float = SPIN_S,
        device: torch.device | str = "cpu",
    ) -> None:
        self.table, self.rank = table, rank
        self.device = torch.device(device)
        sc = costs.for_placement(table.placement)
        self.spin = spin
        self.unit_bytes = unit_bytes
        n = table.num_stages
        frac = [sc.fraction_freed_by_b(s) for s in range(n)]
        act = [max(0, round(a * unit_bytes)) for a in sc.activation]
        # bytes freed by B, by W, and added by B (negative fractions), per stage
        self._b_bytes = [round(act[s] * min(max(frac[s], 0.0), 1.0)) for s in range(n)]
        self._w_bytes = [act[s] - self._b_bytes[s] for s in range(n)]
        self._b_extra = [round(act[s] * -frac[s]) if frac[s] < 0 else 0 for s in range(n)]
        self._durations = kind_durations(sc)  # per simple kind, its time on each stage (`semantics`)
        # the parts of composite nodes (FB) on this rank, (kind, microbatch, stage): each waits its own
        # duration times the composite's overlap factor (`semantics`: FB's `fb_overlap`)
        self._overlap: dict[tuple[NodeKind, int, int], float] = {}
        for node in table.ranks[rank]:
            overlap = SEMANTICS[node.kind].overlap
            if overlap is not None:
                for part in node.parts:
                    self._overlap[(part.kind, part.microbatch, part.stage)] = getattr(sc, overlap)
        self._anchor = torch.zeros(1, requires_grad=True)

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec:
        return _BOUNDARY

    def planned_ms(self, kind: NodeKind, microbatch: int, stage: int) -> float:
        """How long a node (F, B, W or BW; an FB's parts as such) of this rank waits, in ms: its cost-model
        duration, an FB part's times the composite's overlap factor."""
        return self._durations[kind][stage] * self._overlap.get((kind, microbatch, stage), 1.0)

    def _deadline(self, kind: NodeKind, cell: Cell) -> float:
        """When the node started now should end (perf_counter seconds)."""
        return time.perf_counter() + self.planned_ms(kind, cell.microbatch, cell.stage) / 1000.0

    def _buffer(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def _boundary(self) -> torch.Tensor:
        return torch.zeros(_BOUNDARY.shape, dtype=_BOUNDARY.dtype, device=self.device)

    # Each node takes its deadline first and does its own (small) work before waiting, so that work is part
    # of the node's duration rather than added to it.

    def forward(self, cell: Cell, x: torch.Tensor | None) -> torch.Tensor | None:
        s = cell.stage
        deadline = self._deadline(NodeKind.F, cell)
        held = []
        for nbytes in (self._b_bytes[s], self._w_bytes[s]):
            # saved through the meter's hooks, as a real forward's activations are
            held.append(_Hold.apply(self._anchor, self._buffer(nbytes)) if nbytes > 0 else None)
        cell.data = held
        y = None if cell.last else self._boundary()
        wait_until(deadline, self.spin)
        return y

    def backward_input(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        s = cell.stage
        deadline = self._deadline(NodeKind.B, cell)
        cell.data[0] = None  # the part B frees
        if self._b_extra[s]:  # what B leaves for W beyond the forward's activations (freed by W)
            cell.wgrad.put(_noop, self._buffer(self._b_extra[s]))
        g = None if cell.first else self._boundary()
        wait_until(deadline, self.spin)
        return g

    def backward_weight(self, cell: Cell) -> None:
        deadline = self._deadline(NodeKind.W, cell)
        cell.data = None
        cell.wgrad.run()
        wait_until(deadline, self.spin)

    def backward_full(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        deadline = self._deadline(NodeKind.BW, cell)
        cell.data = None
        g = None if cell.first else self._boundary()
        wait_until(deadline, self.spin)
        return g


def _noop() -> None:
    pass


@dataclass(frozen=True)
class EmulationSpec:
    """An emulated run: the table, the cost model (ms, activation units), the steps, and between steps the
    optimizer step (ms: one value, or one per rank), synchronous or post-validated (see the module doc)."""

    table: ScheduleTable
    costs: CostModel
    steps: int = 3
    unit_bytes: int = UNIT_BYTES
    spin: float = SPIN_S
    post_validation: bool = False
    optimizer_ms: float | tuple[float, ...] = 0.0


def _precise_timers() -> None:
    """Linux lets a sleep end up to 50 us late by default (timer slack); an emulated rank wants 1 ns."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(29, 1)  # PR_SET_TIMERSLACK


@dataclass
class RankIterations:
    """One rank's run: its steps, and after each its optimizer step (start, end: perf_counter ns, the
    host's monotonic clock, which every process on the host shares)."""

    steps: list[RankStep]
    optimizer: list[tuple[int, int]]


def emulate_iterations_worker(ctx: WorkerContext, spec: EmulationSpec) -> RankIterations:
    """Run `spec.steps` emulated steps on rank `ctx.rank`, each followed by the optimizer step (see the
    module doc); report ("step", i, 0.0, ms) after each step."""
    _precise_timers()
    table = spec.table
    ex = EmulatedExecutor(
        table, ctx.rank, spec.costs, unit_bytes=spec.unit_bytes, spin=spec.spin, device=ctx.device
    )
    p2p = P2P() if table.pp > 1 else None
    runner = ScheduleRunner(table, ctx.rank, ex, p2p=p2p, meter=ActivationMeter(), check=False)
    optimizer_s = optimizer_per_rank(spec.optimizer_ms, table.pp, "optimizer_ms")[ctx.rank] / 1000.0
    # the validation all-reduce gets a group of its own: it runs while the next step's p2p does
    validation = dist.new_group(backend="gloo") if spec.post_validation and p2p is not None else None
    pending = None
    steps, windows = [], []
    for i in range(spec.steps):
        measured = runner.step(sync_start=i == 0)  # later steps start when the optimizer step is done
        steps.append(measured)
        ctx.report(("step", i, 0.0, max((iv.end for iv in measured.intervals), default=0.0)))
        if spec.post_validation:
            if pending is not None:  # the previous step's validation is in before this rank steps again
                pending.wait()
            start = time.perf_counter_ns()
            if validation is not None:  # this rank's partial grad-norm^2 and overflow flag, summed
                pending = dist.all_reduce(torch.zeros(2), group=validation, async_op=True)
        else:
            if p2p is not None:  # the global grad-norm all-reduce: every rank waits for the slowest
                p2p.barrier()
            start = time.perf_counter_ns()
        if optimizer_s > 0:
            wait_until(start / 1e9 + optimizer_s, spec.spin)
        windows.append((start, time.perf_counter_ns()))
    if pending is not None:
        pending.wait()
    return RankIterations(steps, windows)


def measured_iterations(spec: EmulationSpec, per_rank: list[RankIterations]) -> dict[str, Any]:
    """The run's iterations as `sim.iterations.IterationRun.record` reports simulated ones, measured (ms from
    the earliest rank's first step start): the iteration ends (the last rank's optimizer step done), the
    steady step time and the steady bubble = 1 - mean over ranks of (node time + optimizer time per step,
    its median over the steps after the first) / steady step time.

    The steady step is the median of the times from one iteration's end to the next (the simulator's
    (end K - end 1) / (K - 1) is their mean; they agree once iterations repeat, and the median is not moved
    by one step that a busy machine stalled)."""
    origins = [r.steps[0].origin_ns for r in per_rank]
    if any(o is None for o in origins):  # a device clock: take each rank's first optimizer start as is
        origins = [r.optimizer[0][0] for r in per_rank]
    t0 = min(origins)  # type: ignore[type-var]
    k = spec.steps
    ends = [max(r.optimizer[i][1] for r in per_rank) for i in range(k)]
    ends_ms = [(e - t0) / 1e6 for e in ends]  # type: ignore[operator]
    gaps = [b - a for a, b in pairwise(ends_ms)]
    steady = statistics.median(gaps) if gaps else ends_ms[0]
    steady_steps = range(1, k) if k > 1 else range(k)
    work = []
    for r in per_rank:
        nodes = [sum(iv.end - iv.start for iv in r.steps[i].intervals) for i in steady_steps]
        opt = [(r.optimizer[i][1] - r.optimizer[i][0]) / 1e6 for i in steady_steps]
        per_step = [a + b for a, b in zip(nodes, opt, strict=True)]
        work.append(statistics.median(per_step))
    return {
        "count": k,
        "mode": "post-validation" if spec.post_validation else "synchronous",
        "post_validation": spec.post_validation,
        "optimizer_cost": list(optimizer_per_rank(spec.optimizer_ms, spec.table.pp, "optimizer_ms")),
        "first_step_time": ends_ms[0],
        "steady_step_time": steady,
        "steady_bubble_rate": 1.0 - sum(work) / len(work) / steady if steady > 0 else 0.0,
        "iteration_ends": ends_ms,
    }


@dataclass
class EmulatedRun:
    spec: EmulationSpec
    timelines: list[Timeline]
    #: per step: the slowest rank's runner step (RankStep.wall_ms)
    wall_ms: list[float] = field(default_factory=list)
    #: `measured_iterations` (None when the run was assembled from steps alone)
    iterations: dict[str, Any] | None = None

    def summary(self) -> RunSummary:
        """The `train --emulate` run summary (steps measured; the command adds what it predicted)."""
        from primuspp.runtime.backend import RunSummary

        extra: dict[str, Any] = {"costs": costs_record(self.spec.costs), "unit_bytes": self.spec.unit_bytes}
        if self.iterations is not None:
            extra["iterations"] = self.iterations
        return RunSummary.measured("emulate", self.spec.table, self.timelines, self.wall_ms, extra=extra)


def run_emulation(
    spec: EmulationSpec,
    *,
    on_report: Callable[[int, Any], None] | None = None,
    name: str | None = None,
) -> EmulatedRun | None:
    """Emulate `spec` on `table.pp` spawned ranks (under torchrun: this rank; only rank 0 gets the run)."""
    per_rank = launch(emulate_iterations_worker, spec.table.pp, spec, on_report=on_report)
    if per_rank is None:  # a non-zero rank under torchrun
        return None
    return _emulated_run(spec, per_rank, name or spec.table.algorithm)


def _emulated_run(spec: EmulationSpec, per_rank: list[RankIterations], name: str) -> EmulatedRun:
    steps = [r.steps for r in per_rank]
    return EmulatedRun(
        spec,
        step_timelines(spec.table, steps, name, "emulated"),
        [max(r[i].wall_ms for r in steps) for i in range(spec.steps)],
        measured_iterations(spec, per_rank),
    )


def costs_record(costs: CostModel) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in costs.__dict__.items()}


def dump_emulation(run: EmulatedRun, directory: Path, costs_source: str = "") -> None:
    """Primus' pp_data layout; config.json says it was emulated and with which cost model."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = run.spec
    extra = {
        "costs_source": costs_source,
        "backend": "emulate",
        "emulated": True,
        "placement": spec.table.placement.kind,
        "memory_unit": "bytes",
        "unit_bytes": spec.unit_bytes,
        "costs": costs_record(spec.costs),
        "costs_note": "compute waits these durations (ms); p2p is real (gloo), its latency is measured",
    }
    write_pp_data(run.timelines, directory, extra)
