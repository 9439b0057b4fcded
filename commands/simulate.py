"""`primuspp simulate`: generate, validate and simulate; print a table; write result directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.render import print_refused, results_table


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
) -> None:
    """Simulate schedules on a cost model (default: the packaged p=8, m=32 config, every algorithm)."""
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
