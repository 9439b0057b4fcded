"""`primuspp compare`: algorithms and/or result directories side by side; recommend under a memory limit."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.render import fidelity_table, results_table
from primuspp.config.loader import load_config, run_specs
from primuspp.errors import ConfigError
from primuspp.outputs import check_file_target, default_pp_data_dir
from primuspp.sim.compare import Latest, Ranking, describe_key, find_latest, rank_results
from primuspp.sim.fidelity import load_runs, pair_runs, predicted_vs_measured
from primuspp.sim.output import write_result
from primuspp.sim.recommend import candidate_specs, simulate_candidates
from primuspp.sim.runs import run, split_refused, summary
from primuspp.sim.sources import summaries_from_dir
from primuspp.viz.html import compare_page, write_file

if TYPE_CHECKING:
    from primuspp.commands.model_flags import ModelFlags


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
    max_nodes: o.MaxNodesOpt = o.DEFAULT_MAX_NODES,
    json_: o.JsonOpt = False,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write bar charts of step time, bubble and peak memory (HTML)."),
    ] = None,
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
    recompute_layers: o.RecomputeLayersOpt = None,
    main_grads_dtype: o.MainGradsOpt = None,
    moments_dtype: o.MomentsOpt = None,
    no_distributed_optimizer: o.NoDistOptOpt = False,
    overlap: o.OverlapOpt = None,
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
    from primuspp.commands.model_flags import ModelFlags  # here: --help needs no model code

    mflags = ModelFlags.given(locals(), {**abstract, "--mem-limit": mem_limit})
    if model is not None:
        _compare_model(mflags, sources or [], algo, pp, vpp, mb, costs_from, max_nodes, json_, html)
        return
    flags = (config, algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from)
    if not sources and all(f is None for f in flags):
        latest = find_latest(Path(load_config(None).output_dir), default_pp_data_dir())
        if latest is not None:
            _compare_latest(latest, json_, html)
            return
    rows = []
    refused: list[tuple[str, str]] = []
    for src in sources or []:
        rows.extend(summaries_from_dir(src))
    pairs = []
    if sources and len(sources) > 1:
        records = [r for src in sources for r in load_runs(src)]
        matched, _ = pair_runs(records)
        pairs = [predicted_vs_measured(sim, real) for sim, real in matched]
    ov = o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from, max_nodes)
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
    compared = ""
    if not sources and not config:
        compared = "the packaged config's runs, simulated now" if not algo else "the runs simulated now"
        if all(f is None for f in flags):
            compared += f" (no measured run in {default_pp_data_dir()}/: `primuspp train` writes one)"
    _report(ranking, refused, pairs, mem_limit, json_, html, compared)


def _compare_latest(latest: Latest, json_: bool, html: Path | None) -> None:
    """Bare `compare` after `simulate` and `train`: the latest simulation of the measured schedule next to
    the measured run, predicted vs measured; simulated now (costs measured from the run) when the latest
    simulation does not hold that schedule."""
    sim_root = Path(load_config(None).output_dir)
    schedule = describe_key(latest.key)
    algo, p, v, m = latest.key
    real = load_runs(latest.measured)[0]
    measured_row = summaries_from_dir(latest.measured)[0]
    if latest.simulated is not None:
        sim = load_runs(latest.simulated)[0]
        pair = predicted_vs_measured(sim, real)
        rows = [summaries_from_dir(latest.simulated)[0], measured_row]
        compared = f"the latest simulation {latest.simulated}/ with the latest measured run {real.path}/"
    else:
        if algo not in ALGORITHMS:
            raise ConfigError(
                f"{latest.measured}: the measured run's schedule ({schedule}) is not one primuspp can "
                "simulate; compare it with a simulate output: primuspp compare SIM_DIR PP_DATA_DIR",
                key="path",
            )
        ov = o.overrides([algo], p, v if v > 1 else None, m, costs_from=latest.measured)
        spec = run_specs(load_config(None), ov)[0]
        with tempfile.TemporaryDirectory(prefix="primuspp-compare-") as tmp:
            run_dir = write_result(run(spec), tmp)
            sim = load_runs(run_dir)[0]
            pair = predicted_vs_measured(sim, real)
            rows = [summaries_from_dir(run_dir)[0], measured_row]
        held = ", ".join(latest.held) if latest.held else "nothing"
        compared = (
            f"the latest measured run {real.path}/ ({schedule}) with its schedule simulated now on costs "
            f"measured from it: {sim_root}/ holds no run of that schedule ({held})"
        )
    rows[0]["name"] += " (simulated)"
    rows[1]["name"] += " (measured)"
    ranking = rank_results(rows)
    _report(ranking, [], [pair], None, json_, html, compared)
    step = next((x for x in pair["metrics"] if x["metric"] == "step_time"), None)
    if latest.simulated is not None and step and step["error"] is not None and abs(step["error"]) > 0.5:
        ms = "" if v <= 1 else f" --vpp {v}"
        hint = f"primuspp simulate --algo {algo} --pp {p}{ms} --mb {m} --costs-from {real.path}"
        (err if json_ else out).print(
            f"[dim]the simulation ran on its config's costs; for a prediction on the costs measured in "
            f"this run: {hint}[/dim]",
            highlight=False,
            soft_wrap=True,
        )


def _report(
    ranking: Ranking,
    refused: list[tuple[str, str]],
    pairs: list[dict],
    mem_limit: float | None,
    json_: bool,
    html: Path | None,
    compared: str,
) -> None:
    if json_:
        doc = {
            "results": ranking.rows,
            "recommendation": ranking.best,
            "reason": ranking.reason,
            "refused": [{"name": n, "reason": r} for n, r in refused],
        }
        if pairs:
            doc["predicted_vs_measured"] = pairs
        if compared:
            doc["compared"] = compared
        print(json.dumps(doc))
    else:
        if compared:
            out.print(f"[dim]compared {compared}[/dim]", highlight=False, soft_wrap=True)
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
    from primuspp.sim.fidelity import RunRecord

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
        write_file(html, compare_page(rows, best, reason, None), "--html")
        err.print(f"wrote {html}", soft_wrap=True)
