"""What `primuspp train` asks of a training backend, and the one run summary every backend produces.

A backend (torch, megatron, the emulated cluster) implements `TrainBackend`: `check` validates the options
and builds everything a run needs before any rank starts (one-line `ConfigError`s), `launch` runs it,
`summarize` turns the finished run into a `RunSummary`, `dump` writes its pp_data, `render` prints it. The
command itself (commands/train.py) only picks the backend and calls these in order.

One meaning per field, in every backend:

- `step_time_ms`: wall time of one whole training step on the slowest rank — the schedule, and where the
  backend has them, gradient sync and the optimizer (the emulator has neither: there it is the runner's
  step, including the wait for its last sends);
- `pipeline_ms`: the schedule's span in that step — from the first node's start to the last node's end over
  all ranks, on one time axis (what the simulator predicts as its step time);
- `bubble_rate`: 1 − mean busy time / `pipeline_ms`; `peak_activation_bytes`: per rank.

Run-level aggregates use the steady steps: every step after the first (which includes warm-up), or the only
one. Nothing here imports torch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from primuspp.schedule.table import ScheduleTable
    from primuspp.trace.timeline import Timeline

#: progress callback: (step index, step loss or 0.0, step wall ms), once every rank finished the step
OnStep = Callable[[int, float, float], None]


class TrainOptions:
    """The `primuspp train` options by parameter name (`opts.hidden`; None where not given). A plain
    namespace, so a flag added to the command reaches every backend without changes here."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)

    def given(self, *names: str) -> list[str]:
        """Those of `names` that were set (not None, False or empty; 0 is a value)."""
        return [n for n in names if _given(getattr(self, n))]


def _given(value: Any) -> bool:
    if value is None or value is False:
        return False
    return not isinstance(value, list | tuple | str) or len(value) > 0


@dataclass
class StepSummary:
    """One training step (see the module doc for the fields' meaning)."""

    step: int
    step_time_ms: float
    pipeline_ms: float
    bubble_rate: float
    peak_activation_bytes: list[int]
    loss: float | None = None
    tokens_per_s: float | None = None

    @classmethod
    def measure(
        cls, step: int, timeline: Timeline, wall_ms: float, loss: float | None = None, tokens: int = 0
    ) -> StepSummary:
        """From the step's measured timeline and its wall time; `tokens` per step gives `tokens_per_s`."""
        from primuspp.trace.metrics import timeline_metrics

        m = timeline_metrics(timeline)
        rate = tokens / (wall_ms / 1000) if tokens and wall_ms > 0 else (0.0 if tokens else None)
        peaks = [int(r.peak_memory) for r in m.per_rank]
        return cls(step, wall_ms, m.step_time, m.bubble_rate, peaks, loss, rate)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step}
        if self.loss is not None:
            out["loss"] = self.loss
        out["step_time_ms"] = self.step_time_ms
        out["pipeline_ms"] = self.pipeline_ms
        if self.tokens_per_s is not None:
            out["tokens_per_s"] = self.tokens_per_s
        out["bubble_rate"] = self.bubble_rate
        out["peak_activation_bytes"] = self.peak_activation_bytes
        return out


@dataclass
class RunSummary:
    """A finished run, the same for every backend: the `--json` document is `to_dict()`.

    `table` is the table's record (algorithm, placement, pp, vpp, micro_batches), `model` the model's (None:
    no model, the emulator), `extra` the backend's own keys (verify, costs, data, checkpoint, pp_data...),
    `tokens_per_step` > 0 adds tokens/s."""

    backend: str
    table: dict[str, Any]
    steps: list[StepSummary]
    model: dict[str, Any] | None = None
    tokens_per_step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def measured(
        cls,
        backend: str,
        table: ScheduleTable,
        timelines: Sequence[Timeline],
        walls: Sequence[float],
        losses: Sequence[float | None] | None = None,
        **fields: Any,
    ) -> RunSummary:
        """From each step's measured timeline, wall time and loss; `fields["steps"]` numbers the steps
        (default 0, 1, ...), the others are this class's (`model`, `tokens_per_step`, `extra`)."""
        numbers = fields.pop("steps", range(len(timelines)))
        tokens = fields.get("tokens_per_step", 0)
        rows = zip(
            numbers,
            timelines,
            walls or [0.0] * len(timelines),
            losses or [None] * len(timelines),
            strict=True,
        )
        steps = [StepSummary.measure(n, tl, wall, loss, tokens) for n, tl, wall, loss in rows]
        return cls(backend, table.record(), steps, **fields)

    @property
    def steady(self) -> list[StepSummary]:
        """Every step after the first (warm-up), or the only one."""
        return self.steps[1:] or self.steps

    @property
    def steady_step_time_ms(self) -> float:
        return statistics.median(s.step_time_ms for s in self.steady) if self.steps else 0.0

    @property
    def steady_pipeline_ms(self) -> float:
        return statistics.median(s.pipeline_ms for s in self.steady) if self.steps else 0.0

    @property
    def bubble_rate(self) -> float:
        steady = self.steady
        return sum(s.bubble_rate for s in steady) / len(steady) if steady else 0.0

    @property
    def tokens_per_s(self) -> float:
        total_ms = sum(s.step_time_ms for s in self.steady)
        return self.tokens_per_step * len(self.steady) / (total_ms / 1000) if total_ms > 0 else 0.0

    @property
    def peak_activation_bytes(self) -> list[int]:
        """Per rank, the highest over all steps."""
        peaks = [s.peak_activation_bytes for s in self.steps]
        return [max(col) for col in zip(*peaks, strict=True)] if peaks else []

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.backend, **self.table}
        if self.model is not None:
            out["model"] = self.model
        out.update(self.extra)
        losses = [s.loss for s in self.steps]
        if any(x is not None for x in losses):
            out["losses"] = losses
        out["step_times_ms"] = [s.step_time_ms for s in self.steps]
        out["steady_step_time_ms"] = self.steady_step_time_ms
        out["steady_pipeline_ms"] = self.steady_pipeline_ms
        if self.tokens_per_step:
            out["tokens_per_s"] = self.tokens_per_s
        out["bubble_rate"] = self.bubble_rate
        out["peak_activation_bytes"] = self.peak_activation_bytes
        out["steps"] = [s.to_dict() for s in self.steps]
        return out


class TrainBackend(Protocol):
    """One way to run `primuspp train` (see the module doc). `check` raises `ConfigError` for anything
    wrong, before any rank starts and before anything is written; it returns what `launch` needs."""

    name: str

    def check(self, opts: TrainOptions) -> Any: ...

    def launch(self, prepared: Any, on_step: OnStep) -> Any | None:
        """Run on the ranks; the finished run, or None on a non-zero rank under torchrun."""
        ...

    def summarize(self, run: Any) -> RunSummary: ...

    def dump(self, run: Any, directory: Path) -> None:
        """Write the run's pp_data (Primus' layout) into `directory` (a fresh one)."""
        ...

    def render(self, summary: RunSummary) -> None:
        """Print the summary for a person (stdout)."""
        ...
