"""`primuspp plan`: the best TP x CP x PP x VPP x EP x micro-batch size x algorithm for a model on N GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from primuspp.algorithms.registry import get_algorithm
from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.errors import ConfigError
from primuspp.models.hardware import gib, load_hardware
from primuspp.models.parallel import RECOMPUTE, Parallel
from primuspp.models.plan import DEFAULT_ALGORITHMS, NO_FIT, TIE, candidates, evaluate, plan_record
from primuspp.models.plan_html import plan_page
from primuspp.models.presets import resolve_model
from primuspp.models.project import project
from primuspp.models.runs import assumption_lines, assumptions, comm_line, schedule_notes
from primuspp.outputs import write_file

IntList = Annotated[list[int] | None, typer.Option(help="Only these values (repeatable).")]


def plan(
    model: Annotated[str, typer.Option("--model", help=o.MODEL_HELP)],
    gpu: Annotated[str, typer.Option("--gpu", help=o.GPU_HELP)],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs in all.")],
    seq_len: o.SeqLenOpt = 4096,
    global_batch_size: Annotated[
        int, typer.Option("--global-batch-size", help="Sequences per step (all data-parallel replicas).")
    ] = 1024,
    algo: Annotated[
        list[str] | None,
        typer.Option(
            "--algo", "-a", help=f"Algorithms (repeatable; default {', '.join(DEFAULT_ALGORITHMS)})."
        ),
    ] = None,
    tp: Annotated[list[int] | None, typer.Option("--tp", help="Only these TP sizes (repeatable).")] = None,
    pp: Annotated[list[int] | None, typer.Option("--pp", help="Only these PP sizes (repeatable).")] = None,
    vpp: Annotated[list[int] | None, typer.Option("--vpp", help="Only these VPP sizes (repeatable).")] = None,
    ep: Annotated[list[int] | None, typer.Option("--ep", help="Only these EP sizes (repeatable).")] = None,
    cp: Annotated[
        list[int] | None,
        typer.Option("--cp", help="Only these context-parallel sizes (repeatable; default 1, 2, 4, 8)."),
    ] = None,
    micro_batch_size: Annotated[
        list[int] | None, typer.Option("--micro-batch-size", help="Micro-batch sizes (default 1, 2, 4).")
    ] = None,
    recompute: Annotated[
        list[str] | None,
        typer.Option("--recompute", help="none (default), selective or full; repeat to sweep several."),
    ] = None,
    layout: o.LayoutOpt = "balanced",
    first_layers: o.FirstLayersOpt = None,
    last_layers: o.LastLayersOpt = None,
    no_sequence_parallel: o.NoSpOpt = False,
    sp_wgrad: o.SpWgradOpt = None,
    dtype: o.DtypeOpt = "bf16",
    recompute_layers: o.RecomputeLayersOpt = None,
    main_grads_dtype: o.MainGradsOpt = None,
    moments_dtype: o.MomentsOpt = None,
    no_distributed_optimizer: o.NoDistOptOpt = False,
    overlap: o.OverlapOpt = None,
    top: Annotated[int, typer.Option("--top", help="Configurations to show.")] = 10,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="Rank configurations that do not fit too (the throughput ceiling)."),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Also write memory vs throughput (Pareto front) and the winner's timeline."
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", help="Processes for the sweep (default and at most: one per core, up to 16)."
        ),
    ] = None,
    json_: o.JsonOpt = False,
) -> None:
    """Plan a model on N GPUs: sweep TP, CP, PP, VPP, EP, micro-batch size and algorithm; rank what fits."""
    spec = resolve_model(model)
    hw = load_hardware(gpu)
    hw.peak(dtype)
    for key, value in (("--gpus", gpus), ("--global-batch-size", global_batch_size), ("--top", top)):
        o.check_positive(key, value)
    o.check_positive("--jobs", jobs)
    o.check_batch(seq_len, micro_batch_size or ())
    for key, values in (("--tp", tp), ("--pp", pp), ("--vpp", vpp), ("--ep", ep), ("--cp", cp)):
        for v in values or ():
            o.check_positive(key, v)
    first_last = o.first_last(first_layers, last_layers)
    for value in recompute or ():
        if value not in RECOMPUTE:
            raise ConfigError(
                f"--recompute {value}: expected one of {', '.join(RECOMPUTE)}", key="--recompute"
            )
    algorithms = [get_algorithm(a).name for a in (algo or DEFAULT_ALGORITHMS)]
    training = o.training(
        recompute_layers, main_grads_dtype, moments_dtype, no_distributed_optimizer, overlap
    )
    if recompute_layers is not None and "full" not in (recompute or ()):
        raise ConfigError(
            f"--recompute-num-layers {recompute_layers}: needs --recompute full", key="--recompute-num-layers"
        )
    if training["ep_comm_overlap"] and not spec.moe:
        raise ConfigError(
            f"--overlap {overlap}: ep needs a MoE model ({spec.name} has no experts)", key="--overlap"
        )
    items = []
    for value in dict.fromkeys(recompute or ["none"]):
        extra = training if value == "full" else {**training, "recompute_layers": None}
        base = Parallel(
            global_batch_size=global_batch_size,
            seq_len=seq_len,
            recompute=value,  # type: ignore[arg-type]
            sequence_parallel=not no_sequence_parallel,
            sp_wgrad=o.sp_wgrad(sp_wgrad),  # type: ignore[arg-type]
            dtype=dtype,
            **hw.kernels(),
            **extra,
        )
        mbs = micro_batch_size or (1, 2, 4)
        items += candidates(spec, hw, gpus, base, algorithms, tp, pp, vpp, ep, mbs, cp)
    cores = _cores()
    ticker = progress(items, "planning")  # advanced once per evaluated candidate, in either mode
    next(ticker, None)
    result = evaluate(
        spec,
        hw,
        items,
        layout,
        on_each=lambda _: next(ticker, None),
        first_last=first_last,
        project_unfit=show_all,
        jobs=min(jobs or cores, cores),
    )
    for _ in ticker:  # the bar's last step and its closing line
        pass
    if result.evaluated and not (result.fits or result.no_fit or result.dropped.get(NO_FIT)):
        # nothing could even be projected: the options themselves are inconsistent (bad input, exit 2)
        why, example = next(iter(result.examples.items()))
        raise ConfigError(f"no configuration can run ({why}): {example}")
    record = plan_record(spec, hw, gpus, result, top, show_all)
    swept = {
        "micro_batch_size": list(mbs),
        "recompute": list(dict.fromkeys(recompute or ["none"])),
        "recompute_num_layers": recompute_layers,
    }
    record["assumptions"] = assumptions(hw, base, swept)
    if html is not None:
        ranked = result.ranked()
        winner = None
        if ranked:  # the sweep keeps numbers only: project the winner again for its timeline
            best = ranked[0]
            params = {"offload": True} if best.offload else None
            winner = project(spec, hw, best.par, best.algorithm, best.layout, params, first_last=None)
        title = f"{spec.name} on {gpus} x {hw.name}"
        write_file(html, plan_page(title, hw, result, winner), "--html")
        err.print(f"wrote {html}", soft_wrap=True)
    if json_:
        print(json.dumps(record))
        return
    _render(record, spec.name, hw.name, gpus)
    for line in schedule_notes(record["results"]):
        out.print(line, highlight=False, soft_wrap=True)


def _cores() -> int:
    """The processes a sweep runs in, at most: one per core this process may run on, at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 16))


def _render(record: dict, model: str, gpu: str, gpus: int) -> None:
    m = record["model"]
    title = (
        f"{model} ({m['parameters'] / 1e9:.2f}B parameters, {m['active_parameters'] / 1e9:.2f}B active) on "
        f"{gpus} x {gpu}: {record['configurations_evaluated']} configurations, {record['fitting']} fit"
    )
    title = "\n".join([title, *assumption_lines(record["assumptions"])])
    table = Table(title=title, title_justify="left")
    for col in (
        "#",
        "algorithm",
        "tp",
        "cp",
        "pp",
        "vpp",
        "ep",
        "dp",
        "mbs",
        "m",
        "step ms",
        "tokens/s/GPU",
        "TFLOP/s/GPU",
        "MFU",
        "bubble",
        "peak GiB / HBM",
        "fits",
        "layout",
    ):
        table.add_column(col, justify="left" if col in ("algorithm", "layout") else "right")
    for r in record["results"]:
        lay = r["layout"]
        table.add_row(
            f"{r['rank']}{'=' if r['tie'] else ''}",
            r["algorithm"],
            str(r["tp"]),
            str(r["cp"]),
            str(r["pp"]),
            str(r["vpp"]),
            str(r["ep"]),
            str(r["dp"]),
            str(r["micro_batch_size"]),
            str(r["micro_batches"]),
            f"{r['step_time_ms']:.0f}",
            f"{r['tokens_per_s_per_gpu']:.0f}",
            f"{r['tflops_per_gpu']:.0f}",
            f"{r['mfu']:.1%}",
            f"{r['bubble_rate']:.1%}",
            f"{gib(r['peak_memory_bytes'])} / {gib(r['hbm_bytes'])}",
            "yes" if r["fits"] else "no",
            lay if len(lay) <= 40 else lay[:37] + "...",
        )
    out.print(table)
    if not record["fitting"]:
        out.print("no configuration fits")
    if record["results"]:
        best = record["results"][0]
        rank = max(best["per_rank"], key=lambda x: x["total"])
        parts = ", ".join(
            f"{key} {gib(rank[key])}" for key in ("weights", "gradients", "optimizer", "activations", "other")
        )
        out.print(f"#1's most loaded rank ({rank['rank']}), GiB: {parts}; total {gib(rank['total'])}")
        if any(r["tie"] for r in record["results"]):
            out.print(
                f"n=: a tie, within {TIE:.0%} of the best throughput of its rank, the least memory first"
            )
        out.print(
            f"#1: {best['tokens_per_s']:,.0f} tokens/s in total, {best['tokens_per_s_per_gpu']:,.0f} per "
            f"GPU; {comm_line(best)}",
            highlight=False,
        )
    dropped = record["dropped"]
    if dropped:
        out.print(
            "dropped: " + ", ".join(f"{n} {why}" for why, n in sorted(dropped.items(), key=lambda x: -x[1]))
        )
        for why, example in record["dropped_examples"].items():
            out.print(f"  e.g. {why}: {example}")
