"""`primuspp train`: real training with a chosen schedule.

Backend megatron (default): a megatron-core GPT (backends/megatron); backend torch: the tiny GPT on plain
modules (backends/torch). With --emulate: the emulated cluster (commands/emulate.py, runtime/emulate.py)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from primuspp.commands.console import out
from primuspp.commands.launching import check_model_size, launched, run_table, step_bar
from primuspp.errors import ConfigError
from primuspp.outputs import check_dir_target, check_writable_dir, default_pp_data_dir, replace_dir


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
        int | None, typer.Option("--steps", help="Training steps (default: megatron 100, torch 3).")
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
        typer.Option("--layers", help="Transformer layers (default: megatron 8, torch one block per stage)."),
    ] = None,
    hidden: Annotated[
        int | None, typer.Option("--hidden", help="Hidden size (default: megatron 128, torch 64).")
    ] = None,
    heads: Annotated[int, typer.Option("--heads", help="Attention heads.")] = 4,
    seq_len: Annotated[
        int | None, typer.Option("--seq-len", help="Tokens per sequence (default: megatron 128, torch 32).")
    ] = None,
    micro_batch_size: Annotated[
        int, typer.Option("--micro-batch-size", help="Sequences per microbatch.")
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
        int | None, typer.Option("--save-interval", help="Megatron: also checkpoint every N steps.")
    ] = None,
    load: Annotated[
        Path | None,
        typer.Option(
            "--load", help="Megatron: resume from this checkpoint (or the newest one in this directory)."
        ),
    ] = None,
    megatron_settings: Annotated[
        list[str] | None,
        typer.Option(
            "--megatron",
            help="Megatron: a TransformerConfig or DDP setting, KEY=VALUE (repeatable), "
            "e.g. --megatron overlap_grad_reduce=true.",
        ),
    ] = None,
    clip_grad: Annotated[
        float | None,
        typer.Option("--clip-grad", help="Clip the global gradient norm to this (default: no clipping)."),
    ] = None,
    post_validation: Annotated[
        bool,
        typer.Option(
            "--post-validation",
            help="Step each rank's optimizer as soon as its last W is done; check the global norm and "
            "overflow afterwards, rolling the step back where clipping or a skip applies.",
        ),
    ] = False,
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
) -> None:
    """Train with a schedule on real processes (gloo on CPU, nccl on GPU).

    With --emulate, run the schedule on an emulated cluster instead (no model, no compute). Per-node
    timings go to output/pp_data (Primus' pp_data format; $DUMP_PP_DIR or --dump-pp-data DIR elsewhere,
    --no-dump nowhere), for `primuspp viz output/pp_data` and `primuspp compare`."""
    dump_pp_data = _dump_target(dump_pp_data, no_dump)
    emulation = {"--fwd": fwd, "--bwd": bwd, "--wgrad": wgrad, "--config": config, "--costs-from": costs_from}
    if emulate:
        from primuspp.commands.emulate import train_emulated

        given = {"--verify": verify, "--inject-fault": inject_fault, "--post-validation": post_validation}
        given["--clip-grad"] = clip_grad is not None
        flag = next((f for f, on in given.items() if on), None)
        if flag is not None:
            raise ConfigError(f"{flag}: the emulated cluster computes nothing", key=flag[2:])
        steps = 3 if steps is None else steps
        check_outputs(dump_pp_data)
        train_emulated(algo, pp, vpp, mb, steps, fwd, bwd, wgrad, config, costs_from, dump_pp_data, json_)
        return
    for flag, value in emulation.items():
        if value is not None:
            raise ConfigError(f"{flag} needs --emulate (the emulated cluster's cost model)", key=flag[2:])
    if backend is Backend.megatron:
        if verify:
            raise ConfigError("--verify is only available with --backend torch", key="verify")
        _train_megatron(
            algo=algo,
            pp=pp,
            vpp=vpp,
            mb=mb,
            steps=100 if steps is None else steps,
            layers=8 if layers is None else layers,
            hidden=128 if hidden is None else hidden,
            heads=heads,
            seq_len=128 if seq_len is None else seq_len,
            micro_batch_size=micro_batch_size,
            lr=1e-3 if lr is None else lr,
            seed=seed,
            data=data,
            save=save,
            save_interval=save_interval,
            load=load,
            settings=megatron_settings or [],
            dump_pp_data=dump_pp_data,
            json_=json_,
            fault=_parse_save_fault(inject_fault) if inject_fault else None,
            clip_grad=clip_grad,
            post_validation=post_validation,
        )
        return
    for key, value in (
        ("data", data),
        ("save", save),
        ("save-interval", save_interval),
        ("load", load),
        ("megatron", megatron_settings),
    ):
        if value:
            raise ConfigError(f"--{key} is only available with --backend megatron", key=key)
    steps = 3 if steps is None else steps
    hidden = 64 if hidden is None else hidden
    seq_len = 32 if seq_len is None else seq_len
    lr = 0.1 if lr is None else lr
    for key, value, low in (
        ("steps", steps, 1),
        ("hidden", hidden, 1),
        ("heads", heads, 1),
        ("seq-len", seq_len, 1),
        ("micro-batch-size", micro_batch_size, 1),
    ):
        if value < low:
            raise ConfigError(f"--{key} must be >= {low} (got {value})", key=key)
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} must be a multiple of --heads {heads}", key="hidden")
    fault = _parse_fault(inject_fault) if inject_fault else None
    check_outputs(dump_pp_data)

    # torch is imported here, not at CLI start-up: the other verbs run without it
    from primuspp.backends.torch.gpt import GPTConfig
    from primuspp.backends.torch.session import dump_pp_data as write_dump
    from primuspp.backends.torch.session import run_training
    from primuspp.backends.torch.train import TrainSpec

    table = run_table(algo, pp, vpp, mb)
    parts = len(set(table.placement.model_part))
    n_layers = parts if layers is None else layers
    sizes = {"layers": n_layers, "hidden": hidden, "seq-len": seq_len, "micro-batch-size": micro_batch_size}
    check_model_size(sizes, 64, table.num_microbatches, table.pp)
    if n_layers + 2 < parts:
        raise ConfigError(
            f"--layers {n_layers}: the model (embedding + {n_layers} blocks + head) has fewer layers "
            f"than the {parts} stages of this table",
            key="layers",
        )
    spec = TrainSpec(
        table,
        GPTConfig(vocab=64, seq_len=seq_len, hidden=hidden, heads=heads, layers=n_layers),
        micro_batch_size=micro_batch_size,
        steps=steps,
        lr=lr,
        seed=seed,
        fault=fault,
        clip_grad=clip_grad,
        post_validation=post_validation,
    )
    with step_bar(f"training {table.describe()}", steps) as update:

        def on_step(step: int, loss: float, ms: float) -> None:
            update(advance=1, status=f"loss {loss:.4f}  step {ms:,.1f} ms")

        run = launched(lambda: run_training(spec, verify=verify, on_step=on_step))
    if run is None:  # a non-zero rank under torchrun
        return
    doc = run.summary()
    if dump_pp_data is not None:
        replace_dir(dump_pp_data, "pp_data", lambda d: write_dump(run, d), DUMP_KEY)
        doc["pp_data"] = str(dump_pp_data)
    if json_:
        print(json.dumps(doc))
        return
    _render(doc, table.describe())


DUMP_KEY = "--dump-pp-data"


def _dump_target(given: Path | None, no_dump: bool) -> Path | None:
    """Where the pp_data goes: --dump-pp-data (or $DUMP_PP_DIR), else output/pp_data; --no-dump: nowhere."""
    if no_dump:
        return None
    return given if given is not None and str(given) != "" else default_pp_data_dir()


def check_outputs(dump: Path | None, save: Path | None = None) -> None:
    """Every output location, before any rank starts: the dump is absent, empty or a dump primuspp wrote
    (it is replaced whole at the end); --save is a directory, or can be created."""
    if dump is not None:
        check_dir_target(dump, "pp_data", DUMP_KEY)
    if save is not None:
        check_writable_dir(save, "--save")


def _parse_fault(text: str) -> tuple[int, str]:
    rank, _, node = text.partition(":")
    if not rank.isdigit() or not node:
        raise ConfigError(f"--inject-fault {text!r}: expected RANK:NODE, e.g. 2:F3.2", key="inject-fault")
    return int(rank), node


def _parse_save_fault(text: str) -> tuple[int, int]:
    """Megatron: RANK:save:STEP kills that rank right after it wrote its file of the save at STEP (tests)."""
    rank, what, step = [*text.split(":"), "", ""][:3]
    if not rank.isdigit() or what != "save" or not step.isdigit():
        raise ConfigError(
            f"--inject-fault {text!r}: expected RANK:save:STEP with --backend megatron", key="inject-fault"
        )
    return int(rank), int(step)


def _mb(n: float) -> str:
    return f"{n / 2**20:.2f}"


def _render(doc: dict, describe: str) -> None:
    model = doc["model"]
    out.print(
        f"trained tiny GPT ({model['layers']} blocks, hidden {model['hidden']}, {model['stages']} stages) "
        f"with {describe} on {doc['pp']} processes"
    )
    table = Table(title_justify="left")
    for col in ("step", "loss", "step time ms", "bubble", "peak activations per rank (MiB)"):
        table.add_column(col, justify="right")
    for s in doc["steps"]:
        table.add_row(
            str(s["step"] + 1),
            f"{s['loss']:.6f}",
            f"{s['step_time_ms']:,.1f}",
            f"{s['bubble_rate']:.1%}",
            " ".join(_mb(b) for b in s["peak_activation_bytes"]),
        )
    out.print(table)
    v = doc.get("verify")
    if v is not None:
        out.print(
            "verify: max relative difference vs one process with the whole model: "
            f"loss {v['max_rel_loss_diff']:.2e}, gradients {v['max_rel_grad_diff']:.2e} "
            f"({v['steps']} steps, {v['tensors']} gradient tensors"
            + (f"; largest: {v['worst_tensor']})" if v["max_rel_grad_diff"] > 0 else ")")
        )
    _render_post_validation(doc)
    if doc.get("pp_data"):
        out.print(f"per-node timings (Primus pp_data) in {doc['pp_data']}/")


def _render_post_validation(doc: dict) -> None:
    pv = doc.get("post_validation")
    if pv is not None:
        out.print(
            f"post-validation: {pv['validated']} validated, {pv['rolled_back']} rolled back and redone "
            f"with clipping, {pv['skipped']} skipped (overflow)"
        )


# -- backend megatron ------------------------------------------------------------------------------------


def _train_megatron(
    *,
    algo: str,
    pp: int | None,
    vpp: int | None,
    mb: int | None,
    steps: int,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    micro_batch_size: int,
    lr: float,
    seed: int,
    data: Path | None,
    save: Path | None,
    save_interval: int | None,
    load: Path | None,
    settings: list[str],
    dump_pp_data: Path | None,
    json_: bool,
    fault: tuple[int, int] | None,
    clip_grad: float | None = None,
    post_validation: bool = False,
) -> None:
    for key, value, low in (
        ("steps", steps, 1),
        ("layers", layers, 1),
        ("hidden", hidden, 1),
        ("heads", heads, 1),
        ("seq-len", seq_len, 1),
        ("micro-batch-size", micro_batch_size, 1),
        ("save-interval", save_interval if save_interval is not None else 1, 1),
    ):
        if value < low:
            raise ConfigError(f"--{key} must be >= {low} (got {value})", key=key)
    if save_interval is not None and save is None:
        raise ConfigError("--save-interval needs --save DIR", key="save-interval")
    if not 0 < lr < float("inf"):
        raise ConfigError(f"--lr {lr}: expected a finite number > 0", key="lr")
    if clip_grad is not None and not 0 < clip_grad < float("inf"):
        raise ConfigError(f"--clip-grad {clip_grad}: expected a finite number > 0", key="clip-grad")
    check_outputs(dump_pp_data, save)

    from primuspp.backends.megatron import require

    require()  # one line with the install hint when megatron-core is missing
    from primuspp.backends.megatron.model import GPTSpec
    from primuspp.backends.megatron.session import dump_pp_data as write_dump
    from primuspp.backends.megatron.session import parse_settings, run_training
    from primuspp.backends.megatron.train import TrainSpec

    model_settings, ddp_settings = parse_settings(settings)
    table = run_table(algo, pp, vpp, mb)
    sizes = {"layers": layers, "hidden": hidden, "seq-len": seq_len, "micro-batch-size": micro_batch_size}
    check_model_size(sizes, GPTSpec.vocab, table.num_microbatches, table.pp)
    spec = TrainSpec(
        table,
        GPTSpec(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, settings=model_settings),
        micro_batch_size=micro_batch_size,
        steps=steps,
        lr=lr,
        seed=seed,
        data=str(data) if data is not None else None,
        save=str(save) if save is not None else None,
        save_interval=save_interval,
        load=str(load) if load is not None else None,
        ddp=ddp_settings,
        fault=("save", fault[1]) if fault else None,
        fault_rank=fault[0] if fault else 0,
        clip_grad=clip_grad,
        post_validation=post_validation,
    )
    label = f"training {table.algorithm} (p={table.pp}, v={table.vpp}, m={table.num_microbatches})"
    with step_bar(label, steps) as update:

        def on_step(step: int, loss: float, ms: float) -> None:
            tokens = spec.tokens_per_step / (ms / 1000) if ms > 0 else 0.0
            update(completed=step + 1, status=f"loss {loss:.4f}  step {ms:,.0f} ms  {tokens:,.0f} tokens/s")

        run = launched(lambda: run_training(spec, on_step=on_step))
    if run is None:  # a non-zero rank under torchrun
        return
    doc = run.summary()
    if dump_pp_data is not None:
        replace_dir(dump_pp_data, "pp_data", lambda d: write_dump(run, d), DUMP_KEY)
        doc["pp_data"] = str(dump_pp_data)
    if save is not None:
        doc["checkpoint"] = str(save)
    if json_:
        print(json.dumps(doc))
        return
    _render_megatron(doc, table.describe())


def _render_megatron(doc: dict, describe: str) -> None:
    model = doc["model"]
    out.print(
        f"trained Megatron GPT ({model['layers']} layers, hidden {model['hidden']}, seq {model['seq_len']}, "
        f"{model['stages']} stages) with {describe} on {doc['pp']} processes, data: {doc['data']}"
    )
    rows = doc["steps"]
    shown = (
        sorted({round(i * (len(rows) - 1) / 9) for i in range(10)}) if len(rows) > 10 else range(len(rows))
    )
    table = Table(title_justify="left")
    for col in ("step", "loss", "step time ms", "tokens/s", "bubble"):
        table.add_column(col, justify="right")
    for i in shown:
        s = rows[i]
        table.add_row(
            str(s["step"] + 1),
            f"{s['loss']:.4f}",
            f"{s['step_time_ms']:,.1f}",
            f"{s['tokens_per_s']:,.0f}",
            f"{s['bubble_rate']:.1%}",
        )
    out.print(table)
    out.print(
        f"measured bubble rate {doc['bubble_rate']:.1%} (mean over steps after the first), "
        f"{doc['tokens_per_s']:,.0f} tokens/s"
    )
    out.print("peak activation per rank (MiB): " + " ".join(_mb(b) for b in doc["peak_activation_bytes"]))
    _render_post_validation(doc)
    if doc.get("pp_data"):
        out.print(f"per-node timings (Primus pp_data) in {doc['pp_data']}/")
    if doc.get("checkpoint"):
        out.print(f"checkpoints in {doc['checkpoint']}/")
