"""A whole Megatron training run, launcher side: check the inputs, spawn the ranks, gather what they measured,
summarise, write pp_data. `primuspp train` (backend megatron) is a thin layer over this.

Everything that can be wrong with the input is checked here before any rank starts (one-line errors, no
process left behind): megatron-core importable, layers enough for the stages, conflicting Megatron settings,
the data file, the checkpoint to load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primuspp.backends.megatron import checkpoint
from primuspp.backends.megatron.model import split_layers
from primuspp.backends.megatron.train import StepRecord, TrainSpec, train_worker
from primuspp.errors import ConfigError
from primuspp.runtime.launch import StepProgress, launch, under_torchrun
from primuspp.runtime.post_validation import POST_OUTCOMES
from primuspp.runtime.trace import step_timeline
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import write_pp_data
from primuspp.trace.timeline import Timeline


def parse_settings(pairs: list[str]) -> tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...]]:
    """`KEY=VALUE` texts (values as YAML scalars) into (TransformerConfig settings, DDP settings)."""
    import dataclasses

    import yaml
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    model_keys = {f.name for f in dataclasses.fields(TransformerConfig)}
    ddp_keys = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    model, ddp = {}, {}
    for text in pairs:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--megatron {text!r}: expected KEY=VALUE", key="megatron")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if key in ddp_keys:
            ddp[key] = value
        elif key in model_keys:
            model[key] = value
        else:
            raise ConfigError(
                f"--megatron {key}: not a TransformerConfig or DistributedDataParallelConfig field",
                key="megatron",
            )
    return tuple(sorted(model.items())), tuple(sorted(ddp.items()))


def check_inputs(spec: TrainSpec) -> None:
    """Raise a one-line ConfigError for anything that would make the ranks fail."""
    from primuspp.backends.megatron import require

    require()
    from primuspp.backends.megatron.data import make_stream
    from primuspp.backends.megatron.schedule import check

    table = spec.table
    if table.placement.kind == "bidirectional":
        check(table, {})  # raises: the bidirectional placement is refused
    split_layers(spec.model.layers, table.num_stages)
    check(table, dict(spec.model.settings), shared_embeddings=False)
    try:
        _config_check(spec)
    except (AssertionError, ValueError, TypeError) as err:
        raise ConfigError(f"invalid Megatron model settings: {err}", key="megatron") from None
    make_stream(spec.model.seq_len, spec.seed, spec.data)  # reads the data file: missing / too short
    if spec.load is not None:
        ckpt = checkpoint.find(spec.load)
        meta = checkpoint.check(ckpt, spec.model.as_dict())  # every rank's file loaded safely, here
        if int(meta["step"]) >= spec.steps:
            raise ConfigError(
                f"--load {ckpt}: the checkpoint is at step {meta['step']}, --steps is {spec.steps} "
                "(the total to reach): nothing to train",
                key="steps",
            )


def _config_check(spec: TrainSpec) -> None:
    """Build the config once here: Megatron's own validation of the settings (heads vs hidden, ...)."""
    import warnings

    from primuspp.backends.megatron.model import transformer_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer_config(spec.model, spec.model.layers)


@dataclass
class TrainingRun:
    spec: TrainSpec
    steps: list[int]
    losses: list[float]
    wall_ms: list[float]  # per step: the slowest rank's whole step (schedule, grad sync, optimizer)
    timelines: list[Timeline]
    #: each step's optimizer outcome (runtime/post_validation), the same on every rank; None: plain Adam
    outcomes: list[str | None] | None = None

    def summary(self) -> dict[str, Any]:
        """The `--json` document."""
        table, spec = self.spec.table, self.spec
        rows = []
        peaks = [0] * table.pp
        for step, loss, wall, tl in zip(self.steps, self.losses, self.wall_ms, self.timelines, strict=True):
            m = timeline_metrics(tl)
            per_rank = [int(r.peak_memory) for r in m.per_rank]
            peaks = [max(a, b) for a, b in zip(peaks, per_rank, strict=True)]
            rows.append(
                {
                    "step": step,
                    "loss": loss,
                    "step_time_ms": wall,
                    "pipeline_ms": m.step_time,
                    "tokens_per_s": spec.tokens_per_step / (wall / 1000) if wall > 0 else 0.0,
                    "bubble_rate": m.bubble_rate,
                    "peak_activation_bytes": per_rank,
                }
            )
        steady = rows[1:] or rows  # the first step includes warm-up
        total_ms = sum(r["step_time_ms"] for r in steady)
        return {
            "backend": "megatron",
            **table.record(),
            "micro_batch_size": spec.micro_batch_size,
            "model": {**spec.model.as_dict(), "stages": table.num_stages},
            "data": spec.data or "synthetic",
            "losses": self.losses,
            "step_times_ms": [r["step_time_ms"] for r in rows],
            "tokens_per_s": spec.tokens_per_step * len(steady) / (total_ms / 1000) if total_ms > 0 else 0.0,
            "bubble_rate": sum(r["bubble_rate"] for r in steady) / len(steady),
            "peak_activation_bytes": peaks,
            "steps": rows,
            **self._post_validation(),
        }

    def _post_validation(self) -> dict[str, Any]:
        if not self.spec.post_validation or self.outcomes is None:
            return {}
        return {"post_validation": {k: self.outcomes.count(k) for k in POST_OUTCOMES}}


def run_training(
    spec: TrainSpec, on_step: Callable[[int, float, float], None] | None = None
) -> TrainingRun | None:
    """Train on `spec.table.pp` ranks (spawned here, or this process is one rank under torchrun: then rank 0
    gets the run, the others None). Raises `LaunchError` naming the failing rank."""
    check_inputs(spec)
    if under_torchrun():
        import os

        world = int(os.environ["WORLD_SIZE"])
        if world != spec.table.pp:
            raise ConfigError(
                f"torchrun started {world} processes; the Megatron backend runs one per pipeline rank "
                f"(--pp {spec.table.pp})",
                key="pp",
            )
    progress = StepProgress(spec.table.pp, on_step) if on_step is not None and not under_torchrun() else None
    per_rank: list[list[StepRecord]] | None = launch(train_worker, spec.table.pp, spec, on_report=progress)
    if per_rank is None:
        return None
    n = len(per_rank[0])
    steps = [per_rank[0][i].step for i in range(n)]
    losses = [sum(records[i].loss for records in per_rank) for i in range(n)]
    wall = [max(records[i].wall_ms for records in per_rank) for i in range(n)]
    timelines = [
        step_timeline(
            spec.table, [records[i].measured for records in per_rank], spec.table.algorithm, str(s + 1)
        )
        for i, s in enumerate(steps)
    ]
    outcomes = [records.outcome for records in per_rank[0]]
    return TrainingRun(spec, steps, losses, wall, timelines, outcomes)


def dump_pp_data(run: TrainingRun, directory: Path) -> None:
    """Primus' pp_data layout (one entry per step), memory in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    model = run.spec.model
    extra = {"backend": "megatron", "memory_unit": "bytes", "model": "megatron-gpt", "hidden": model.hidden}
    write_pp_data(run.timelines, directory, extra)
