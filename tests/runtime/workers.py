"""Functions the spawned ranks of the runtime tests run (importable by the spawn children)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from primuspp.runtime.executor import Cell, TensorSpec
from primuspp.runtime.launch import WorkerContext
from primuspp.runtime.p2p import P2P
from primuspp.runtime.runner import ScheduleRunner
from primuspp.schedule.table import ScheduleTable


def run_jobs(ctx: WorkerContext, jobs: Sequence[tuple[Callable[..., Any], Any]]) -> list[Any]:
    """Several runs one after the other in one process group (saves the start-up per table)."""
    return [fn(ctx, arg) for fn, arg in jobs]


class ShapeOnlyExecutor:
    """An executor that computes nothing (as the cost-model emulator will): it sleeps, and hands real p2p
    tensors whose values name the (microbatch, stage, direction) that produced them, so the receiver can
    check that every message reached the right consumer."""

    def __init__(self, table: ScheduleTable, seconds: float = 0.0) -> None:
        self.table = table
        self.device = torch.device("cpu")
        self.seconds = seconds
        self.spec = TensorSpec((2, 3), torch.float32)
        self.errors: list[str] = []

    @staticmethod
    def _code(mb: int, stage: int, grad: bool) -> float:
        return (-1.0 if grad else 1.0) * (1000 * mb + stage + 1)

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec:
        return self.spec

    def _check(self, got: torch.Tensor | None, want: float, where: str) -> None:
        if got is None or not bool((got == want).all()):
            seen = None if got is None else float(got.flatten()[0])
            self.errors.append(f"{where}: got {seen}, want {want}")

    def forward(self, cell: Cell, x: torch.Tensor | None) -> torch.Tensor | None:
        pl = self.table.placement
        mb, s = cell.microbatch, cell.stage
        if not cell.first:
            self._check(x, self._code(mb, pl.prev_stage[s], False), f"F{mb}.{s} input")
        time.sleep(self.seconds)
        return None if cell.last else torch.full(self.spec.shape, self._code(mb, s, False))

    def backward_input(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        pl = self.table.placement
        mb, s = cell.microbatch, cell.stage
        if not cell.last:
            self._check(grad, self._code(mb, pl.next_stage[s], True), f"B{mb}.{s} grad")
        time.sleep(self.seconds)
        return None if cell.first else torch.full(self.spec.shape, self._code(mb, s, True))

    def backward_weight(self, cell: Cell) -> None:
        time.sleep(self.seconds)

    def backward_full(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        return self.backward_input(cell, grad)


#: receives posted at their table position, one ahead, as many as two buffers hold (the shape-only
#: executor's are 24 bytes), all of them (the default on gloo, within 64 MiB)
RECV_AHEAD: tuple[dict[str, Any], ...] = (
    {"recv_ahead": 0},
    {"recv_ahead": 1},
    {"recv_ahead": None, "recv_ahead_bytes": 48},
    {},
)


def shape_only_worker(ctx: WorkerContext, table: ScheduleTable) -> list[tuple[list[str], int]]:
    """Run `table` with the shape-only executor under each `RECV_AHEAD` mode; per mode (message
    mismatches, compute nodes run)."""
    out = []
    p2p = P2P()
    for mode in RECV_AHEAD:
        ex = ShapeOnlyExecutor(table, seconds=0.0005)
        runner = ScheduleRunner(table, ctx.rank, ex, p2p=p2p, **mode)
        assert runner.recv_ahead == mode.get("recv_ahead")  # gloo completes every op on its own
        result = runner.step()
        out.append((ex.errors, len(result.intervals)))
    return out
