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
from primuspp.runtime.backend import RunSummary
from primuspp.runtime.launch import launch_steps, under_torchrun
from primuspp.runtime.post_validation import post_validation_record
from primuspp.runtime.trace import step_timelines
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
    from primuspp.backends import kernels
    from primuspp.backends.megatron import moe, require

    require()
    from primuspp.backends.megatron.data import make_stream
    from primuspp.backends.megatron.schedule import check

    table = spec.table
    if table.placement.kind == "bidirectional":
        check(table, {})  # raises: the bidirectional placement is refused
    split_layers(spec.model.layers, table.num_stages)
    settings = dict(spec.model.settings)
    moe.check(settings.get("num_moe_experts"), settings.get("moe_router_topk"), spec.ep)
    kernels.get(spec.kernels)  # the provider runs here: one line naming why not
    _check_tp(spec)
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


def _check_tp(spec: TrainSpec) -> None:
    """TP dividing the heads (and key/value heads), sequence parallelism only with TP > 1, MoE under TP only
    with SP and EP 1, no checkpoints of TP runs (their files would hold pieces under whole-model names)."""
    from primuspp.backends.megatron import tp

    settings = dict(spec.model.settings)
    if settings.get("sequence_parallel"):
        raise ConfigError(
            "--megatron sequence_parallel=True: use --sequence-parallel (with --tp > 1)", key="megatron"
        )
    if settings.get("tensor_model_parallel_size") not in (None, 1):
        raise ConfigError("--megatron tensor_model_parallel_size: use --tp", key="megatron")
    tp.check(spec.tp, spec.model.heads, settings.get("num_query_groups"), spec.sequence_parallel)
    tp.check_moe(spec.tp, spec.ep, spec.sequence_parallel, settings.get("num_moe_experts"))
    if spec.tp > 1 and (spec.save is not None or spec.load is not None):
        flag = "--save" if spec.save is not None else "--load"
        raise ConfigError(f"{flag}: checkpoints of --tp {spec.tp} runs are not supported yet", key=flag[2:])


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

    def summary(self) -> RunSummary:
        """The run summary (the `--json` document is its `to_dict()`)."""
        spec = self.spec
        extra = {
            "ep": spec.ep,
            "kernels": spec.kernels,
            "micro_batch_size": spec.micro_batch_size,
            "tp": spec.tp,
            "sequence_parallel": spec.sequence_parallel,
            **({"sp_wgrad": spec.sp_wgrad} if spec.sequence_parallel else {}),
            "fb_overlap": spec.fb_overlap,
            "data": spec.data or "synthetic",
            **post_validation_record(self.outcomes if spec.post_validation else None),
        }
        return RunSummary.measured(
            "megatron",
            spec.table,
            self.timelines,
            self.wall_ms,
            self.losses,
            steps=self.steps,
            model={**spec.model.as_dict(), "stages": spec.table.num_stages},
            tokens_per_step=spec.tokens_per_step,
            extra=extra,
        )


def run_training(
    spec: TrainSpec, on_step: Callable[[int, float, float], None] | None = None
) -> TrainingRun | None:
    """Train on `spec.table.pp` ranks (spawned here, or this process is one rank under torchrun: then rank 0
    gets the run, the others None). Raises `LaunchError` naming the failing rank."""
    check_inputs(spec)
    if under_torchrun():
        import os

        world = int(os.environ["WORLD_SIZE"])
        if world != spec.world:
            raise ConfigError(
                f"torchrun started {world} processes; the Megatron backend runs one per pipeline rank, "
                f"tensor-parallel rank and expert-parallel rank (--pp {spec.table.pp} x --tp {spec.tp} x "
                f"--ep {spec.ep})",
                key="pp",
            )
    ranks: list[list[StepRecord]] | None = launch_steps(train_worker, spec.world, spec, on_step=on_step)
    if ranks is None:
        return None
    n = len(ranks[0])
    # each rank reported its share of the replicas' mean loss (TP ranks but the first: 0); the timelines
    # are those of the first replica's TP rank 0 of each pipeline rank (Megatron's order: TP fastest)
    losses = [sum(records[i].loss for records in ranks) for i in range(n)]
    wall = [max(records[i].wall_ms for records in ranks) for i in range(n)]
    per_rank = [records for records in ranks if not records or records[0].replica == 0][:: spec.tp]
    steps = [r.step for r in per_rank[0]]
    timelines = step_timelines(
        spec.table, [[r.measured for r in records] for records in per_rank], None, iterations=steps
    )
    outcomes = [records.outcome for records in per_rank[0]]
    return TrainingRun(spec, steps, losses, wall, timelines, outcomes)


def dump_pp_data(run: TrainingRun, directory: Path) -> None:
    """Primus' pp_data layout (one entry per step), memory in bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    write_pp_data(run.timelines, directory, pp_data_config(run.spec))


def pp_data_config(spec: TrainSpec) -> dict[str, Any]:
    """config.json's run fields: the parallel sizes under Primus' names (dense layers are data-parallel over
    the EP ranks: dp = world / (tp x pp x cp)), the MoE shape under Megatron-LM's argument names."""
    settings = dict(spec.model.settings)
    return {
        "backend": "megatron",
        "memory_unit": "bytes",
        "model": "megatron-gpt",
        "hidden": spec.model.hidden,
        "world_size": spec.world,
        "dp_size": spec.ep,
        "tp_size": spec.tp,
        "ep_size": spec.ep,
        "cp_size": 1,
        "num_experts": settings.get("num_moe_experts"),
        "moe_router_topk": settings.get("moe_router_topk"),
        "sequence_parallel": spec.sequence_parallel,
    }
