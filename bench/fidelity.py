"""Simulator fidelity against the emulated cluster: emulated step time vs simulated step time.

    python bench/fidelity.py [--pp 4 8] [--factors 2 4] [--fwd 20 --bwd 20 --wgrad 20] [--steps 4]
                             [--repeat 1] [--quiet-below 1.5] [--algo NAME ...] [--json out.json]

For every registered algorithm (or the `--algo` ones) at each p and m = factor x p, the table is built with
the cost model (ms), run on the emulated cluster (`primuspp.runtime.emulate`: real runner, one process per
rank, real gloo p2p, compute replaced by waits of the cost-model durations) and simulated.
`--fwd --bwd --wgrad` are the durations of one compute node (default 20 ms each): an algorithm with v
chunks per rank gets the cost model F = v x fwd, ... (a rank's share), so every node of every algorithm
lasts the same.

Emulated step time: the median over the steps after the first (warm-up), median over `--repeat` runs
(`best`: the shortest steady step seen, what the run gives when nothing else on the machine delays it).
Two predictions:

- `sim`: the cost model as given (comm 0);
- `sim+comm`: the same with the p2p latency measured from the emulated run itself (median delay from a
  producer's end to a waiting consumer's start on another rank, `calibrate._comm_latency`), i.e. what
  `primuspp simulate --costs-from` would add.

error = emulated / simulated - 1. One launch per p runs every case in turn. The emulated ranks sleep, but
each node still needs the CPU briefly (runner, gloo, wake-up): on a small shared machine other load delays
them, so the load average is reported with the numbers and `--quiet-below X` waits (up to 10 minutes) for
the 1-minute load average to drop below X before each p.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace

from emulations import run_emulations
from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import PrimusppError
from primuspp.runtime.emulate import EmulationSpec
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import _comm_latency
from primuspp.trace.metrics import timeline_metrics


def node_costs(name: str, args: argparse.Namespace) -> CostModel:
    v = ALGORITHMS[name].vpp_default
    return CostModel(v * args.fwd, v * args.bwd, v * args.wgrad, fb_overlap=args.fb_overlap)


def wait_for_quiet(limit: float | None, console: Console) -> None:
    if limit is None:
        return
    deadline = time.time() + 600
    while os.getloadavg()[0] >= limit and time.time() < deadline:
        console.print(f"[dim]load average {os.getloadavg()[0]:.2f} >= {limit}: waiting[/dim]")
        time.sleep(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--factors", type=int, nargs="+", default=[2, 4], help="m = factor x p")
    ap.add_argument("--fwd", type=float, default=20.0)
    ap.add_argument("--bwd", type=float, default=20.0)
    ap.add_argument("--wgrad", type=float, default=20.0)
    ap.add_argument("--fb-overlap", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="run every case this many times (interleaved)")
    ap.add_argument("--quiet-below", type=float, default=None, help="wait for a load average below this")
    ap.add_argument("--algo", nargs="+", default=None, help="default: every registered algorithm")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is warm-up)")
    algos = args.algo or list(ALGORITHMS)
    console = Console(width=150)
    rows = []
    started = time.time()
    loads = {}
    for p in args.pp:
        cases = []
        for name in algos:
            for f in args.factors:
                costs = node_costs(name, args)
                try:
                    cases.append((name, build_schedule(name, p, None, f * p, costs), costs))
                except PrimusppError as err:
                    console.print(f"[dim]{name} p={p} m={f * p}: refused: {err}[/dim]")
        specs = [
            EmulationSpec(table, costs, steps=args.steps)
            for _ in range(args.repeat)
            for _, table, costs in cases
        ]
        wait_for_quiet(args.quiet_below, console)
        before = os.getloadavg()[0]
        console.print(f"p={p}: emulating {len(specs)} runs on {p} processes (load average {before:.2f}) ...")
        all_runs = run_emulations(specs)
        assert all_runs is not None
        loads[p] = (before, os.getloadavg()[0])
        for i, (name, table, costs) in enumerate(cases):
            runs = all_runs[i :: len(cases)]
            steps = [[timeline_metrics(tl).step_time for tl in run.timelines] for run in runs]
            emulated = statistics.median(statistics.median(s[1:]) for s in steps)
            best = min(t for s in steps for t in s[1:])
            comm, comm_n = _comm_latency([tl for run in runs for tl in run.timelines[1:]])
            sim = simulate(table, costs).metrics.step_time
            sim_comm = simulate(table, replace(costs, comm=comm)).metrics.step_time
            rows.append(
                {
                    "algorithm": name,
                    "pp": p,
                    "vpp": table.vpp,
                    "micro_batches": table.num_microbatches,
                    "sim_ms": sim,
                    "emulated_ms": emulated,
                    "best_ms": best,
                    "comm_ms": comm,
                    "comm_samples": comm_n,
                    "sim_comm_ms": sim_comm,
                    "emulated_steps_ms": steps,
                    "error": emulated / sim - 1,
                    "error_best": best / sim - 1,
                    "error_comm": emulated / sim_comm - 1,
                }
            )
    load_text = ", ".join(f"p={p}: {a:.2f} -> {b:.2f}" for p, (a, b) in loads.items())
    t = Table(
        title=f"Emulated vs simulated step time (each node F={args.fwd:g} B={args.bwd:g} W={args.wgrad:g} "
        f"ms; {args.steps} steps, median after the first, median of {args.repeat} run(s); load average "
        f"{load_text})",
        title_justify="left",
    )
    cols = ("algorithm", "p", "v", "m", "sim ms", "emulated ms", "error", "best ms", "error", "p2p ms")
    for col in (*cols, "sim+comm ms", "error"):
        t.add_column(col, justify="left" if col == "algorithm" else "right")
    for r in rows:
        t.add_row(
            r["algorithm"],
            str(r["pp"]),
            str(r["vpp"]),
            str(r["micro_batches"]),
            f"{r['sim_ms']:,.1f}",
            f"{r['emulated_ms']:,.1f}",
            _pct(r["error"]),
            f"{r['best_ms']:,.1f}",
            _pct(r["error_best"]),
            f"{r['comm_ms']:.2f}",
            f"{r['sim_comm_ms']:,.1f}",
            _pct(r["error_comm"]),
        )
    console.print(t)
    for key, label in (("error", "median"), ("error_best", "best"), ("error_comm", "median vs sim+comm")):
        errs = [abs(r[key]) for r in rows]
        console.print(
            f"{label}: |error| median {statistics.median(errs):.2%}, max {max(errs):.2%}, "
            f"rows within 5 %: {sum(e <= 0.05 for e in errs)}/{len(rows)}"
        )
    console.print(f"{time.time() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            doc = {"node_ms": [args.fwd, args.bwd, args.wgrad], "load_average": loads, "rows": rows}
            json.dump(doc, fh, indent=1)


def _pct(x: float) -> str:
    return f"{x:+.2%}"


if __name__ == "__main__":
    main()
