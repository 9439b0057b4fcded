"""Calibration round trip: known costs -> emulated run -> pp_data dump -> calibrate -> compare.

    python bench/calibration.py [--pp 4] [--mb 8] [--steps 4] [--algo zero-bubble zbv 1f1b-interleaved]
                                [--project-from 1f1b]

For each algorithm, the table runs on the emulated cluster with a known per-stage cost model (ms: F, B, W
differ per rank, every node >= 20 ms), the run is dumped in Primus' pp_data format, and
`primuspp.sim.calibrate.costs_from_dir` measures the costs back from the dump. Reported:

- the largest relative error over stages of the recovered F, B and W (target within 5 %; a run with only
  full backwards, e.g. 1f1b, cannot tell B from W: B + W is checked), and the p2p latency measured (the
  truth has none: it is the real gloo latency);
- the step time re-projected with the recovered costs (simulate the same table) vs the measured one
  (median of the steps after the first; target within 5 %); times in ms;
- cross projection: the costs calibrated from the `--project-from` run (per rank, `portable()`, as
  `primuspp simulate --costs-from` uses them) projecting every other algorithm, vs its emulated step time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from emulations import run_emulations, steady_step_time
from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import build_schedule
from primuspp.runtime.emulate import EmulationSpec, dump_emulation
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import costs_from_dir


def truth(pp: int) -> CostModel:
    """Per-rank costs (ms of a rank's share), odd ranks slower: a chunk of v = 2 still lasts >= 20 ms."""
    f = tuple(40.0 if r % 2 == 0 else 50.0 for r in range(pp))
    b = tuple(48.0 if r % 2 == 0 else 60.0 for r in range(pp))
    w = tuple(40.0 for _ in range(pp))
    return CostModel(forward=f, backward=b, wgrad=w)


def max_rel(got: tuple[float, ...], want: tuple[float, ...]) -> float:
    return max(abs(g / w - 1) for g, w in zip(got, want, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--algo", nargs="+", default=["zero-bubble", "zbv", "1f1b-interleaved"])
    ap.add_argument("--project-from", default="1f1b")
    args = ap.parse_args()
    console = Console(width=150)
    names = [args.project_from, *[a for a in args.algo if a != args.project_from]]
    specs = []
    costs = truth(args.pp)
    for name in names:
        specs.append(EmulationSpec(build_schedule(name, args.pp, None, args.mb, costs), costs, args.steps))
    load = os.getloadavg()[0]
    runs = run_emulations(specs)
    assert runs is not None
    t = Table(
        title=f"Calibration round trip, p={args.pp} m={args.mb} ({args.steps} steps; load {load:.2f})",
        title_justify="left",
    )
    for col in (
        "algorithm",
        "F err",
        "B err",
        "W err",
        "B+W err",
        "p2p ms",
        "measured",
        "re-projected",
        "error",
    ):
        t.add_column(col, justify="left" if col == "algorithm" else "right")
    calibrated = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in zip(names, runs, strict=True):
            out = Path(tmp) / name
            dump_emulation(run, out, "bench")
            cal = costs_from_dir(str(out))
            calibrated[name] = cal
            pl = run.spec.table.placement
            want = run.spec.costs.for_placement(pl)
            got = cal.costs.for_placement(pl)
            measured = steady_step_time(run)
            again = simulate(run.spec.table, cal.costs).metrics.step_time
            bw_got = tuple(b + w for b, w in zip(got.backward, got.wgrad, strict=True))
            bw_want = tuple(b + w for b, w in zip(want.backward, want.wgrad, strict=True))
            split = "n/a (BW only)" if cal.bw_split_assumed else None
            t.add_row(
                name,
                f"{max_rel(got.forward, want.forward):.2%}",
                split or f"{max_rel(got.backward, want.backward):.2%}",
                split or f"{max_rel(got.wgrad, want.wgrad):.2%}",
                f"{max_rel(bw_got, bw_want):.2%}",
                f"{cal.costs.comm:.2f}",
                f"{measured:,.1f}",
                f"{again:,.1f}",
                f"{again / measured - 1:+.2%}",
            )
    console.print(t)
    source = calibrated[args.project_from].portable()
    x = Table(
        title=f"Projection from the calibrated {args.project_from} run (per-rank costs)", title_justify="left"
    )
    for col in ("algorithm", "emulated ms", "projected ms", "error"):
        x.add_column(col, justify="left" if col == "algorithm" else "right")
    for name, run in zip(names[1:], runs[1:], strict=True):
        projected = simulate(run.spec.table, source).metrics.step_time
        measured = steady_step_time(run)
        x.add_row(name, f"{measured:,.1f}", f"{projected:,.1f}", f"{projected / measured - 1:+.2%}")
    console.print(x)


if __name__ == "__main__":
    main()
