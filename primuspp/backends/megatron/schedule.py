"""The forward-backward function primuspp installs into megatron-core.

`install(algorithm, **options)` replaces `megatron.core.pipeline_parallel.get_forward_backward_func` (and the
`schedules` module attribute) with one returning a `PipelineSchedule`: a function of Megatron's exact
signature and return value (`forward_data_store`) that runs the algorithm's schedule table with the
primuspp runner on this pipeline rank. `uninstall()` restores Megatron's.

Per call: the table for (pp, number of model chunks, num_microbatches) is built once and cached; the runner
walks this rank's node list with a `MegatronExecutor` (Megatron's forward/backward steps, B/W split via
split.py); p2p goes over the pipeline group. It honours `forward_only` (F nodes only, comms re-lowered),
`collect_non_loss_data`, the loss conventions (Megatron's `forward_step`), `config.no_sync_func` /
`grad_sync_func` (executor.py), `calculate_per_token_loss` and `config.finalize_model_grads_func`.

Settings the schedule cannot honour are reported together, in one error, at the first call
(`conflicts()`), or before that with `check(table, settings)`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from primuspp.algorithms.registry import build_schedule, get_algorithm, resolve_name
from primuspp.backends.megatron import overlap, split, te_wgrad
from primuspp.backends.megatron.executor import Call, GradSync, MegatronExecutor, MicrobatchIterator
from primuspp.errors import ConfigError, ScheduleError
from primuspp.runtime.executor import TensorSpec
from primuspp.runtime.memory import ActivationMeter
from primuspp.runtime.p2p import P2P
from primuspp.runtime.runner import RankStep, ScheduleRunner
from primuspp.runtime.trace import step_timeline
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.semantics import simple_parts
from primuspp.schedule.table import ScheduleTable
from primuspp.trace.pp_data import config_record, rank_record

DEFAULT_DUMP_DIR = "output/pp_data"

# (setting, the value that conflicts (None: any value but None), why) — for every table
_ALWAYS = (
    ("variable_seq_lengths", True, "receive buffers have one fixed shape (seq_length x micro_batch_size)"),
    ("overlap_moe_expert_parallel_comm", True, "Megatron's combined 1F1B loop would replace the schedule"),
    ("hybrid_context_parallel", True, "Megatron's hybrid-CP loop would replace the schedule"),
    (
        "defer_embedding_wgrad_compute",
        True,
        "the output layer's deferred weight grad is drained only by Megatron's schedules",
    ),
    (
        "num_microbatches_with_partial_activation_checkpoints",
        None,
        "per-microbatch checkpointing follows Megatron's 1F1B order",
    ),
    ("fine_grained_activation_offloading", True, "its offload manager follows Megatron's schedule order"),
)


def _setting(settings: Any, key: str) -> Any:
    if isinstance(settings, Mapping):
        return settings.get(key)
    return getattr(settings, key, None)


def conflicts(settings: Any, *, placement: str, shared_embeddings: bool | None = None) -> list[str]:
    """The settings (a TransformerConfig, Megatron-LM args, or a mapping) primuspp cannot honour, each as
    `name=value (why)`. `shared_embeddings` defaults to the settings' `share_embeddings_and_output_weights`
    (an args name; in megatron-core it is a model argument)."""
    found = []
    for key, bad, why in _ALWAYS:
        value = _setting(settings, key)
        if (bad is None and value is not None) or (bad is not None and value == bad):
            found.append(f"{key}={value} ({why})")
    if _setting(settings, "delay_wgrad_compute") is True:
        why = te_wgrad.unsupported()
        if why is not None:
            found.append(
                "delay_wgrad_compute=True (primuspp drives Transformer Engine's delayed weight grads "
                f"from its W nodes only where TE >= 2.3 imports: {why})"
            )
        found += te_wgrad.recompute_conflicts(
            _setting(settings, "recompute_granularity"), _setting(settings, "recompute_modules")
        )
    cuda_graph = _setting(settings, "cuda_graph_impl")
    if cuda_graph not in (None, "none"):
        found.append(f"cuda_graph_impl={cuda_graph} (graphs are captured around Megatron's schedule)")
    if shared_embeddings is None:
        shared_embeddings = bool(_setting(settings, "share_embeddings_and_output_weights"))
    if shared_embeddings and placement == "v":
        found.append(
            "share_embeddings_and_output_weights=True (in the V placement the embedding and the output layer "
            "are both on the first pipeline rank; Megatron ties them across ranks only)"
        )
    return found


def check(table: ScheduleTable, settings: Any, *, shared_embeddings: bool | None = None) -> None:
    """Raise one ConfigError listing every Megatron setting `table` cannot run with."""
    if table.placement.kind == "bidirectional":
        raise ConfigError(
            f"{table.algorithm}: the Megatron backend does not run the bidirectional placement (two model "
            "replicas); use dualpipe-v, its V-placement form",
            key="pp_algorithm",
        )
    found = conflicts(settings, placement=table.placement.kind, shared_embeddings=shared_embeddings)
    if found:
        raise ConfigError(
            f"pp_algorithm {table.algorithm} conflicts with these Megatron settings: "
            + "; ".join(found)
            + " — turn them off",
            key="pp_algorithm",
        )


def forward_only_table(table: ScheduleTable) -> ScheduleTable:
    """The table's forwards in its own order (FB nodes give their F), comms lowered again (deadlock-free
    whatever the order: lowering.py)."""
    order = []
    for nodes in table.ranks:
        row = [part for node in nodes for part in simple_parts(node) if part.kind is NodeKind.F]
        order.append(row)
    ranks = lower_comms(table.placement, table.num_microbatches, order)
    return ScheduleTable(table.placement, table.num_microbatches, ranks, table.algorithm, table.params)


@dataclass
class _Rank:
    runner: ScheduleRunner
    executor: MegatronExecutor


class PipelineSchedule:
    """The installed forward-backward function (Megatron's signature, see `__call__`).

    `last_step` holds what this rank measured in the last call (a `RankStep`: per-node times, activation
    bytes); `on_step(schedule, step)` is called after each training call. With `dump_dir`, every training
    call adds an iteration to `<dump_dir>/pp_rank_<r>.json` (Primus' pp_data format; written by the
    ranks of the first data-parallel / tensor-parallel replica). With `fb_overlap`, FB nodes run their
    forward and backward at the same time (overlap.py)."""

    def __init__(
        self,
        algorithm: str | ScheduleTable,
        *,
        params: Mapping[str, Any] | None = None,
        dump_dir: str | os.PathLike[str] | None = None,
        track_memory: bool = True,
        on_step: Callable[[PipelineSchedule, RankStep], None] | None = None,
        fb_overlap: bool = False,
        post_validation: bool = False,
    ) -> None:
        #: post-validated optimizer steps (runtime/post_validation): no barrier before a step, and each
        #: registered `StepValidator` finishes its pending check before a call touches the parameters
        self.sync_start = not post_validation
        self.validators: list[Any] = []
        self._tables: dict[tuple[int, int, int], ScheduleTable] = {}
        self.fb_overlap = fb_overlap
        self._fixed = isinstance(algorithm, ScheduleTable)
        if isinstance(algorithm, ScheduleTable):  # a prebuilt table: the only one this schedule runs
            self.algorithm = algorithm.algorithm
            self._tables[(algorithm.pp, algorithm.vpp, algorithm.num_microbatches)] = algorithm
        else:
            self.algorithm = resolve_name(algorithm)
        self.params = dict(params or {})
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.track_memory = track_memory
        self.on_step = on_step
        self.last_step: RankStep | None = None
        self.last_table: ScheduleTable | None = None
        self.iteration = 0
        self._forward_tables: dict[int, ScheduleTable] = {}
        self._ranks: dict[tuple, _Rank] = {}
        self._checked: set[tuple[int, int]] = set()
        self._dumped: dict[str, dict] = {}

    def table(self, pp: int, chunks: int, num_microbatches: int) -> ScheduleTable:
        key = (pp, chunks, num_microbatches)
        table = self._tables.get(key)
        if table is None and self._fixed:
            (have,) = self._tables.values()
            raise ConfigError(
                f"the installed table runs pp={have.pp}, vpp={have.vpp}, micro_batches="
                f"{have.num_microbatches}; this call has pp={pp}, {chunks} model chunks, "
                f"num_microbatches={num_microbatches}",
                key="pp_algorithm",
            )
        if table is None:
            algo = None if self.algorithm.startswith("file:") else get_algorithm(self.algorithm)
            if algo is not None and not algo.vpp_ok(chunks):
                raise ConfigError(
                    f"pp_algorithm {algo.name} runs {algo.vpp_rule} model chunks per pipeline rank "
                    f"(placement {algo.placement}); the model has {chunks}",
                    key="pp_algorithm",
                )
            try:
                table = build_schedule(self.algorithm, pp, chunks, num_microbatches, **self.params)
            except ScheduleError as err:
                raise ConfigError(f"pp_algorithm {self.algorithm}: {err}", key="pp_algorithm") from None
            if table.pp != pp or table.vpp != chunks:
                raise ConfigError(
                    f"{self.algorithm}: the table has pp={table.pp}, vpp={table.vpp}; the run has pp={pp} "
                    f"and {chunks} model chunks per rank",
                    key="pp_algorithm",
                )
            self._tables[key] = table
        return table

    def __call__(
        self,
        *,
        forward_step_func: Callable[..., Any],
        data_iterator: Any,
        model: torch.nn.Module | list[torch.nn.Module],
        num_microbatches: int,
        seq_length: int,
        micro_batch_size: int,
        decoder_seq_length: int | None = None,
        forward_only: bool = False,
        collect_non_loss_data: bool = False,
        first_val_step: bool | None = None,
        adjust_tensor_shapes_fn: Callable | None = None,
        p2p_communicator: Any = None,
        pg_collection: Any = None,
        force_all_reduce: bool | None = False,
    ) -> list[Any]:
        from megatron.core import parallel_state
        from megatron.core.utils import get_model_config

        for validator in self.validators:  # the last optimizer step is final before the weights are read
            validator.finish()
        models = list(model) if isinstance(model, list | tuple) else [model]
        if adjust_tensor_shapes_fn is not None:
            raise ConfigError("adjust_tensor_shapes_fn is not supported by primuspp's schedule")
        config = get_model_config(models[0])
        if pg_collection is None:
            pg_collection = _process_groups()
        pp_group = pg_collection.pp if p2p_communicator is None else p2p_communicator.pp_group
        pp, rank = pp_group.size(), pp_group.rank()
        table = self.table(pp, len(models), num_microbatches)
        key = (id(config), id(table))
        if key not in self._checked:
            check(table, config, shared_embeddings=_shares_embeddings(models))
            _check_chunks(table, rank, models)
            split.signal_ready(models)
            te_wgrad.attach(models)  # TE modules built with delay_wgrad_compute: W runs their backward_dw
            self._checked.add(key)
        if forward_only:
            table = self._forward_only(table)
        device = next(models[0].parameters()).device
        state = self._rank_state(table, rank, pp_group, device)
        state.executor.run_fb = self._fb_runner(config, pg_collection)

        if isinstance(data_iterator, list):
            if len(data_iterator) != len(models):
                raise ConfigError(
                    f"data_iterator: {len(data_iterator)} iterators for {len(models)} model chunks",
                    key="data_iterator",
                )
            sources = data_iterator
        elif len(models) > 1:
            raise ConfigError(
                "data_iterator: give one iterator per model chunk (a list)", key="data_iterator"
            )
        else:
            sources = [data_iterator]
        seq = decoder_seq_length if decoder_seq_length is not None else seq_length
        seq //= pg_collection.cp.size()
        if config.sequence_parallel:
            seq //= pg_collection.tp.size()
        grad_sync_funcs = None
        if config.grad_sync_func is not None and not forward_only:
            f = config.grad_sync_func
            grad_sync_funcs = list(f) if isinstance(f, list | tuple) else [f] * len(models)
        sync = GradSync(config.no_sync_func)
        call = Call(
            forward_step_func=forward_step_func,
            iterators=[MicrobatchIterator(it) if it is not None else None for it in sources],
            models=models,
            config=config,
            num_microbatches=num_microbatches,
            spec=TensorSpec((seq, micro_batch_size, config.hidden_size), config.pipeline_dtype),
            forward_only=forward_only,
            collect_non_loss_data=collect_non_loss_data,
            first_val_step=first_val_step,
            cp_size=pg_collection.cp.size(),
            sync=sync,
            grad_sync_funcs=grad_sync_funcs,
            device=state.executor.device,
        )
        state.executor.begin(call)
        meter = state.runner.meter
        if meter is not None:  # parameters are not activations (wherever they live now)
            meter.set_exclude(p for m in models for p in m.parameters())
        if config.timers is not None:
            config.timers("forward-backward", log_level=1).start(barrier=config.barrier_with_L1_time)
        sync.disable()
        try:
            measured = state.runner.step(sync_start=self.sync_start)
        finally:
            sync.enable()
            state.executor.call = None
        if not forward_only:
            if grad_sync_funcs is not None:
                for c, m in enumerate(models):
                    if c not in call.synced:
                        grad_sync_funcs[c](m.parameters())
            if config.finalize_model_grads_func is not None:
                num_tokens = None
                if config.calculate_per_token_loss:
                    # the tokens were counted where the loss is (rank 0 in the V placement): make every
                    # rank hold the total, so Megatron's broadcast from the last rank carries it
                    num_tokens = call.total_num_tokens
                    dist.all_reduce(num_tokens, group=pp_group)
                config.finalize_model_grads_func(
                    models, num_tokens, pg_collection=pg_collection, force_all_reduce=force_all_reduce
                )
        if config.timers is not None:
            config.timers("forward-backward").stop()
        self.last_step, self.last_table = measured, table
        if not forward_only:
            if self.dump_dir is not None and _dumps_here(parallel_state):
                self._dump(table, rank, measured)
            self.iteration += 1
            if self.on_step is not None:
                self.on_step(self, measured)
        return call.forward_data_store()

    def _fb_runner(self, config: Any, pg_collection: Any) -> Callable[..., None] | None:
        """overlap.run_fb when FB nodes overlap here: asked for, no sequence parallelism, and a twin TP
        group for the backward's collectives when TP > 1 (overlap.py)."""
        if not self.fb_overlap or not overlap.overlappable(config):
            return None
        if pg_collection.tp.size() > 1 and overlap.backward_group_of(pg_collection.tp) is None:
            return None
        return overlap.run_fb

    def _forward_only(self, table: ScheduleTable) -> ScheduleTable:
        forward = self._forward_tables.get(id(table))
        if forward is None:
            forward = self._forward_tables[id(table)] = forward_only_table(table)
        return forward

    def _rank_state(self, table: ScheduleTable, rank: int, pp_group: Any, device: torch.device) -> _Rank:
        key = (id(table), rank, id(pp_group), device)
        state = self._ranks.get(key)
        if state is None:
            executor = MegatronExecutor(table, rank, device)
            runner = ScheduleRunner(
                table,
                rank,
                executor,
                p2p=_p2p(pp_group) if table.pp > 1 else None,
                meter=ActivationMeter() if self.track_memory else False,
                check=False,  # validated where the table was built (forward-only: lowered, deadlock-free)
            )
            state = self._ranks[key] = _Rank(runner, executor)
        return state

    def _dump(self, table: ScheduleTable, rank: int, measured: RankStep) -> None:
        assert self.dump_dir is not None
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        timeline = step_timeline(table, [measured], table.algorithm)
        self._dumped[str(self.iteration + 1)] = rank_record(
            timeline.ranks[0]
        )  # from 1, as Primus and Megatron
        _write_json(self.dump_dir / f"pp_rank_{rank}.json", self._dumped)
        if rank == 0 and self.iteration == 0:
            _write_json(self.dump_dir / "config.json", config_record(timeline, {"backend": "megatron"}))


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


def _dumps_here(parallel_state: Any) -> bool:
    return (
        parallel_state.get_data_parallel_rank(with_context_parallel=True) == 0
        and parallel_state.get_tensor_model_parallel_rank() == 0
    )


def _process_groups() -> Any:
    from megatron.core.process_groups_config import ProcessGroupCollection

    return ProcessGroupCollection.use_mpu_process_groups(
        required_pgs=["tp", "cp", "embd", "pos_embd", "pp", "dp_cp"]
    )


def _p2p(pp_group: Any) -> P2P:
    ranks = dist.get_process_group_ranks(pp_group)
    if ranks == list(range(dist.get_world_size())):
        return P2P()  # the default group: pipeline ranks are global ranks
    return P2P(group=pp_group, ranks=ranks)


def _attr(model: torch.nn.Module, name: str) -> Any:
    from megatron.core.utils import get_attr_wrapped_model

    try:
        return get_attr_wrapped_model(model, name)
    except RuntimeError:
        return None


def _shares_embeddings(models: list[torch.nn.Module]) -> bool:
    return any(bool(_attr(m, "share_embeddings_and_output_weights")) for m in models)


def _check_chunks(table: ScheduleTable, rank: int, models: list[torch.nn.Module]) -> None:
    """Chunk c of this rank must hold stage s of the placement: its pre/post-process flags say whether it
    holds the embedding (first stage) and the loss (last stage)."""
    pl = table.placement
    for s in pl.stages_of_rank(rank):
        c = pl.stage_chunk[s]
        pre, post = _attr(models[c], "pre_process"), _attr(models[c], "post_process")
        want_pre, want_post = pl.prev_stage[s] < 0, pl.next_stage[s] < 0
        if (pre is not None and bool(pre) != want_pre) or (post is not None and bool(post) != want_post):
            raise ConfigError(
                f"pp_algorithm {table.algorithm} (placement {pl.kind}): model chunk {c} of pipeline rank "
                f"{rank} holds stage {s}, which needs pre_process={want_pre}, post_process={want_post}; "
                f"the model has pre_process={pre}, post_process={post} (build the chunks per the "
                "placement: docs/megatron.md)",
                key="pp_algorithm",
            )


# -- install / uninstall -------------------------------------------------------------------------------

_SAVED: dict[str, Any] = {}


def install(
    algorithm: str | ScheduleTable,
    *,
    dump_pp_data: bool | str | os.PathLike[str] | None = None,
    track_memory: bool = True,
    on_step: Callable[[PipelineSchedule, RankStep], None] | None = None,
    sp_wgrad: str = "regather",
    fb_overlap: bool = False,
    post_validation: bool = False,
    **params: Any,
) -> PipelineSchedule:
    """Make megatron-core's `get_forward_backward_func()` return primuspp's schedule for `algorithm` (a
    registry name or alias, `file:PATH`, or a prebuilt ScheduleTable, which then is the only table run).

    `dump_pp_data`: True writes Primus pp_data to `$DUMP_PP_DIR` (default `output/pp_data`), a path writes
    there. `params` go to the algorithm (e.g. `max_mem` for v-auto). Also routes Megatron's Column/Row
    parallel linears through the B/W split; `sp_wgrad` (`keep` or `regather`) is how a split
    column-parallel linear's W gets its all-gathered input under sequence parallelism (split.py).
    `fb_overlap`: FB nodes run their two parts at once (overlap.py; with TP > 1, call it on every rank
    at the same point: it creates a twin TP group). `post_validation=True`: steps start without a barrier,
    and each call first finishes the pending check of the post-validated optimizer steps registered in its
    `validators` (`runtime.post_validation.StepValidator`, built with `clone_grads=True` since Megatron-LM
    zeroes the gradient buffers before the call).
    Returns the installed function (its `last_step` holds this rank's measurements). Call before
    `megatron.training` is imported (it binds the name at import)."""
    from primuspp.backends.megatron import require

    require()  # quietly: megatron warns about every optional extension it does not find
    from megatron.core import pipeline_parallel
    from megatron.core.pipeline_parallel import schedules

    if sp_wgrad not in split.SP_WGRAD_MODES:
        raise ConfigError(
            f"sp_wgrad {sp_wgrad!r}: expected one of {', '.join(split.SP_WGRAD_MODES)}", key="sp_wgrad"
        )
    if dump_pp_data is True:
        dump_dir: str | os.PathLike[str] | None = os.environ.get("DUMP_PP_DIR", DEFAULT_DUMP_DIR)
    elif dump_pp_data in (None, False):
        dump_dir = None
    else:
        dump_dir = dump_pp_data  # type: ignore[assignment]
    try:
        schedule = PipelineSchedule(
            algorithm,
            params=params,
            dump_dir=dump_dir,
            track_memory=track_memory,
            on_step=on_step,
            fb_overlap=fb_overlap,
            post_validation=post_validation,
        )
    except ScheduleError as err:
        raise ConfigError(f"pp_algorithm: {err}", key="pp_algorithm") from None
    if not _SAVED:
        _SAVED["package"] = pipeline_parallel.get_forward_backward_func
        _SAVED["schedules"] = schedules.get_forward_backward_func
    original = _SAVED["schedules"]

    def get_forward_backward_func(pp_size: int | None = None, vp_size: int | None = None) -> Callable:
        if pp_size is None and vp_size is None:
            from megatron.core import parallel_state

            pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        if pp_size is not None and pp_size <= 1:
            return original(pp_size, vp_size)  # nothing to schedule
        return schedule

    get_forward_backward_func.primuspp_schedule = schedule  # type: ignore[attr-defined]
    pipeline_parallel.get_forward_backward_func = get_forward_backward_func
    schedules.get_forward_backward_func = get_forward_backward_func
    split.set_sp_wgrad(sp_wgrad)
    if fb_overlap:
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized():
            overlap.make_twin_groups(parallel_state.get_tensor_model_parallel_world_size())
    split.install()
    return schedule


def uninstall() -> None:
    """Restore Megatron's `get_forward_backward_func` and linear layers."""
    from megatron.core import pipeline_parallel
    from megatron.core.pipeline_parallel import schedules

    if _SAVED:
        pipeline_parallel.get_forward_backward_func = _SAVED.pop("package")
        schedules.get_forward_backward_func = _SAVED.pop("schedules")
    split.uninstall()


def installed() -> PipelineSchedule | None:
    """The installed schedule, or None."""
    from megatron.core import pipeline_parallel

    return getattr(pipeline_parallel.get_forward_backward_func, "primuspp_schedule", None)


def install_from_args(args: Any) -> PipelineSchedule | None:
    """Primus' configuration keys: `patch_primus_pipeline` (bool), `pp_algorithm` (a name or alias, e.g.
    zbv-formatted), `dump_pp_data` (bool; the directory is `$DUMP_PP_DIR`). `args` is Megatron-LM's args
    namespace or a mapping. Installs when `patch_primus_pipeline` is true; returns the schedule or None."""
    if not _setting(args, "patch_primus_pipeline"):
        return None
    algorithm = _setting(args, "pp_algorithm")
    if not algorithm:
        raise ConfigError("patch_primus_pipeline is set but pp_algorithm is not", key="pp_algorithm")
    return install(str(algorithm), dump_pp_data=bool(_setting(args, "dump_pp_data")))
