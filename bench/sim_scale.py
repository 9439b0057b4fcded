"""Generation (order + lowering + validation) and simulation seconds at p=64, m=512 for each algorithm.

Usage: python bench/sim_scale.py [--pp 64] [--mb 512] [--repeat 3] [--algo NAME ...]
Prints the best of --repeat runs (this machine is shared and noisy) and the table size.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate

SKIP = {"zb-optimal"}  # an exact MILP: timed by its own time limit, not a generator


def best_of(repeat: int, fn):
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=64)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--algo", action="append")
    args = ap.parse_args()
    costs = CostModel(1000, 1000, 1000)
    table = Table(
        title=f"primuspp scale: p={args.pp}, m={args.mb} (best of {args.repeat})", title_justify="left"
    )
    for col in ("algorithm", "v", "nodes", "generate s", "simulate s", "step time", "bubble"):
        table.add_column(col, justify="left" if col == "algorithm" else "right")
    for name in args.algo or [a for a in ALGORITHMS if a not in SKIP]:
        algo = ALGORITHMS[name]
        try:
            gen_s, sched = best_of(
                args.repeat, lambda name=name: build_schedule(name, args.pp, None, args.mb, costs)
            )
        except ScheduleError as err:
            table.add_row(name, "-", "-", "refused", str(err), "", "")
            continue
        sim_s, result = best_of(args.repeat, lambda sched=sched: simulate(sched, costs))
        table.add_row(
            name,
            str(algo.vpp_default),
            f"{sched.num_nodes():,}",
            f"{gen_s:.2f}",
            f"{sim_s:.2f}",
            f"{result.metrics.step_time:,.0f}",
            f"{result.metrics.bubble_rate:.2%}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
