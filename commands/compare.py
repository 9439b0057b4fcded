"""`primuspp compare`: algorithms and/or result directories side by side; recommend under a memory limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.render import results_table

from primuspp.config.loader import load_config, run_specs
from primuspp.sim.compare import rank_results
from primuspp.sim.runs import run, summary
from primuspp.sim.sources import summaries_from_dir
from primuspp.viz.html import compare_page, write_file


def compare(
    sources: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Result directories (simulate output, one run, or a pp_data dump).", show_default=False
        ),
    ] = None,
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
    json_: o.JsonOpt = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write bar charts of step time, bubble and peak memory (HTML)."),
    ] = None,
) -> None:
    """Compare schedules by step time, bubble and peak memory; with --mem-limit, recommend one."""
    rows = []
    for src in sources or []:
        rows.extend(summaries_from_dir(src))
    if algo or config or not sources:
        specs = run_specs(
            load_config(config), o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit)
        )
        rows.extend(summary(run(spec)) for spec in progress(specs, "simulating"))
    ranking = rank_results(rows, mem_limit)
    if json_:
        print(json.dumps({"results": ranking.rows, "recommendation": ranking.best, "reason": ranking.reason}))
    else:
        out.print(results_table(ranking.rows, "Comparison (fastest first)", show_fits=mem_limit is not None))
        style = "bold green" if ranking.best else "bold red"
        out.print(f"[{style}]recommendation:[/{style}] {ranking.reason}")
    if html is not None:
        write_file(html, compare_page(ranking.rows, ranking.best, ranking.reason, mem_limit), "--html")
        err.print(f"wrote {html}", soft_wrap=True)
