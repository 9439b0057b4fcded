"""`primuspp simulate`: generate, validate and simulate; print a table; write result directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from primuspp.commands import options as o
from primuspp.commands.console import err, out, progress
from primuspp.commands.model_flags import NO_MODEL, ModelFlags, model_options

if TYPE_CHECKING:
    from primuspp.sim.engine import SimResult

#: the most iterations `--iterations` lays out (primuspp.sim.iterations.MAX_ITERATIONS; not imported here:
#: `simulate --help` loads no simulator code)
MAX_ITERATIONS = 10_000

IterationsOpt = Annotated[
    int | None,
    typer.Option(
        "--iterations",
        callback=o.int_check(1, MAX_ITERATIONS),
        help="Lay out K consecutive iterations with the optimizer step between them and report the steady "
        "step time (end of iteration K - end of iteration 1) / (K - 1) and the steady bubble.",
    ),
]
PostValidationOpt = Annotated[
    bool,
    typer.Option(
        "--post-validation",
        help="With --iterations: each rank runs its optimizer step as soon as its own last node is done and "
        "starts the next iteration after it (the global norm check is validated afterwards), instead of "
        "every rank waiting for the slowest.",
    ),
]
OptimizerCostOpt = Annotated[
    float | None,
    typer.Option(
        "--optimizer-cost",
        callback=o.finite_check(),
        help="With --iterations: the optimizer step's time on each rank, in ms (default 0).",
    ),
]


@model_options
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
    iterations: IterationsOpt = None,
    post_validation: PostValidationOpt = False,
    optimizer_cost: OptimizerCostOpt = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Results directory (default: the config's output_dir).")
    ] = None,
    json_: o.JsonOpt = False,
    show: o.ShowOpt = False,
    flags: ModelFlags = NO_MODEL,
) -> None:
    """Simulate schedules on a cost model (default: the packaged p=8, m=32 config, every algorithm).

    With --model (a preset or a config.json) on --gpu (a GPU profile), the costs come from the model: step
    time in ms, tokens/s, TFLOP/s and MFU per GPU, bubble, and each rank's peak memory in bytes against HBM
    (see docs/plan.md); --costs-from then calibrates the profile's efficiencies on the measured run.

    With --iterations K, each run is also laid out over K iterations (synchronous, or --post-validation)
    and its steady step time and bubble are shown (docs/guide.md)."""
    laps = _iterations_request(iterations, post_validation, optimizer_cost)
    abstract = {"--config": config, "--fwd": fwd, "--bwd": bwd, "--wgrad": wgrad, "--comm": comm}
    if flags.checked({**abstract, "--mem-limit": mem_limit}).model is not None:
        _simulate_model(flags, algo, pp, vpp, mb, costs_from, max_nodes, out_dir, json_, show, laps)
        return
    # imported here, not above: `simulate --help` needs only the options (start-up time)
    from primuspp.algorithms.registry import refusal
    from primuspp.config.loader import run_specs, simulation_config
    from primuspp.errors import ScheduleError
    from primuspp.sim.runs import run, split_refused, summary

    cfg = simulation_config(config)
    specs = run_specs(
        cfg, o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, costs_from, max_nodes)
    )
    refused: list[dict[str, str]] = []
    if algo:  # a named algorithm's refusal is an error (exit 2), raised before anything is built
        for spec in specs:
            if reason := refusal(spec.algorithm, spec.pp, spec.vpp, spec.micro_batches, spec.params):
                raise ScheduleError(reason, key="micro_batches")
    else:  # a sweep skips (and lists) what an algorithm refuses
        specs, refused = split_refused(specs)
    from primuspp.sim.output import results_dir, write_results  # the checks above import no numpy

    target = out_dir or Path(cfg.output_dir)
    # locked, every target checked first
    with results_dir(target, [spec.name for spec in specs]):
        results = [run(spec) for spec in progress(specs, "simulating")]
        note = write_results(results, target)
    if note:
        err.print(note, highlight=False, soft_wrap=True)
    summaries = [summary(r) for r in results]
    if laps is not None:
        _add_iterations(summaries, results, laps)
    if json_:
        print(json.dumps({"results": summaries, "refused": refused}))
    else:
        from primuspp.commands.render import print_refused, results_table

        out.print(results_table(summaries, f"Simulated step time (results in {target}/)"))
        if laps is not None:
            out.print(_iterations_table(summaries, laps))
        print_refused(refused, summaries)
    if show:  # with --json, stdout holds the JSON document alone: the drawings go to stderr
        from primuspp.viz.terminal import render_timeline

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
    laps: dict[str, Any] | None = None,
) -> None:
    from primuspp.commands import model_mode as mm
    from primuspp.config.packaged import DEFAULT
    from primuspp.models.runs import ranked
    from primuspp.sim.output import results_dir, write_results
    from primuspp.viz.terminal import render_timeline

    setup = mm.build(flags, algo, pp, vpp, mb, max_nodes, costs_from)
    runs = ranked(setup.runs)
    target = out_dir or Path(DEFAULT.output_dir)
    with results_dir(target, [r.name for r in runs]):
        note = write_results([r.result for r in runs], target)
    if note:
        err.print(note, highlight=False, soft_wrap=True)
    records = [r.record() for r in runs]
    if laps is not None:
        _add_iterations(records, [r.result for r in runs], laps)
    if json_:
        print(json.dumps({**setup.header(), "results": records, "refused": setup.refused}))
    else:
        if setup.note:
            out.print(f"[dim]{setup.note}[/dim]", highlight=False, soft_wrap=True)
        out.print(mm.model_table(records, mm.title(setup, f"Projected (results in {target}/)")))
        mm.print_breakdown(records)
        if laps is not None:
            out.print(_iterations_table(records, laps))
        from primuspp.commands.render import print_refused

        print_refused(setup.refused)
    if show:
        console = err if json_ else out
        for r in runs:
            console.print(render_timeline(r.result.timeline, console.width))


def _iterations_request(
    iterations: int | None, post_validation: bool, optimizer_cost: float | None
) -> dict[str, Any] | None:
    """The --iterations request, or None when none of its flags is given; refused before anything runs."""
    from primuspp.errors import ConfigError

    if iterations is None:
        if post_validation:
            raise ConfigError(
                "--post-validation: overlaps consecutive iterations; give --iterations K with K >= 2",
                key="post-validation",
            )
        if optimizer_cost is None:
            return None
        iterations = 1
    elif post_validation and iterations < 2:
        raise ConfigError(
            f"--iterations {iterations}: --post-validation overlaps consecutive iterations; give K >= 2",
            key="iterations",
        )
    # None: the default (0; with --model the projection's DP sync + optimizer step)
    return {"iterations": iterations, "post_validation": post_validation, "optimizer_cost": optimizer_cost}


def _add_iterations(records: list[dict[str, Any]], results: list[SimResult], laps: dict[str, Any]) -> None:
    """Each record gains `iterations` (primuspp.sim.iterations.IterationRun.record). Without
    --optimizer-cost the optimizer step costs 0, or with --model what the projection adds to the pipeline
    (DP gradient sync + optimizer step), so that one iteration's step time is the projection's."""
    from primuspp.sim.iterations import DEFAULT_OPTIMIZER_COST, simulate_iterations

    for record, result in zip(records, results, strict=True):
        cost = laps["optimizer_cost"]
        if cost is None:
            cost = record.get("dp_sync_ms", 0.0) + record.get("optimizer_ms", DEFAULT_OPTIMIZER_COST)
        run = simulate_iterations(
            result.table,
            result.costs,
            laps["iterations"],
            post_validation=laps["post_validation"],
            optimizer_cost=cost,
        )
        record["iterations"] = run.record()


def _iterations_table(records: list[dict[str, Any]], laps: dict[str, Any]):
    from rich.table import Table

    from primuspp.sim.compare import ms as _num

    mode = (
        "post-validation (each rank steps after its own last node)"
        if laps["post_validation"]
        else "synchronous (every rank waits for the slowest, then steps)"
    )
    k = laps["iterations"]
    costs = {r["iterations"]["optimizer_cost"][0] for r in records}
    cost = f"{costs.pop():.4g} ms per rank" if len(costs) == 1 else "per run: its DP sync + optimizer"
    title = f"{k} iteration{'s' if k != 1 else ''}, {mode}, optimizer step {cost}"
    table = Table(title=title, title_justify="left")
    table.add_column("name", no_wrap=True)
    for col in ("first step ms", "steady step ms", "steady bubble", "vs first"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in records:
        it = r["iterations"]
        first, steady = it["first_step_time"], it["steady_step_time"]
        table.add_row(
            r["name"],
            _num(first),
            _num(steady),
            f"{it['steady_bubble_rate']:.2%}",
            f"{steady / first - 1:+.2%}" if first else "n/a",
        )
    return table
