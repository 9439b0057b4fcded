"""`simulate` and `compare` with `--model`: the flags of a real model on a GPU profile turned into projected
runs (primuspp.models.runs), and their table in real units."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from primuspp.algorithms.registry import get_algorithm
from primuspp.commands.console import out
from primuspp.commands.model_flags import ModelFlags
from primuspp.commands.options import check_batch, check_positive, first_last, sp_wgrad, training
from primuspp.models.hardware import Hardware, gib
from primuspp.models.parallel import Parallel
from primuspp.models.runs import (
    ModelRun,
    assumption_lines,
    comm_line,
    model_header,
    model_parallel,
    model_runs,
    schedule_notes,
)
from primuspp.models.spec import ModelSpec

DEFAULT_GPU = "h100"
DEFAULT_SEQ_LEN = 4096


@dataclass(frozen=True)
class ModelSetup:
    spec: ModelSpec
    hw: Hardware
    par: Parallel
    runs: list[ModelRun]
    refused: list[dict[str, str]]
    note: str = ""  # how the GPU profile was calibrated, if it was

    def header(self) -> dict[str, Any]:
        doc = model_header(self.spec, self.hw, self.par)
        if self.note:
            doc["calibration"] = self.note
        return doc


def build(
    flags: ModelFlags,
    algo: list[str] | None,
    pp: int | None,
    vpp: int | None,
    mb: int | None,
    max_nodes: int,
    costs_from: Path | None = None,
    keys: list[tuple[str, int, int, int]] | None = None,
) -> ModelSetup:
    """The projected runs the flags describe. `keys` (algorithm, p, v, m of measured runs): project those
    schedules when neither --algo nor --pp/--vpp/--mb say otherwise. `costs_from`: calibrate the profile's
    efficiencies on that measured run first."""
    from primuspp.config.loader import simulation_config
    from primuspp.models.hardware import load_hardware
    from primuspp.models.plan import DEFAULT_ALGORITHMS

    spec = flags.spec()
    hw = load_hardware(flags.gpu or DEFAULT_GPU)
    for key, value in (
        ("--pp", pp),
        ("--tp", flags.tp),
        ("--ep", flags.ep),
        ("--cp", flags.cp),
        ("--gpus", flags.gpus),
        ("--global-batch-size", flags.global_batch_size),
    ):
        check_positive(key, value)
    check_batch(flags.seq_len or DEFAULT_SEQ_LEN, [flags.micro_batch_size or 1])
    fl = first_last(flags.first_layers, flags.last_layers)
    packaged = simulation_config(None)
    named = bool(algo)
    if keys and not algo:  # the measured runs' schedules
        algorithms = [k[0] for k in keys]
        pp = pp or keys[0][1]
        if vpp is None and len({k[2] for k in keys}) == 1:  # named by -v<vpp> only off the default
            vpp = None if all(k[2] == get_algorithm(k[0]).vpp_default for k in keys) else keys[0][2]
        mb = mb or (keys[0][3] if flags.global_batch_size is None else None)
        named = True
    else:
        algorithms = list(algo or DEFAULT_ALGORITHMS)
    par = model_parallel(
        spec,
        hw,
        tp=flags.tp,
        pp=pp or packaged.pp,
        ep=flags.ep,
        cp=flags.cp,
        gpus=flags.gpus,
        micro_batch_size=flags.micro_batch_size,
        global_batch_size=flags.global_batch_size,
        micro_batches=mb,
        default_micro_batches=packaged.micro_batches,
        seq_len=flags.seq_len or DEFAULT_SEQ_LEN,
        recompute=flags.recompute or "none",
        sequence_parallel=not flags.no_sequence_parallel,
        sp_wgrad=sp_wgrad(flags.sp_wgrad),
        dtype=flags.dtype or "bf16",
        training=training(
            flags.recompute_layers,
            flags.main_grads_dtype,
            flags.moments_dtype,
            flags.no_distributed_optimizer,
            flags.overlap,
        ),
    )
    note = ""
    if costs_from is not None:
        from primuspp.models.calibrate import calibrate_hardware

        fit = calibrate_hardware(spec, hw, par, costs_from, flags.layout or "balanced")
        hw, note = fit.hardware, fit.describe()
    runs, refused = model_runs(
        spec, hw, par, algorithms, vpp, named, flags.layout or "balanced", fl, max_nodes=max_nodes
    )
    return ModelSetup(spec, hw, par, runs, refused, note)


def title(setup: ModelSetup, what: str) -> str:
    s, p, hw = setup.spec, setup.par, setup.hw
    cp = f" cp {p.cp}" if p.cp > 1 else ""
    head = (
        f"{what}: {s.name} ({s.parameters / 1e9:.3g}B parameters) on {p.gpus} x {hw.name}, "
        f"tp {p.tp}{cp} pp {p.pp} dp {p.dp} ep {p.ep}, micro-batch {p.micro_batch_size} x {p.seq_len} "
        f"tokens, global batch {p.global_batch_size}, recompute {p.recompute}"
    )
    return "\n".join([head, *assumption_lines(setup.header()["assumptions"])])


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def model_table(records: list[dict[str, Any]], title_: str) -> Table:
    """One row per projected run (fastest that fits in bold green), in ms, tokens/s, TFLOP/s and GiB."""
    best = next((r for r in records if r["fits"]), None)
    table = Table(title=title_, title_justify="left")
    table.add_column("name", no_wrap=True)
    cols = ("p", "v", "m", "step ms", "tokens/s/GPU", "TFLOP/s/GPU", "MFU", "bubble", "peak GiB / HBM")
    cols += ("fits",)
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)
    for r in records:
        style = "bold green" if r is best else None
        table.add_row(
            r["name"],
            str(r["pp"]),
            str(r["vpp"]),
            str(r["micro_batches"]),
            _num(r["step_time_ms"]),
            f"{r['tokens_per_s_per_gpu']:,.0f}",
            _num(r["tflops_per_gpu"]),
            f"{r['mfu']:.1%}",
            f"{r['bubble_rate']:.1%}",
            f"{gib(r['peak_memory_bytes'])} / {gib(r['hbm_bytes'])}",
            "yes" if r["fits"] else "[red]no[/red]",
            style=style,
        )
    return table


def print_breakdown(records: list[dict[str, Any]]) -> None:
    """The first run's most loaded rank, part by part."""
    if not records:
        return
    first = records[0]
    rank = max(first["per_rank"], key=lambda x: x["total"])
    parts = ", ".join(
        f"{key} {gib(rank[key])}" for key in ("weights", "gradients", "optimizer", "activations", "other")
    )
    out.print(
        f"{first['name']}'s most loaded rank ({rank['rank']}), GiB: {parts}; total {gib(rank['total'])}",
        highlight=False,
    )
    out.print(f"{first['name']}'s {comm_line(first)}", highlight=False, soft_wrap=True)
    for line in schedule_notes(records):
        out.print(line, highlight=False, soft_wrap=True)


def recommendation(records: list[dict[str, Any]]) -> tuple[str | None, str]:
    fitting = [r for r in records if r["fits"]]
    if not fitting:
        low = min(records, key=lambda r: r["peak_memory_bytes"])
        return None, (
            f"nothing fits in {gib(low['hbm_bytes'])} GiB; the lowest peak is {low['name']} at "
            f"{gib(low['peak_memory_bytes'])} GiB"
        )
    b = fitting[0]
    return b["name"], (
        f"{b['name']} has the shortest step time that fits ({b['step_time_ms']:,.4g} ms, "
        f"{b['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, peak {gib(b['peak_memory_bytes'])} GiB)"
    )
