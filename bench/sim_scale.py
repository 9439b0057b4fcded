"""Generation and simulation seconds at p=64, m=512 for each algorithm.

Usage: python bench/sim_scale.py [--pp 64] [--mb 512] [--repeat 3] [--algo NAME ...]
       python bench/sim_scale.py --growth [--algo zbv] [--sizes 32x256 64x512 128x1024 256x2048]
Prints the best of --repeat runs (this machine is shared and noisy) and the table size. `order s` is the
algorithm alone (its compute order); `build s` adds lowering and validation (`build_schedule`); `simulate s`
and `sim cpu s` are the simulation alone (wall, CPU); `total cpu s` is build + simulate in CPU seconds of
this process (less disturbed by other work than wall time).
`--growth` runs each size in a fresh process (one run each) and prints build + simulate seconds (and the
simulation's alone), the peak resident memory (RSS) of that process (and after the build, before the
simulation), and the growth exponents of the times in p*m (least squares on logs). `--pages` says under
which numpy huge-page advice those processes run: `cli` as the `primuspp` command runs (advice off unless
the environment names a choice, see `commands/process.py`), `numpy` with numpy's own default, or
`both` (each size twice; the table's `pages` column says which). In `cli` mode the process also keeps the
memory it frees for reuse, as the command's offline verbs do (`commands/process.py`); so does the in-process
table, unless `--default-heap`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from functools import partial

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.registry import ALGORITHMS, _resolve_params, build_schedule
from primuspp.algorithms.search.floor import forget
from primuspp.commands.process import HUGEPAGE_ADVICE, keep_freed_memory
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate

SKIP = {"zb-optimal"}  # an exact MILP: timed by its own time limit, not a generator


def best_of(repeat: int, fn, cpu: list[float] | None = None):
    """Best wall seconds of `repeat` runs and the last value; the best CPU seconds go to `cpu[0]`."""
    best, best_cpu, value = float("inf"), float("inf"), None
    for _ in range(repeat):
        forget()  # the floored generators' memos: each run generates
        start, start_cpu = time.perf_counter(), time.process_time()
        value = fn()
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    if cpu is not None:
        cpu[:] = [best_cpu]
    return best, value


def order_only(name: str, pp: int, mb: int, costs: CostModel) -> None:
    algo = ALGORITHMS[name]
    params = _resolve_params(algo, {})
    algo.generate(GenerationRequest(pp, algo.vpp_default, mb, costs, params))


def one_run(name: str, pp: int, mb: int) -> dict:
    """One build + simulate in this process: wall and CPU seconds, node count, peak RSS."""
    costs = CostModel(1000, 1000, 1000)
    wall, cpu = time.perf_counter(), time.process_time()
    sched = build_schedule(name, pp, None, mb, costs, max_nodes=10**9)
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sim_cpu = time.process_time()
    simulate(sched, costs)
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "sim_cpu_s": time.process_time() - sim_cpu,
        "nodes": sched.num_nodes(),
        "build_rss_mb": build_rss,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(seconds) on log(p*m)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(max(y, 1e-6)) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _child_env(pages: str) -> dict[str, str]:
    """The environment of a growth run: `cli` as `primuspp` sets it, `numpy` this one as it is."""
    env = dict(os.environ)
    if pages == "cli":
        env.setdefault(*HUGEPAGE_ADVICE)
    return env


def growth(names: list[str], sizes: list[str], pages: str) -> None:
    table = Table(title="growth: build + simulate, one fresh process per size", title_justify="left")
    cols = (
        "algorithm",
        "pages",
        "p",
        "m",
        "nodes",
        "wall s",
        "cpu s",
        "sim cpu s",
        "peak RSS MB",
        "after build MB",
    )
    for col in (*cols, "exponent"):
        table.add_column(col, justify="left" if col in ("algorithm", "pages") else "right")
    runs = [(name, mode) for name in names for mode in (("cli", "numpy") if pages == "both" else (pages,))]
    for name, mode in runs:
        points, sim_points = [], []
        for size in sizes:
            pp, mb = (int(x) for x in size.split("x"))
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, str(pp), str(mb), mode],
                check=True,
                capture_output=True,
                text=True,
                env=_child_env(mode),
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            points.append((pp * mb, got["cpu_s"]))
            sim_points.append((pp * mb, got["sim_cpu_s"]))
            table.add_row(
                name,
                mode,
                str(pp),
                str(mb),
                f"{got['nodes']:,}",
                f"{got['wall_s']:.2f}",
                f"{got['cpu_s']:.2f}",
                f"{got['sim_cpu_s']:.2f}",
                f"{got['rss_mb']:.0f}",
                f"{got['build_rss_mb']:.0f}",
                "",
            )
        blank = [""] * (len(cols) - 2)
        table.add_row(name, mode, *blank, f"{_slope(points):.2f} (cpu s vs p*m)")
        table.add_row(name, mode, *blank, f"{_slope(sim_points):.2f} (sim cpu s vs p*m)")
    Console(width=120).print(table)
    print(f"load average {os.getloadavg()[0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=64)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--algo", action="append")
    ap.add_argument("--growth", action="store_true", help="time and peak RSS over --sizes, fresh processes")
    ap.add_argument("--sizes", nargs="+", default=["32x256", "64x512", "128x1024", "256x2048"])
    ap.add_argument(
        "--pages", choices=("cli", "numpy", "both"), default="both", help="numpy's huge-page advice"
    )
    ap.add_argument("--default-heap", action="store_true", help="malloc as it starts (not as the CLI)")
    ap.add_argument("--one", nargs=4, metavar=("ALGO", "PP", "MB", "PAGES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        if args.one[3] == "cli":
            keep_freed_memory()
        print(json.dumps(one_run(args.one[0], int(args.one[1]), int(args.one[2]))))
        return
    if args.growth:
        growth(args.algo or ["zbv"], args.sizes, args.pages)
        return
    kept = False if args.default_heap else keep_freed_memory()
    costs = CostModel(1000, 1000, 1000)
    table = Table(
        title=f"primuspp scale: p={args.pp}, m={args.mb} (best of {args.repeat})", title_justify="left"
    )
    cols = (
        "algorithm",
        "v",
        "nodes",
        "order s",
        "build s",
        "simulate s",
        "sim cpu s",
        "total cpu s",
        "step",
        "steady",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "algorithm" else "right")
    for name in args.algo or [a for a in ALGORITHMS if a not in SKIP]:
        algo = ALGORITHMS[name]
        build = partial(build_schedule, name, args.pp, None, args.mb, costs)
        try:
            gen_s, sched = best_of(args.repeat, build)
        except ScheduleError as err:
            table.add_row(name, "-", "-", "refused", str(err), "", "", "", "", "")
            continue
        order_s, _ = best_of(args.repeat, partial(order_only, name, args.pp, args.mb, costs))
        sim_cpu: list[float] = []
        sim_s, result = best_of(args.repeat, partial(simulate, sched, costs), sim_cpu)
        forget()
        cpu = time.process_time()
        simulate(build(), costs)
        cpu = time.process_time() - cpu
        table.add_row(
            name,
            str(algo.vpp_default),
            f"{sched.num_nodes():,}",
            f"{order_s:.2f}",
            f"{gen_s:.2f}",
            f"{sim_s:.3f}",
            f"{sim_cpu[0]:.3f}",
            f"{cpu:.2f}",
            f"{result.metrics.step_time:,.0f}",
            f"{result.metrics.steady_bubble_rate:.2%}",
        )
    Console(width=120).print(table)
    heap = "freed memory kept for reuse (as the CLI)" if kept else "malloc's defaults"
    print(f"load average {os.getloadavg()[0]:.2f}; {heap}")


if __name__ == "__main__":
    main()
