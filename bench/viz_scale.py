"""Seconds to render a p=64, m=512 timeline to the HTML page, and the page's size.

Usage: python bench/viz_scale.py [--pp 64] [--mb 512] [--algo NAME ...]
Besides the registry's algorithms it times `v-shape (synthetic)`: a V-placement order (every F of chunk 0,
then of chunk 1, then B and W) with the same boxes per rank as zbv (2 chunks x m x F/B/W) and the same
memory events, for a zbv-sized figure where zbv is not in the build. Simulation time is not counted.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import v_shape
from primuspp.schedule.table import ScheduleTable
from primuspp.sim import simulate
from primuspp.viz.html import timeline_page
from primuspp.viz.sources import Source


def v_shape_table(pp: int, mb: int) -> ScheduleTable:
    placement = v_shape(pp)
    order = []
    for r in range(pp):
        down, up = r, 2 * pp - 1 - r
        nodes = [Node(NodeKind.F, m, down) for m in range(mb)] + [Node(NodeKind.F, m, up) for m in range(mb)]
        nodes += [Node(NodeKind.B, m, up) for m in range(mb)] + [Node(NodeKind.B, m, down) for m in range(mb)]
        nodes += [Node(NodeKind.W, m, s) for s in (up, down) for m in range(mb)]
        order.append(nodes)
    return ScheduleTable(placement, mb, lower_comms(placement, mb, order), "v-shape (synthetic)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=64)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--algo", action="append")
    args = ap.parse_args()
    costs = CostModel(1000, 1000, 1000)
    table = Table(title=f"primuspp viz scale: p={args.pp}, m={args.mb}", title_justify="left")
    for col in ("schedule", "v", "boxes", "render s", "page MB"):
        table.add_column(col, justify="left" if col == "schedule" else "right")
    names = args.algo or ["1f1b", "zero-bubble", "zbv", "1f1b-interleaved"]
    jobs = [
        (n, (lambda n=n: build_schedule(n, args.pp, 3 if n == "1f1b-interleaved" else None, args.mb, costs)))
        for n in names
        if n in ALGORITHMS
    ]
    jobs.append(("v-shape (synthetic)", lambda: v_shape_table(args.pp, args.mb)))
    for name, make in jobs:
        try:
            sched = make()
        except ScheduleError as err:
            table.add_row(name, "-", "-", "refused", str(err))
            continue
        timeline = simulate(sched, costs).timeline
        start = time.perf_counter()
        html = timeline_page([Source(name, "bench", (timeline,))])
        seconds = time.perf_counter() - start
        boxes = sum(len(rt.intervals) for rt in timeline.ranks)
        table.add_row(name, str(sched.vpp), f"{boxes:,}", f"{seconds:.2f}", f"{len(html.encode()) / 1e6:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
