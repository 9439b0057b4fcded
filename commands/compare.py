"""`primuspp compare`: algorithms and/or result directories side by side; recommend under a memory limit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.model_flags import NO_MODEL, ModelFlags, model_options
from primuspp.commands.render import fidelity_table, results_table
from primuspp.config.loader import run_specs, simulation_config
from primuspp.errors import ConfigError
from primuspp.outputs import check_file_target, default_pp_data_dir, write_file
from primuspp.sim.compare import Ranking, check_limit_unit, group_rows, rank_results
from primuspp.sim.fidelity import RunRecord, describe_key, load_runs, pair_runs, predicted_vs_measured
from primuspp.sim.output import write_result
from primuspp.sim.runs import run, split_refused, summary
from primuspp.sim.sources import summaries_from_dir


def _value(x: object) -> str:
    return "/".join(f"{v:.4g}" for v in x) if isinstance(x, list) else f"{x:.4g}"


@model_options
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
    max_nodes: o.MaxNodesOpt = o.DEFAULT_MAX_NODES,
    json_: o.JsonOpt = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write bar charts of step time, bubble and peak memory (HTML)."),
    ] = None,
    flags: ModelFlags = NO_MODEL,
) -> None:
    """Compare schedules by step time, bubble and peak memory; with --mem-limit, recommend one.

    With --mem-limit and neither --algo nor SOURCES, every admissible algorithm, v and memory option is tried.
    A simulated run and a measured one (a pp_data dump of the same algorithm, p, v and m, or the only two
    given) are also shown predicted vs measured, with the error of each figure.

    With no arguments at all, after `primuspp train` (which writes output/pp_data, or $DUMP_PP_DIR): the
    measured run next to the latest `primuspp simulate` run of its schedule (else its schedule simulated now
    on costs measured from it), predicted vs measured; without a measured run, the packaged config's runs.

    With --model on --gpu, the schedules are projected in ms and bytes (see `simulate --model`); SOURCES are
    then measured runs (pp_data dumps): their schedules are projected, and each is shown predicted vs
    measured, peak activation bytes per rank included. --costs-from calibrates the GPU profile first.
    """
    if html is not None:
        check_file_target(html, "--html")  # before any work
    abstract = {"--config": config, "--fwd": fwd, "--bwd": bwd, "--wgrad": wgrad, "--comm": comm}
    if flags.checked({**abstract, "--mem-limit": mem_limit}).model is not None:
        _compare_model(flags, sources or [], algo, pp, vpp, mb, costs_from, max_nodes, json_, html)
        return
    given = (config, algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from)
    if not sources and all(f is None for f in given):
        measured = default_pp_data_dir()
        if measured.is_dir() and any(measured.glob("pp_rank_*.json")):
            _compare_latest(measured, json_, html)
            return
    rows = [row for src in sources or [] for row in summaries_from_dir(src)]
    refused: list[tuple[str, str]] = []
    pairs, notes = [], []
    if sources and len(sources) > 1:
        matched, alone = pair_runs([r for src in sources for r in load_runs(src)])
        pairs = [predicted_vs_measured(sim, real) for sim, real in matched]
        notes = [_no_simulation(real) for real in alone]
    simulating = bool(algo or config or not sources)
    check_limit_unit([*rows, *([{"name": "the simulations"}] if simulating else [])], mem_limit)
    ov = o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from, max_nodes)
    if mem_limit is not None and not algo and not sources:
        from primuspp.sim.recommend import candidate_specs, simulate_candidates

        base = run_specs(simulation_config(config), ov)[0]
        candidates = candidate_specs(base.pp, base.micro_batches, base.costs, mem_limit)
        results, refused = simulate_candidates(candidates)
        rows.extend(summary(r) for r in results)
    elif simulating:
        specs = run_specs(simulation_config(config), ov)
        if not algo:  # a sweep skips what an algorithm refuses (listed below the table)
            specs, skipped = split_refused(specs)
            refused.extend((r["name"], r["reason"]) for r in skipped)
        rows.extend(summary(run(spec)) for spec in progress(specs, "simulating"))
    compared = ""
    if not sources and not config:
        compared = "the packaged config's runs, simulated now" if not algo else "the runs simulated now"
        if all(f is None for f in given):
            compared += f" (no measured run in {default_pp_data_dir()}/: `primuspp train` writes one)"
    # a run shown predicted vs measured, alone at its size, has nothing to be ranked against
    paired = {p[side]["path"] for p in pairs for side in ("simulated", "measured")}
    groups = [g for g in group_rows(rows) if not all(r.get("path") in paired for r in g)]
    rankings = [rank_results(g, mem_limit) for g in groups]
    _report(rankings, refused, pairs, mem_limit, json_, html, compared, notes)


def _no_simulation(real: RunRecord) -> str:
    algo, p, v, m = real.key
    vpp = f" --vpp {v}" if v > 1 else ""
    return (
        f"no simulated run of {real.path}'s size and schedule ({describe_key(real.key)}): "
        f"primuspp simulate --algo {algo or 'NAME'}{vpp} --costs-from {real.path} (p {p}, m {m} from the run)"
    )


def _compare_latest(measured: Path, json_: bool, html: Path | None) -> None:
    """Bare `compare` after `simulate` and `train`: the measured run predicted vs measured, by the latest
    simulation's run of its schedule at its size, next to that simulation's other runs at its size (the
    choices); else its schedule simulated now on costs measured from it."""
    sim_root = Path(simulation_config(None).output_dir)
    real = load_runs(measured)[0]
    algo, p, v, m = real.key
    schedule = describe_key(real.key)
    try:
        held = summaries_from_dir(sim_root)
    except ConfigError:  # no simulation there (or none readable): simulated now below
        held = []
    choices = [r for r in held if (r["pp"], r["micro_batches"]) == (p, m) and r.get("source") == "simulated"]
    match = next((r for r in choices if (r["algorithm"], r["vpp"]) == (algo, v)), None)
    if match is not None:
        sim = load_runs(match["path"])[0]
        pair = predicted_vs_measured(sim, real)
        compared = f"the latest measured run {real.path}/ ({schedule}) with the simulation {sim.path}/"
    else:
        if algo not in ALGORITHMS:
            raise ConfigError(
                f"{measured}: the measured run's schedule ({schedule}) is not one primuspp can "
                "simulate; compare it with a simulate output: primuspp compare SIM_DIR PP_DATA_DIR",
                key="path",
            )
        ov = o.overrides([algo], p, v if v > 1 else None, m, costs_from=measured)
        spec = run_specs(simulation_config(None), ov)[0]
        with tempfile.TemporaryDirectory(prefix="primuspp-compare-") as tmp:
            sim = load_runs(write_result(run(spec), tmp))[0]
            pair = predicted_vs_measured(sim, real)
        sizes = sorted({f"p {r['pp']} m {r['micro_batches']}" for r in held if r["algorithm"] == algo})
        why = (
            f"{sim_root}/ holds {algo} at {', '.join(sizes)}, the run is p {p} m {m}"
            if sizes
            else f"{sim_root}/ holds no {algo} run"
        )
        compared = (
            f"the latest measured run {real.path}/ ({schedule}) with its schedule simulated now at its size, "
            f"on costs measured from it ({why}); every algorithm at this size: primuspp simulate "
            f"--costs-from {real.path}"
        )
    rankings = [rank_results(choices)] if len(choices) > 1 else []
    _report(rankings, [], [pair], None, json_, html, compared, [])
    step = next((x for x in pair["metrics"] if x["metric"] == "step_time"), None)
    if match is not None and step and step["error"] is not None and abs(step["error"]) > 0.5:
        (err if json_ else out).print(
            f"[dim]the simulation ran on its config's costs; for predictions on the costs measured in "
            f"this run: primuspp simulate --costs-from {real.path}[/dim]",
            highlight=False,
            soft_wrap=True,
        )


def _report(
    rankings: list[Ranking],
    refused: list[tuple[str, str]],
    pairs: list[dict],
    mem_limit: float | None,
    json_: bool,
    html: Path | None,
    compared: str,
    notes: list[str],
) -> None:
    """One table and recommendation per set of choices, then each predicted-vs-measured pair."""
    rows = [r for k in rankings for r in k.rows]
    one = rankings[0] if len(rankings) == 1 else None
    best = one.best if one else None
    reason = one.reason if one else ("; ".join(f"{k.title}: {k.reason}" for k in rankings))
    if json_:
        doc = {
            "results": rows,
            "recommendation": best,
            "reason": reason,
            "groups": [
                {"title": k.title, "recommendation": k.best, "reason": k.reason, "runs": len(k.rows)}
                for k in rankings
            ],
            "refused": [{"name": n, "reason": r} for n, r in refused],
        }
        if pairs:
            doc["predicted_vs_measured"] = pairs
        if compared:
            doc["compared"] = compared
        if notes:
            doc["notes"] = notes
        print(json.dumps(doc))
    else:
        if compared:
            out.print(f"[dim]compared {compared}[/dim]", highlight=False, soft_wrap=True)
        order = "fastest that fits first" if mem_limit is not None else "fastest first"
        for k in rankings:
            out.print(results_table(k.rows, f"{k.title} ({order})", show_fits=mem_limit is not None))
            style = "bold green" if k.best else "bold red" if len(k.rows) > 1 or mem_limit else "dim"
            out.print(f"[{style}]recommendation:[/{style}] {k.reason}", highlight=False)
        for name, reason in refused:
            out.print(f"[dim]not admissible: {name}: {reason}[/dim]")
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
        for note in notes:
            out.print(f"[yellow]{note}[/yellow]", highlight=False, soft_wrap=True)
    if html is not None:
        _write_page(html, rows, best, reason, mem_limit)


def _write_page(html: Path, rows: list[dict], best: dict | None, reason: str, limit: float | None) -> None:
    from primuspp.viz.html import compare_page  # plotly's page: only with --html

    write_file(html, compare_page(rows, best, reason, limit), "--html")
    err.print(f"wrote {html}", soft_wrap=True)


def _compare_model(
    flags: ModelFlags,
    sources: list[Path],
    algo: list[str] | None,
    pp: int | None,
    vpp: int | None,
    mb: int | None,
    costs_from: Path | None,
    max_nodes: int,
    json_: bool,
    html: Path | None,
) -> None:
    """Projected runs of a real model, ranked; each measured run in SOURCES next to the projection of its
    schedule, predicted vs measured (time in ms, activation memory in bytes)."""
    from primuspp.commands import model_mode as mm
    from primuspp.models.runs import ranked

    measured = [r for src in sources for r in load_runs(src)]
    for r in measured:
        if r.simulated:
            raise ConfigError(
                f"{r.path}: a simulated run; with --model, SOURCES are measured runs (pp_data dumps of "
                "`primuspp train`)",
                key="path",
            )
    keys = list(dict.fromkeys(r.key for r in measured))
    setup = mm.build(flags, algo, pp, vpp, mb, max_nodes, costs_from, keys)
    runs = ranked(setup.runs)
    records = [r.record() for r in runs]
    best, reason = mm.recommendation(records)
    pairs, unmatched = [], []
    for real in measured:
        match = next((r for r in runs if r.key == real.key), None)
        if match is None:
            unmatched.append(f"{real.path}: no projection of its schedule ({describe_key(real.key)})")
            continue
        sim = RunRecord(Path(f"projection {match.name}"), [match.result.timeline], {})
        pairs.append(predicted_vs_measured(sim, real))
    if json_:
        doc = {**setup.header(), "results": records, "recommendation": best, "reason": reason}
        doc["refused"] = setup.refused
        if sources:
            doc["predicted_vs_measured"] = pairs
            doc["unmatched"] = unmatched
        print(json.dumps(doc))
    else:
        if setup.note:
            out.print(f"[dim]{setup.note}[/dim]", highlight=False, soft_wrap=True)
        out.print(mm.model_table(records, mm.title(setup, "Projected (fastest that fits first)")))
        mm.print_breakdown(records)
        for r in setup.refused:
            out.print(f"[dim]not admissible: {r['name']}: {r['reason']}[/dim]", highlight=False)
        style = "bold green" if best else "bold red"
        out.print(f"[{style}]recommendation:[/{style}] {reason}", highlight=False)
        for pair in pairs:
            out.print(fidelity_table(pair))
            out.print(f"[dim]memory: {pair['memory_note']}[/dim]", highlight=False)
        for line in unmatched:
            out.print(f"[yellow]{line}[/yellow]", highlight=False)
    if html is not None:
        rows = [{**summary(r.result), "fits": r.projection.fits} for r in runs]
        _write_page(html, rows, best, reason, None)
