"""Side by side with AMD Primus: its own generators and simulator against build_schedule + simulate.

Usage: python bench/vs_primus.py --mirror GIT_DIR [--pp 16 32 64] [--mb-per-pp 8] [--algo NAME ...]
       [--repeat N] [--sample-time SECONDS] [--warmup SECONDS] [--interleave]
       python bench/vs_primus.py --primus DIR ...     (DIR holds an extracted `primus/` tree)

Primus (github.com/AMD-AGI/Primus) is not part of this repository: `--mirror` names a clone (bare or not);
its `primus/core/pipeline_parallel`, `primus/core/utils` and
`primus/core/projection/performance_projection/simulator.py` are extracted with `git archive` into a
temporary directory and imported from there, unmodified. Only the `primus` package `__init__` files above
them are skipped (they start the training launcher): the modules run as shipped.

For each algorithm both have, each p and m = mb-per-pp * p: Primus' `generate_schedule_table()` plus its
`SchedulerSimulationRunner.simulate_scheduler_table()`, and ours `build_schedule` (generate, lower,
validate) plus `simulate`, F = B = W = 1000 per rank (Primus: per chunk // v), best of --repeat, CPU seconds
of this process (the machine is shared: wall time would measure the other sessions). Prints both, the
speed-up, both step times (equal where the schedules agree) and which branch of our search ran (`full` or
`fast`, see `primuspp.algorithms.effort`; `-` where the algorithm does not search), and the load average.

`--warmup SECONDS` (default 0: none, as the cold figures of docs/design.md were taken) first runs each side
of each cell untimed until that much CPU time has passed (at least once). On this machine a process's first
runs of a path are slower than its later ones (zbv at p = 16: 12-25 ms for the first few, about 7.5 ms
steady): the virtual machine backs memory on first use (a never-used page costs about 10 us to touch, a
reused one 1.6 us; docs/design.md), which a best of 5 does not always leave behind; a warm-up times both
sides in their steady state, as a sweep of many layouts runs.

`--interleave` alternates the two sides run by run (ours, Primus', ours, ...: --repeat pairs) instead of
timing ours --repeat times and then Primus' --repeat times, each side's best still taken: on a machine
whose speed drifts over seconds (another tenant) both sides then sample the same stretch of it.

`--sample-time SECONDS` (default 0: one run a sample) makes each of the --repeat timed samples of a side run
it again and again until SECONDS of CPU time have passed and take the mean per run (pyperf's loops); the
best sample is reported. With one run a sample, ours (2-10 ms at p = 16) is timed over a stretch of a few
tens of milliseconds and Primus' (0.05-0.4 s) over a second or more: a burst of another tenant's work can
cover all of ours and only one of Primus' runs, and on this machine such bursts moved single cells at p = 16
by a fifth from one run of the bench to the next. With equal sample times both sides are exposed alike; a
run of ours stays one build and one simulation from scratch (`forget()` before each, outside the timing).

The process keeps the memory it frees for reuse (`commands.process.keep_freed_memory`), as the `primuspp`
command's offline verbs do; both sides run in it. `--default-heap` leaves glibc's malloc as it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import subprocess
import sys
import tempfile
import time
import types
from functools import partial

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.search.floor import forget
from primuspp.commands.process import keep_freed_memory
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate

#: ours -> (Primus' name in its factory, v)
PAIRS = {
    "1f1b": ("1f1b", 1),
    "1f1b-interleaved": ("1f1b-interleaved", 2),
    "zero-bubble": ("zero-bubble", 1),
    "zero-bubble-heuristic": ("zero-bubble-heuristic", 1),
    "zbv": ("zbv-formatted", 2),
    "v-half": ("v-half", 2),
    "v-min": ("v-min", 2),
}
PATHS = (
    "primus/core/pipeline_parallel",
    "primus/core/utils",
    "primus/core/projection/performance_projection/simulator.py",
)
TIME = 1000.0
COLUMNS = ("algorithm", "p", "m", "Primus s", "primuspp s", "speed-up", "Primus step", "our step", "search")


def extract(mirror: str, into: str) -> None:
    archive = subprocess.run(
        ["git", f"--git-dir={mirror}", "archive", "HEAD", *PATHS], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def load(root: str):
    """(factory module, simulator module) imported from `root`, the packages above them left unrun."""
    for name in (
        "primus",
        "primus.core",
        "primus.core.projection",
        "primus.core.projection.performance_projection",
    ):
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = module
    factory = importlib.import_module("primus.core.pipeline_parallel.scheduler.schedule_table_factory")
    simulator = importlib.import_module("primus.core.projection.performance_projection.simulator")
    return factory, simulator


def primus_run(factory, simulator, name: str, p: int, v: int, m: int) -> float:
    """Primus' step time for one schedule (generate + simulate, its own code)."""
    cls = factory.pp_algorithm_map[name]
    kwargs = {"memory_config": "half" if name == "v-half" else "min"} if name in ("v-half", "v-min") else {}
    config = {"fwd_time": TIME, "bwd_time": TIME, "wgrad_time": TIME}
    runner = simulator.SchedulerSimulationRunner(config)
    with contextlib.redirect_stdout(io.StringIO()):
        table = cls(p, v, m, **kwargs).generate_schedule_table()
        result = runner.simulate_scheduler_table(table, {"pp_size": p, "vpp_size": v, "micro_batches": m})
    return max(rank["total"] for rank in result)


def ours_run(name: str, p: int, m: int) -> tuple[float, str]:
    """Our step time and the search branch that ran (`full`/`fast` of `report["effort"]`, `-` for none)."""
    costs = CostModel(TIME, TIME, TIME)
    table = build_schedule(name, p, None, m, costs)
    effort = str(table.params.get("report", {}).get("effort", "-")).split(" ", 1)[0].rstrip(";")
    return simulate(table, costs).metrics.step_time, effort


def warm(seconds: float, fn) -> None:
    """Run `fn` untimed until `seconds` of CPU time have passed (nothing where 0)."""
    start = time.process_time()
    while seconds > 0:
        forget()
        fn()
        if time.process_time() - start >= seconds:
            break


def timed(fn, sample: float = 0.0) -> tuple[float, object]:
    """(CPU seconds per run, value) of one sample of `fn`: one run, or (`sample` > 0) as many runs as take
    `sample` CPU seconds, their mean (pyperf's loops: a side whose run is short is then timed over as long a
    stretch as a side whose run is long, so a burst of another tenant's work weighs on both alike)."""
    total, runs = 0.0, 0
    while True:
        forget()  # the floored generators' memos: each run generates (not timed)
        start = time.process_time()
        value = fn()
        total += time.process_time() - start
        runs += 1
        if total >= sample:
            return total / runs, value


def best(repeat: int, *fns, sample: float = 0.0) -> list[tuple[float, object]]:
    """Per function, (its least CPU seconds per run, its last value) over `repeat` rounds of one sample
    each (`timed`); each round runs the functions one after another (`--interleave` passes both sides, else
    one side at a time)."""
    runs = [[timed(fn, sample) for fn in fns] for _ in range(repeat)]
    return [(min(t for t, _ in col), col[-1][1]) for col in zip(*runs, strict=True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--mirror", help="a git clone of AMD-AGI/Primus (its git directory)")
    src.add_argument("--primus", help="a directory holding an extracted primus/ tree")
    ap.add_argument("--pp", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--mb-per-pp", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--algo", action="append", choices=list(PAIRS))
    ap.add_argument("--warmup", type=float, default=0.0, help="untimed CPU seconds per side and cell first")
    ap.add_argument("--interleave", action="store_true", help="alternate the two sides run by run")
    ap.add_argument("--sample-time", type=float, default=0.0, help="CPU s of runs a sample (0: one)")
    ap.add_argument("--default-heap", action="store_true", help="malloc as it starts (not as the CLI)")
    args = ap.parse_args()
    kept = False if args.default_heap else keep_freed_memory()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.primus
        if args.mirror:
            extract(args.mirror, tmp)
            root = tmp
        factory, simulator = load(root)
        ours_run("1f1b", 2, 2)  # warm up: lazy imports (numpy) are not part of a run
        table = Table(title=f"primuspp vs Primus: generate + simulate, CPU s (best of {args.repeat})")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "algorithm" else "right")
        worst = float("inf")
        for p in args.pp:
            m = args.mb_per_pp * p
            for ours in args.algo or PAIRS:
                theirs, v = PAIRS[ours]
                run_ours = partial(ours_run, ours, p, m)
                run_theirs = partial(primus_run, factory, simulator, theirs, p, v, m)
                # interleaved: both sides each round; else all of ours, then all of Primus'
                rounds = [(run_ours, run_theirs)] if args.interleave else [(run_ours,), (run_theirs,)]
                timings = []
                for sides in rounds:
                    for fn in sides:
                        warm(args.warmup, fn)
                    timings += best(args.repeat, *sides, sample=args.sample_time)
                (t_ours, (step_ours, search)), (t_theirs, step_theirs) = timings
                ratio = t_theirs / t_ours if t_ours > 0 else float("inf")
                worst = min(worst, ratio)
                table.add_row(
                    ours,
                    str(p),
                    str(m),
                    f"{t_theirs:.2f}",
                    f"{t_ours:.2f}",
                    f"{ratio:.1f}x",
                    f"{step_theirs:,.0f}",
                    f"{step_ours:,.0f}",
                    search,
                )
        Console(width=130).print(table)
    warmed = f"; {args.warmup:g} s warm-up per side and cell" if args.warmup else ""
    warmed += "; the two sides interleaved run by run" if args.interleave else ""
    warmed += f"; each sample {args.sample_time:g} CPU s of runs, their mean" if args.sample_time else ""
    warmed += "; freed memory kept for reuse (as the CLI)" if kept else "; malloc's defaults"
    print(f"smallest speed-up {worst:.1f}x (target 20x); load average {os.getloadavg()[0]:.2f}{warmed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
