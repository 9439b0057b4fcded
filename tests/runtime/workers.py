"""Functions the spawned ranks of the runtime tests run (importable by the spawn children)."""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.backends.torch.train import StepRecord, TrainSpec, train_worker
from primuspp.runtime.launch import WorkerContext


def run_jobs(ctx: WorkerContext, specs: Sequence[TrainSpec]) -> list[list[StepRecord]]:
    """Several training runs one after the other in one process group (saves the start-up per table)."""
    return [train_worker(ctx, spec) for spec in specs]
