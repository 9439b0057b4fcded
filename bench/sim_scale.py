"""Generation and simulation seconds at p=64, m=512 for each algorithm.

Usage: python bench/sim_scale.py [--pp 64] [--mb 512] [--repeat 3] [--algo NAME ...]
Prints the best of --repeat runs (this machine is shared and noisy) and the table size. `order s` is the
algorithm alone (its compute order); `build s` adds lowering and validation (`build_schedule`).
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.registry import ALGORITHMS, _resolve_params, build_schedule
from primuspp.errors import ScheduleError
from primuspp.gcpause import gc_paused
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


def order_only(name: str, pp: int, mb: int, costs: CostModel) -> None:
    algo = ALGORITHMS[name]
    params = _resolve_params(algo, {})
    with gc_paused():  # as build_schedule runs it
        algo.generate(GenerationRequest(pp, algo.vpp_default, mb, costs, params))


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
    for col in ("algorithm", "v", "nodes", "order s", "build s", "simulate s", "step time", "steady"):
        table.add_column(col, justify="left" if col == "algorithm" else "right")
    for name in args.algo or [a for a in ALGORITHMS if a not in SKIP]:
        algo = ALGORITHMS[name]
        build = partial(build_schedule, name, args.pp, None, args.mb, costs)
        try:
            gen_s, sched = best_of(args.repeat, build)
        except ScheduleError as err:
            table.add_row(name, "-", "-", "refused", str(err), "", "", "")
            continue
        order_s, _ = best_of(args.repeat, partial(order_only, name, args.pp, args.mb, costs))
        sim_s, result = best_of(args.repeat, partial(simulate, sched, costs))
        table.add_row(
            name,
            str(algo.vpp_default),
            f"{sched.num_nodes():,}",
            f"{order_s:.2f}",
            f"{gen_s:.2f}",
            f"{sim_s:.2f}",
            f"{result.metrics.step_time:,.0f}",
            f"{result.metrics.steady_bubble_rate:.2%}",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
