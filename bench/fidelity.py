"""Simulator fidelity against the emulated cluster: emulated step time vs simulated step time.

    python bench/fidelity.py [--pp 4 8] [--factors 2 4] [--fwd 20 --bwd 20 --wgrad 20] [--steps 4]
                             [--algo NAME ...] [--json out.json]

For every registered algorithm (or the `--algo` ones) at each p and m = factor x p, the table is built with
the cost model (ms), run on the emulated cluster (`primuspp.runtime.emulate`: real runner, one process per
rank, real gloo p2p, compute replaced by waits of the cost-model durations) and simulated. The emulated
step time is the median over the steps after the first (warm-up). `--fwd --bwd --wgrad` are the durations
of one compute node (default 20 ms each): an algorithm with v chunks per rank gets the cost model
F = v x fwd, ... (a rank's share), so every node of every algorithm lasts the same. Two predictions are
reported:

- `sim`: the cost model as given (comm 0);
- `sim+comm`: the same with the p2p latency measured from the emulated run itself (median delay from a
  producer's end to a waiting consumer's start on another rank, `calibrate._comm_latency`), i.e. what
  `primuspp simulate --costs-from` would add.

error % = (emulated - simulated) / simulated. One launch per p runs every case in turn, so all ranks share
the machine with nothing of ours but themselves; the other load on the machine is not ours to control
(report the load average with the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import PrimusppError
from primuspp.runtime.emulate import EmulationSpec, run_emulations
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import _comm_latency
from primuspp.trace.metrics import timeline_metrics


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
    ap.add_argument("--algo", nargs="+", default=None, help="default: every registered algorithm")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the first step is warm-up)")
    algos = args.algo or list(ALGORITHMS)
    console = Console(width=150)
    rows = []
    started = time.time()
    load = os.getloadavg()
    for p in args.pp:
        cases, specs = [], []
        for name in algos:
            for f in args.factors:
                m = f * p
                costs = node_costs(name, args)
                try:
                    table = build_schedule(name, p, None, m, costs)
                except PrimusppError as err:
                    console.print(f"[dim]{name} p={p} m={m}: refused: {err}[/dim]")
                    continue
                cases.append((name, p, m, table, costs))
        specs = [EmulationSpec(c[3], c[4], steps=args.steps) for _ in range(args.repeat) for c in cases]
        console.print(f"p={p}: emulating {len(specs)} runs on {p} processes ...")
        all_runs = run_emulations(specs)
        assert all_runs is not None
        for i, (name, p_, m, table, costs) in enumerate(cases):
            runs = all_runs[i :: len(cases)]
            steady = [tl for run in runs for tl in run.timelines[1:]]
            # the median over the repeats of each run's median steady step
            emulated = statistics.median(
                statistics.median(timeline_metrics(tl).step_time for tl in run.timelines[1:]) for run in runs
            )
            comm, comm_n = _comm_latency(steady)
            sim = simulate(table, costs).metrics.step_time
            sim_comm = simulate(table, replace(costs, comm=comm)).metrics.step_time
            rows.append(
                {
                    "algorithm": name,
                    "pp": p_,
                    "vpp": table.vpp,
                    "micro_batches": m,
                    "sim_ms": sim,
                    "comm_ms": comm,
                    "comm_samples": comm_n,
                    "sim_comm_ms": sim_comm,
                    "emulated_ms": emulated,
                    "emulated_steps_ms": [
                        [timeline_metrics(tl).step_time for tl in r.timelines] for r in runs
                    ],
                    "error": emulated / sim - 1,
                    "error_comm": emulated / sim_comm - 1,
                }
            )
    t = Table(
        title=f"Emulated vs simulated step time (each node F={args.fwd:g} B={args.bwd:g} W={args.wgrad:g} "
        f"ms, {args.steps} steps, median after the first; load average at start {load[0]:.2f})",
        title_justify="left",
    )
    for col in (
        "algorithm",
        "p",
        "v",
        "m",
        "sim ms",
        "emulated ms",
        "error",
        "p2p ms",
        "sim+comm ms",
        "error",
    ):
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
            f"{r['comm_ms']:.2f}",
            f"{r['sim_comm_ms']:,.1f}",
            _pct(r["error_comm"]),
        )
    console.print(t)
    errs = [abs(r["error"]) for r in rows]
    errs_c = [abs(r["error_comm"]) for r in rows]
    console.print(
        f"{len(rows)} rows; |error| median {statistics.median(errs):.2%}, max {max(errs):.2%}; with measured "
        f"p2p latency: median {statistics.median(errs_c):.2%}, max {max(errs_c):.2%}; rows within 5 %: "
        f"{sum(e <= 0.05 for e in errs)}/{len(rows)} (sim), {sum(e <= 0.05 for e in errs_c)}/{len(rows)} "
        f"(sim+comm); {time.time() - started:.0f} s; load average now {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"node_ms": [args.fwd, args.bwd, args.wgrad], "load_average": load, "rows": rows},
                fh,
                indent=1,
            )


def node_costs(name: str, args: argparse.Namespace) -> CostModel:
    v = ALGORITHMS[name].vpp_default
    return CostModel(v * args.fwd, v * args.bwd, v * args.wgrad, fb_overlap=args.fb_overlap)


def _pct(x: float) -> str:
    return f"{x:+.2%}"


if __name__ == "__main__":
    main()
