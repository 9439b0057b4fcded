"""Post-validation on the emulated cluster: measured vs simulated steady step time, synchronous and
post-validated, for zbv, zb-h2 and 1f1b.

    python bench/post_validation.py [--pp 4 8] [--factor 4] [--node 40] [--optimizer 0] [--steps 5] [--spin S]
                                    [--algo zbv zb-h2 1f1b] [--quiet-below 1.5] [--json out.json]

Each case (algorithm, p, m = factor x p) runs `--steps` iterations on the emulated cluster twice
(`primuspp.runtime.emulate`: one process per rank, real gloo p2p, every compute node a wait of its cost):
synchronous (after each step a barrier stands for the grad-norm all-reduce, then every rank waits
`--optimizer` ms) and post-validated (each rank waits its optimizer step as soon as its own last node is
done, posts the validation all-reduce asynchronously and starts the next step). The same iterations are laid
out by the simulator (`primuspp.sim.iterations`) with comm 0 (`sim`) and with the p2p latency measured in the
emulated run itself (`sim+comm`: the median delay from a producer's end to a waiting consumer's start on
another rank, as `--costs-from` measures it). Both report the steady step time (simulated: (end of the
last iteration - end of the first) / (steps - 1); measured: the median time from one iteration's end to the
next, which one stalled step does not move) and the steady bubble = 1 - mean over ranks of (node +
optimizer time per step) / steady step (docs/guide.md).

Every compute node lasts `--node` ms (an algorithm with v chunks per rank gets F = B = W = v x node, a rank's
share), so waits dominate what the runner and gloo add per node even on a small shared machine; that
overhead and the p2p latency still show as bubble, more so under load: the load average is printed with
the figures, and `--quiet-below X` waits (up to 10 minutes) for it to drop below X before each p. One launch
per p runs every case.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from emulations import run_emulations
from fidelity import wait_for_quiet  # bench/ is on sys.path when a bench runs as a script
from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.runtime.emulate import SPIN_S, EmulationSpec
from primuspp.schedule.costs import CostModel
from primuspp.sim.calibrate import _comm_latency
from primuspp.sim.iterations import simulate_iterations

MODES = (("synchronous", False), ("post-validation", True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--factor", type=int, default=4, help="m = factor x p")
    ap.add_argument("--node", type=float, default=40.0, help="ms of every compute node (F = B = W)")
    ap.add_argument("--optimizer", type=float, default=0.0, help="ms of each rank's optimizer step")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--spin", type=float, default=SPIN_S, help="s of each wait spun rather than slept")
    ap.add_argument("--algo", nargs="+", default=["zbv", "zb-h2", "1f1b"])
    ap.add_argument("--quiet-below", type=float, default=None, help="wait for a load average below this")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (the steady step is measured between the first and the last)")
    console = Console(width=150)
    rows = []
    loads = {}
    started = time.time()
    for p in args.pp:
        cases = []
        for name in args.algo:
            v = ALGORITHMS[name].vpp_default
            costs = CostModel(v * args.node, v * args.node, v * args.node)
            table = build_schedule(name, p, None, args.factor * p, costs)
            for mode, post in MODES:
                cases.append((name, mode, table, costs, post))
        specs = [
            EmulationSpec(
                table, costs, args.steps, spin=args.spin, post_validation=post, optimizer_ms=args.optimizer
            )
            for _, _, table, costs, post in cases
        ]
        wait_for_quiet(args.quiet_below, console)
        before = os.getloadavg()[0]
        console.print(f"p={p}: emulating {len(specs)} runs on {p} processes (load average {before:.2f}) ...")
        runs = run_emulations(specs)
        assert runs is not None
        loads[p] = (before, os.getloadavg()[0])
        for (name, mode, table, costs, post), run in zip(cases, runs, strict=True):
            sim = simulate_iterations(
                table, costs, args.steps, post_validation=post, optimizer_cost=args.optimizer
            )
            got = run.iterations
            assert got is not None
            comm, _ = _comm_latency(run.timelines)
            with_comm = simulate_iterations(
                table,
                replace(costs, comm=comm),
                args.steps,
                post_validation=post,
                optimizer_cost=args.optimizer,
            )
            rows.append(
                {
                    "algorithm": name,
                    "pp": p,
                    "vpp": table.vpp,
                    "micro_batches": table.num_microbatches,
                    "mode": mode,
                    "sim_steady_ms": sim.steady_step_time,
                    "emulated_steady_ms": got["steady_step_time"],
                    "error": got["steady_step_time"] / sim.steady_step_time - 1,
                    "sim_bubble": sim.steady_bubble_rate,
                    "emulated_bubble": got["steady_bubble_rate"],
                    "comm_ms": comm,
                    "sim_comm_steady_ms": with_comm.steady_step_time,
                    "error_comm": got["steady_step_time"] / with_comm.steady_step_time - 1,
                    "sim_first_ms": sim.first_step_time,
                    "emulated_first_ms": got["first_step_time"],
                    "emulated_iteration_ends_ms": got["iteration_ends"],
                }
            )
    load_text = ", ".join(f"p={p}: {a:.2f} -> {b:.2f}" for p, (a, b) in loads.items())
    t = Table(
        title=f"Steady step time, emulated vs simulated (every node {args.node:g} ms, optimizer step "
        f"{args.optimizer:g} ms, {args.steps} steps; load average {load_text})",
        title_justify="left",
    )
    cols = ("algorithm", "p", "v", "m", "mode", "sim ms", "emulated ms", "error", "sim bubble", "emu bubble")
    cols += ("p2p ms", "sim+comm ms", "error")
    for col in cols:
        t.add_column(col, justify="left" if col in ("algorithm", "mode") else "right")
    for r in rows:
        t.add_row(
            r["algorithm"],
            str(r["pp"]),
            str(r["vpp"]),
            str(r["micro_batches"]),
            r["mode"],
            f"{r['sim_steady_ms']:,.1f}",
            f"{r['emulated_steady_ms']:,.1f}",
            f"{r['error']:+.2%}",
            f"{r['sim_bubble']:.2%}",
            f"{r['emulated_bubble']:.2%}",
            f"{r['comm_ms']:.2f}",
            f"{r['sim_comm_steady_ms']:,.1f}",
            f"{r['error_comm']:+.2%}",
        )
    console.print(t)
    post = [r for r in rows if r["mode"] == "post-validation"]
    if post:
        worst = max(post, key=lambda r: abs(r["error"]))
        console.print(
            f"post-validation: largest |error| {worst['error']:+.2%} ({worst['algorithm']} p={worst['pp']}); "
            f"within 5 %: {sum(abs(r['error']) <= 0.05 for r in post)}/{len(post)}"
        )
    console.print(f"[dim]{time.time() - started:.0f} s[/dim]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "load_average": loads, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
