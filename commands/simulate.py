"""`primuspp simulate`: generate, validate and simulate; print a table; write result directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.render import print_refused, results_table

if TYPE_CHECKING:
    from primuspp.commands.model_mode import ModelFlags


def simulate(
    config: o.ConfigOpt = None,
    algo: o.AlgoOpt = None,
    pp: o.PpOpt = None,
    vpp: o.VppOpt = None,
    mb: o.MbOpt = None,
    fwd: o.FwdOpt = None,
    bwd: o.BwdOpt = None,
    wgrad: o.WgradOpt = None,
    comm: o.CommOpt = None,
    mem_limit: o.MemLimitOpt = None,
    costs_from: o.CostsFromOpt = None,
    max_nodes: o.MaxNodesOpt = o.DEFAULT_MAX_NODES,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Results directory (default: the config's output_dir).")
    ] = None,
    json_: o.JsonOpt = False,
    show: o.ShowOpt = False,
    model: o.ModelOpt = None,
    gpu: o.GpuOpt = None,
    tp: o.TpOpt = None,
    ep: o.EpOpt = None,
    cp: o.CpOpt = None,
    gpus: o.GpusOpt = None,
    micro_batch_size: o.MbsOpt = None,
    global_batch_size: o.GbsOpt = None,
    seq_len: o.SeqLenOpt = None,
    recompute: o.RecomputeOpt = None,
    layout: o.LayoutOpt = None,
    dtype: o.DtypeOpt = None,
    no_sequence_parallel: o.NoSpOpt = False,
    sp_wgrad: o.SpWgradOpt = None,
    first_layers: o.FirstLayersOpt = None,
    last_layers: o.LastLayersOpt = None,
    layers: o.LayersOpt = None,
    hidden: o.HiddenOpt = None,
    heads: o.HeadsOpt = None,
    ffn: o.FfnOpt = None,
    kv_heads: o.KvHeadsOpt = None,
    vocab: o.VocabOpt = None,
) -> None:
    """Simulate schedules on a cost model (default: the packaged p=8, m=32 config, every algorithm).

    With --model (a preset or a config.json) on --gpu (a GPU profile), the costs come from the model: step
    time in ms, tokens/s, TFLOP/s and MFU per GPU, bubble, and each rank's peak memory in bytes against HBM
    (see docs/plan.md); --costs-from then calibrates the profile's efficiencies on the measured run."""
    abstract = {"--config": config, "--fwd": fwd, "--bwd": bwd, "--wgrad": wgrad, "--comm": comm}
    from primuspp.commands.model_mode import ModelFlags  # here: --help needs no model code

    flags = ModelFlags.given(locals(), {**abstract, "--mem-limit": mem_limit})
    if model is not None:
        _simulate_model(flags, algo, pp, vpp, mb, costs_from, max_nodes, out_dir, json_, show)
        return
    # imported here, not above: `simulate --help` needs only the options (start-up time)
    from primuspp.config.loader import load_config, run_specs
    from primuspp.sim.output import results_dir, write_result
    from primuspp.sim.runs import run, split_refused, summary
    from primuspp.viz.terminal import render_timeline

    cfg = load_config(config)
    specs = run_specs(
        cfg, o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from, max_nodes)
    )
    refused: list[dict[str, str]] = []
    if not algo:  # a sweep skips (and lists) what an algorithm refuses; a named one is an error (exit 2)
        specs, refused = split_refused(specs)
    target = out_dir or Path(cfg.output_dir)
    with results_dir(target, [spec.name for spec in specs]):  # locked, every target checked first
        results = [run(spec) for spec in progress(specs, "simulating")]
        for result in results:
            write_result(result, target)
    summaries = [summary(r) for r in results]
    if json_:
        print(json.dumps({"results": summaries, "refused": refused}))
    else:
        out.print(results_table(summaries, f"Simulated step time (results in {target}/)"))
        print_refused(refused)
    if show:  # with --json, stdout holds the JSON document alone: the drawings go to stderr
        console = err if json_ else out
        for result in results:
            console.print(render_timeline(result.timeline, console.width))


def _simulate_model(
    flags: ModelFlags,
    algo: list[str] | None,
    pp: int | None,
    vpp: int | None,
    mb: int | None,
    costs_from: Path | None,
    max_nodes: int,
    out_dir: Path | None,
    json_: bool,
    show: bool,
) -> None:
    from primuspp.commands import model_mode as mm
    from primuspp.config.loader import load_config
    from primuspp.models.runs import ranked
    from primuspp.sim.output import results_dir, write_result
    from primuspp.viz.terminal import render_timeline

    setup = mm.build(flags, algo, pp, vpp, mb, max_nodes, costs_from)
    runs = ranked(setup.runs)
    target = out_dir or Path(load_config(None).output_dir)
    with results_dir(target, [r.name for r in runs]):
        for r in runs:
            write_result(r.result, target)
    records = [r.record() for r in runs]
    if json_:
        print(json.dumps({**setup.header(), "results": records, "refused": setup.refused}))
    else:
        if setup.note:
            out.print(f"[dim]{setup.note}[/dim]", highlight=False, soft_wrap=True)
        out.print(mm.model_table(records, mm.title(setup, f"Projected (results in {target}/)")))
        mm.print_breakdown(records)
        print_refused(setup.refused)
    if show:
        console = err if json_ else out
        for r in runs:
            console.print(render_timeline(r.result.timeline, console.width))
