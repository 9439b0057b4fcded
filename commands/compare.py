"""`primuspp compare`: algorithms and/or result directories side by side; recommend under a memory limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.render import fidelity_table, results_table
from primuspp.config.loader import load_config, run_specs
from primuspp.sim.compare import rank_results
from primuspp.sim.fidelity import load_runs, pair_runs, predicted_vs_measured
from primuspp.sim.recommend import candidate_specs, simulate_candidates
from primuspp.sim.runs import run, split_refused, summary
from primuspp.sim.sources import summaries_from_dir
from primuspp.viz.html import compare_page, write_file


def _value(x: object) -> str:
    return "/".join(f"{v:.4g}" for v in x) if isinstance(x, list) else f"{x:.4g}"


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
    costs_from: o.CostsFromOpt = None,
    json_: o.JsonOpt = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write bar charts of step time, bubble and peak memory (HTML)."),
    ] = None,
) -> None:
    """Compare schedules by step time, bubble and peak memory; with --mem-limit, recommend one.

    With --mem-limit and neither --algo nor SOURCES, every admissible algorithm, v and memory option is tried.
    A simulated run and a measured one (a pp_data dump of the same algorithm, p, v and m, or the only two
    given) are also shown predicted vs measured, with the error of each figure.
    """
    rows = []
    refused: list[tuple[str, str]] = []
    for src in sources or []:
        rows.extend(summaries_from_dir(src))
    pairs = []
    if sources and len(sources) > 1:
        records = [r for src in sources for r in load_runs(src)]
        matched, _ = pair_runs(records)
        pairs = [predicted_vs_measured(sim, real) for sim, real in matched]
    ov = o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from)
    if mem_limit is not None and not algo and not sources:
        base = run_specs(load_config(config), ov)[0]
        candidates = candidate_specs(base.pp, base.micro_batches, base.costs, mem_limit)
        results, refused = simulate_candidates(candidates)
        rows.extend(summary(r) for r in results)
    elif algo or config or not sources:
        specs = run_specs(load_config(config), ov)
        if not algo:  # a sweep skips what an algorithm refuses (listed below the table)
            specs, skipped = split_refused(specs)
            refused.extend((r["name"], r["reason"]) for r in skipped)
        rows.extend(summary(run(spec)) for spec in progress(specs, "simulating"))
    ranking = rank_results(rows, mem_limit)
    if json_:
        doc = {
            "results": ranking.rows,
            "recommendation": ranking.best,
            "reason": ranking.reason,
            "refused": [{"name": n, "reason": r} for n, r in refused],
        }
        if pairs:
            doc["predicted_vs_measured"] = pairs
        print(json.dumps(doc))
    else:
        out.print(results_table(ranking.rows, "Comparison (fastest first)", show_fits=mem_limit is not None))
        for name, reason in refused:
            out.print(f"[dim]not admissible: {name}: {reason}[/dim]")
        style = "bold green" if ranking.best else "bold red"
        out.print(f"[{style}]recommendation:[/{style}] {ranking.reason}")
        for pair in pairs:
            out.print(fidelity_table(pair))
            out.print(f"[dim]memory: {pair['memory_note']}[/dim]", highlight=False)
            costs = pair["measured"]["emulated_costs"]
            if costs:
                given = ", ".join(f"{k} {_value(costs[k])}" for k in ("forward", "backward", "wgrad"))
                source = pair["measured"]["emulated_costs_source"] or "?"
                out.print(
                    f"[dim]emulated with {given} ms ({source}); its p2p was real[/dim]", highlight=False
                )
    if html is not None:
        write_file(html, compare_page(ranking.rows, ranking.best, ranking.reason, mem_limit), "--html")
        err.print(f"wrote {html}", soft_wrap=True)
