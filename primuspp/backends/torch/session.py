"""A whole training run on the torch backend, launcher side: spawn the ranks, gather what they measured,
verify against one process, write pp_data. `primuspp train --backend torch` is a thin layer over this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from primuspp.backends.torch.train import StepRecord, TrainSpec, reference_run, train_worker
from primuspp.backends.torch.verify import VerifyReport, compare, step_losses
from primuspp.runtime.backend import RunSummary, StepSummary
from primuspp.runtime.launch import StepProgress, launch, under_torchrun
from primuspp.runtime.post_validation import POST_OUTCOMES
from primuspp.runtime.trace import step_timeline
from primuspp.trace.pp_data import write_pp_data
from primuspp.trace.timeline import Timeline


@dataclass
class TrainingRun:
    spec: TrainSpec
    losses: list[float]
    timelines: list[Timeline]
    verify: VerifyReport | None = None
    #: per step: the slowest rank's whole step (schedule, gradient collection for --verify, SGD)
    wall_ms: list[float] = field(default_factory=list)
    #: each step's optimizer outcome (runtime/post_validation), the same on every rank; None: plain SGD
    outcomes: list[str | None] | None = None

    def summary(self) -> RunSummary:
        """The run summary (the `--json` document is its `to_dict()`)."""
        table, gpt = self.spec.table, self.spec.gpt
        walls = self.wall_ms or [0.0] * len(self.timelines)
        tokens = table.num_microbatches * self.spec.micro_batch_size * gpt.seq_len
        steps = [
            StepSummary.measure(i, tl, wall, loss=loss, tokens=tokens)
            for i, (loss, tl, wall) in enumerate(zip(self.losses, self.timelines, walls, strict=True))
        ]
        model = {
            "name": "tiny-gpt",
            "layers": gpt.layers,
            "hidden": gpt.hidden,
            "heads": gpt.heads,
            "seq_len": gpt.seq_len,
            "vocab": gpt.vocab,
            "micro_batch_size": self.spec.micro_batch_size,
            "stages": table.num_stages,
        }
        verify = self.verify.to_dict() if self.verify is not None else None
        extra = {"verify": verify, **self._post_validation()}
        return RunSummary("torch", table.record(), steps, model, tokens, extra)

    def _post_validation(self) -> dict[str, Any]:
        if not self.spec.post_validation or self.outcomes is None:
            return {}
        return {"post_validation": {k: self.outcomes.count(k) for k in POST_OUTCOMES}}


def run_training(
    spec: TrainSpec,
    *,
    verify: bool = False,
    on_step: Callable[[int, float, float], None] | None = None,
    name: str | None = None,
) -> TrainingRun | None:
    """Train on `spec.table.pp` ranks. Under torchrun only rank 0 gets the run (the others get None).

    Raises `LaunchError` naming the failing rank and node."""
    if verify and not spec.collect_grads:
        spec = replace(spec, collect_grads=True)
    # under torchrun each rank only sees its own reports: no combined progress there
    progress = StepProgress(spec.table.pp, on_step) if on_step is not None and not under_torchrun() else None
    per_rank: list[list[StepRecord]] | None = launch(train_worker, spec.table.pp, spec, on_report=progress)
    if per_rank is None:
        return None
    label = name or spec.table.algorithm
    timelines = [
        step_timeline(spec.table, [records[i].measured for records in per_rank], label, str(i + 1))
        for i in range(spec.steps)
    ]
    report = compare(per_rank, reference_run(spec)) if verify else None
    wall = [max(records[i].wall_ms for records in per_rank) for i in range(spec.steps)]
    outcomes = [r.outcome for r in per_rank[0]]
    return TrainingRun(spec, step_losses(per_rank), timelines, report, wall, outcomes)


def dump_pp_data(run: TrainingRun, directory: Path) -> None:
    """Primus' pp_data layout (one entry per step), memory in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    gpt = run.spec.gpt
    extra = {"backend": "torch", "memory_unit": "bytes", "model": "tiny-gpt", "hidden": gpt.hidden}
    write_pp_data(run.timelines, directory, extra)
