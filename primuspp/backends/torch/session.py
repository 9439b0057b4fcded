"""A whole training run on the torch backend, launcher side: spawn the ranks, gather what they measured,
verify against one process, write pp_data. `primuspp train --backend torch` is a thin layer over this."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from primuspp.backends.torch.train import StepRecord, TrainSpec, reference_run, train_worker
from primuspp.backends.torch.verify import VerifyReport, compare, step_losses
from primuspp.runtime.backend import RunSummary
from primuspp.runtime.launch import launch_steps
from primuspp.runtime.post_validation import post_validation_record
from primuspp.runtime.trace import step_timelines
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
        post = post_validation_record(self.outcomes if self.spec.post_validation else None)
        return RunSummary.measured(
            "torch",
            table,
            self.timelines,
            self.wall_ms,
            self.losses,
            model=model,
            tokens_per_step=table.num_microbatches * self.spec.micro_batch_size * gpt.seq_len,
            extra={"verify": verify, **post},
        )


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
    per_rank: list[list[StepRecord]] | None = launch_steps(train_worker, spec.table.pp, spec, on_step=on_step)
    if per_rank is None:
        return None
    timelines = step_timelines(spec.table, [[r.measured for r in records] for records in per_rank], name)
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
