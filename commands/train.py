"""`primuspp train`: real training with a chosen schedule.

Backend megatron (default): a megatron-core GPT (train_megatron.py, backends/megatron); backend torch: the
tiny GPT on plain modules (train_torch.py, backends/torch). With --emulate: the emulated cluster
(emulate.py, runtime/emulate.py). Each is a `runtime.backend.TrainBackend`: this command only declares the
options, picks the backend and runs its check / launch / summarize / dump / render in that order."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from primuspp.backends.kernels import CHOICES as KERNELS
from primuspp.commands.launching import MAX_EXPERTS, MAX_LOCAL_RANKS, MAX_MODEL_DIM, launched
from primuspp.commands.options import finite_check, int_check
from primuspp.commands.train_checks import DUMP_KEY
from primuspp.errors import ConfigError
from primuspp.outputs import default_pp_data_dir, replace_dir
from primuspp.runtime.backend import TrainBackend, TrainOptions

#: most steps a run may ask for (the emulated cluster lays out at most sim.iterations.MAX_ITERATIONS)
MAX_STEPS = 1_000_000
_STEPS, _RANKS, _DIM = int_check(1, MAX_STEPS), int_check(1, MAX_LOCAL_RANKS), int_check(1, MAX_MODEL_DIM)
_EXPERTS = int_check(1, MAX_EXPERTS)


def _kernels(value: str) -> str:
    if value not in KERNELS:  # which of them runs here is asked once the rest is checked (it imports torch)
        raise ConfigError(f"--kernels {value}: expected one of {', '.join(KERNELS)}", key="kernels")
    return value


class Backend(StrEnum):
    torch = "torch"
    megatron = "megatron"


def train(
    algo: Annotated[
        str, typer.Option("--algo", "-a", help="Algorithm name or alias, or file:PATH (a dumped table).")
    ] = "1f1b",
    pp: Annotated[
        int | None,
        typer.Option(
            "--pp", help="Pipeline ranks p, one process each (default 4; file: tables carry theirs)."
        ),
    ] = None,
    vpp: Annotated[
        int | None, typer.Option("--vpp", help="Chunks per rank v (algorithms that allow it).")
    ] = None,
    mb: Annotated[
        int | None,
        typer.Option(
            "--mb", "--micro-batches", help="Microbatches per step m (default 8; file: tables carry theirs)."
        ),
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option("--steps", callback=_STEPS, help="Training steps (default: megatron 100, torch 3)."),
    ] = None,
    backend: Annotated[
        Backend,
        typer.Option("--backend", help="Execution backend: a megatron-core GPT, or the plain-torch GPT."),
    ] = Backend.megatron,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Rerun the steps on one process with the whole model; print the max differences."
        ),
    ] = False,
    dump_pp_data: Annotated[
        Path | None,
        typer.Option(
            "--dump-pp-data",
            envvar="DUMP_PP_DIR",
            help="Write per-node timings (Primus pp_data) here (default: $DUMP_PP_DIR if set, else "
            "output/pp_data). An existing dump is replaced whole, only if primuspp wrote it.",
        ),
    ] = None,
    no_dump: Annotated[
        bool, typer.Option("--no-dump", help="Write no pp_data (overrides --dump-pp-data and $DUMP_PP_DIR).")
    ] = False,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers",
            callback=_DIM,
            help="Transformer layers (default: megatron 8, torch one block per stage).",
        ),
    ] = None,
    hidden: Annotated[
        int | None,
        typer.Option("--hidden", callback=_DIM, help="Hidden size (default: megatron 128, torch 64)."),
    ] = None,
    heads: Annotated[int, typer.Option("--heads", callback=_DIM, help="Attention heads.")] = 4,
    seq_len: Annotated[
        int | None,
        typer.Option(
            "--seq-len", callback=_DIM, help="Tokens per sequence (default: megatron 128, torch 32)."
        ),
    ] = None,
    micro_batch_size: Annotated[
        int, typer.Option("--micro-batch-size", callback=_DIM, help="Sequences per microbatch.")
    ] = 2,
    lr: Annotated[
        float | None,
        typer.Option("--lr", help="Learning rate (megatron: Adam, default 1e-3; torch: SGD, default 0.1)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of weights and data.")] = 0,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data", help="Megatron: train on this text file (bytes are tokens; default synthetic)."
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save", help="Megatron: write atomic checkpoints here (at the end; see --save-interval)."
        ),
    ] = None,
    save_interval: Annotated[
        int | None,
        typer.Option("--save-interval", callback=_STEPS, help="Megatron: also checkpoint every N steps."),
    ] = None,
    load: Annotated[
        Path | None,
        typer.Option(
            "--load", help="Megatron: resume from this checkpoint (or the newest one in this directory)."
        ),
    ] = None,
    tp: Annotated[
        int,
        typer.Option(
            "--tp",
            callback=_RANKS,
            help="Megatron: tensor-parallel ranks per pipeline rank (processes: tp x pp).",
        ),
    ] = 1,
    sequence_parallel: Annotated[
        bool,
        typer.Option(
            "--sequence-parallel", help="Megatron: split the sequence over the TP ranks (--tp > 1)."
        ),
    ] = False,
    sp_wgrad: Annotated[
        str,
        typer.Option(
            "--sp-wgrad",
            help="Megatron, with --sequence-parallel: W of a column-parallel linear gathers its input again "
            "(regather, the default: time) or keeps the gathered input from F (keep: memory).",
        ),
    ] = "regather",
    fb_overlap: Annotated[
        bool,
        typer.Option(
            "--fb-overlap",
            help="Megatron: an FB node (dualpipe-v) runs its forward and backward at once, one's "
            "communication overlapping the other's compute (not with --sequence-parallel).",
        ),
    ] = False,
    megatron_settings: Annotated[
        list[str] | None,
        typer.Option(
            "--megatron",
            help="Megatron: a TransformerConfig or DDP setting, KEY=VALUE (repeatable), "
            "e.g. --megatron overlap_grad_reduce=true.",
        ),
    ] = None,
    moe_experts: Annotated[
        int | None,
        typer.Option(
            "--moe-experts",
            callback=_EXPERTS,
            help="Megatron: MoE layers of N experts (a router and experts each).",
        ),
    ] = None,
    moe_topk: Annotated[
        int | None,
        typer.Option("--moe-topk", callback=_EXPERTS, help="Megatron MoE: experts per token (K <= N)."),
    ] = None,
    moe_ffn: Annotated[
        int | None,
        typer.Option("--moe-ffn", callback=_DIM, help="Megatron MoE: expert FFN size (default 4 x hidden)."),
    ] = None,
    moe_shared_ffn: Annotated[
        int | None,
        typer.Option(
            "--moe-shared-ffn", callback=_DIM, help="Megatron MoE: add a shared expert of this FFN size."
        ),
    ] = None,
    ep: Annotated[
        int,
        typer.Option(
            "--ep",
            callback=_RANKS,
            help="Megatron MoE: expert-parallel ranks per pipeline rank (divides N; world = pp x ep, dense "
            "layers data-parallel over them).",
        ),
    ] = 1,
    kernels: Annotated[
        str,
        typer.Option(
            "--kernels",
            callback=_kernels,
            help="Megatron: GEMM kernels of the B/W split: auto (turbo, else te, else torch: what runs "
            "here), torch, turbo (Primus-Turbo, ROCm), te (Transformer Engine, CUDA).",
        ),
    ] = "auto",
    clip_grad: Annotated[
        float | None,
        typer.Option("--clip-grad", help="Clip the global gradient norm to this (default: no clipping)."),
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else there.")
    ] = False,
    inject_fault: Annotated[
        str | None,
        typer.Option(
            "--inject-fault", hidden=True, help="RANK:NODE, e.g. 2:F3.2; megatron: RANK:save:STEP (tests)."
        ),
    ] = None,
    emulate: Annotated[
        bool,
        typer.Option(
            "--emulate",
            help="Emulated cluster: the real runner, processes and p2p, but each compute node waits its "
            "cost-model duration instead of computing (costs: --fwd/--bwd/--wgrad, --config, --costs-from).",
        ),
    ] = False,
    fwd: Annotated[
        float | None,
        typer.Option(
            "--fwd", help="With --emulate: F ms of one microbatch through a rank's share (default 20)."
        ),
    ] = None,
    bwd: Annotated[
        float | None,
        typer.Option("--bwd", help="With --emulate: B (input-grad) ms; a full backward is B + W."),
    ] = None,
    wgrad: Annotated[
        float | None, typer.Option("--wgrad", help="With --emulate: W (weight-grad) ms.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="With --emulate: use this simulation YAML's costs.")
    ] = None,
    costs_from: Annotated[
        Path | None,
        typer.Option("--costs-from", help="With --emulate: costs measured from this pp_data dump."),
    ] = None,
    post_validation: Annotated[
        bool,
        typer.Option(
            "--post-validation",
            help="Step each rank's optimizer as soon as its last W is done and start the next step; check "
            "the global norm and overflow afterwards, rolling the step back where clipping or a skip applies "
            "(--emulate: the emulated optimizer step, see --optimizer-cost).",
        ),
    ] = False,
    optimizer_cost: Annotated[
        float | None,
        typer.Option(
            "--optimizer-cost",
            callback=finite_check(),
            help="With --emulate: the optimizer step's ms on each rank, after every step (default 0).",
        ),
    ] = None,
) -> None:
    """Train with a schedule on real processes (gloo on CPU, nccl on GPU).

    With --emulate, run the schedule on an emulated cluster instead (no model, no compute). Per-node
    timings go to output/pp_data (Primus' pp_data format; $DUMP_PP_DIR or --dump-pp-data DIR elsewhere,
    --no-dump nowhere), for `primuspp viz output/pp_data` and `primuspp compare`."""
    opts = TrainOptions(locals())
    opts.dump_pp_data = _dump_target(dump_pp_data, no_dump)
    chosen = _backend(opts)
    prepared = chosen.check(opts)  # every option and output, before any rank starts
    run = launched(lambda: chosen.launch(prepared))
    if run is None:  # a non-zero rank under torchrun
        return
    summary = chosen.summarize(run)
    if opts.dump_pp_data is not None:
        replace_dir(opts.dump_pp_data, "pp_data", lambda d: chosen.dump(run, d), DUMP_KEY)
        summary.extra["pp_data"] = str(opts.dump_pp_data)
    if json_:
        print(json.dumps(summary.to_dict()))
        return
    chosen.render(summary)


def _backend(opts: TrainOptions) -> TrainBackend:
    """The backend the options ask for (its module imported only now: torch and megatron are heavy)."""
    if opts.emulate:
        from primuspp.commands.emulate import EmulateBackend

        return EmulateBackend()
    if opts.backend is Backend.torch:
        from primuspp.commands.train_torch import TorchBackend

        return TorchBackend()
    from primuspp.commands.train_megatron import MegatronBackend

    return MegatronBackend()


def _dump_target(given: Path | None, no_dump: bool) -> Path | None:
    """Where the pp_data goes: --dump-pp-data (or $DUMP_PP_DIR), else output/pp_data; --no-dump: nowhere."""
    if no_dump:
        return None
    return given if given is not None and str(given) != "" else default_pp_data_dir()
