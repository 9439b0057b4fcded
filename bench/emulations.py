"""Several emulated runs in one launch (the benches' form of `runtime.emulate.run_emulation`: one process
group for all of them saves the start-up per run), and a run's steady step time."""

from __future__ import annotations

import statistics

from primuspp.runtime.emulate import (
    EmulatedRun,
    EmulationSpec,
    RankIterations,
    _emulated_run,
    emulate_iterations_worker,
)
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.trace.metrics import timeline_metrics


def emulate_many_worker(ctx: WorkerContext, specs: list[EmulationSpec]) -> list[RankIterations]:
    return [emulate_iterations_worker(ctx, spec) for spec in specs]


def run_emulations(specs: list[EmulationSpec], names: list[str] | None = None) -> list[EmulatedRun] | None:
    """Several emulations over the same number of ranks, in one launch."""
    if not specs:
        return []
    pp = specs[0].table.pp
    if any(spec.table.pp != pp for spec in specs):
        raise ValueError("run_emulations: every table must have the same pp")
    results = launch(emulate_many_worker, pp, specs)
    if results is None:
        return None
    names = names or [spec.table.algorithm for spec in specs]
    return [
        _emulated_run(spec, [per_rank[i] for per_rank in results], names[i]) for i, spec in enumerate(specs)
    ]


def steady_step_time(run: EmulatedRun) -> float:
    """Median step time, leaving out the first step (warm-up) when there are more than two."""
    times = [timeline_metrics(tl).step_time for tl in run.timelines]
    return statistics.median(times[1:] if len(times) > 2 else times)
