"""Projection from real Primus-Pipeline dumps: calibrate from each dump, simulate its own schedule, compare.

    python bench/primus_projection.py DUMP [DUMP ...]       # pp_data directories of real training runs
    python bench/primus_projection.py --fixtures            # the repository's replayed samples (tests/data)

For each dump: the schedule that produced it (Megatron's 1F1B, or interleaved 1F1B when v > 1, as `viz`
assumes for Primus' older format), the costs measured from it (`--costs-from`: chunk labels reconstructed
first), the step time simulated with those costs, and the dump's own median step time (iterations after the
first). Target: within 5 %. The real dumps are not part of the repository; pass their paths.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import PrimusppError
from primuspp.sim import simulate
from primuspp.sim.calibrate import costs_from_dir
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data
from primuspp.trace.reconstruct import needs_labels

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "primus" / "pp_data_example"


def project(path: Path) -> tuple[str, float, float, str]:
    """(schedule, projected ms, measured median ms, calibration note) of one dump."""
    timelines = read_pp_data(path)
    first = timelines[0]
    algo = first.algorithm or ("1f1b-interleaved" if first.vpp > 1 else "1f1b")
    if (
        not needs_labels(first)
        and first.algorithm == ""
        and any(iv.kind == "W" for iv in first.ranks[0].intervals)
    ):
        algo = "zero-bubble"
    cal = costs_from_dir(str(path))
    table = build_schedule(algo, first.pp, first.vpp if first.vpp > 1 else None, first.micro_batches)
    projected = simulate(table, cal.portable()).metrics.step_time
    steady = timelines[1:] if len(timelines) > 2 else timelines
    measured = statistics.median(timeline_metrics(tl).step_time for tl in steady)
    return f"{algo} p={first.pp} v={first.vpp} m={first.micro_batches}", projected, measured, cal.labels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dumps", nargs="*", type=Path)
    ap.add_argument("--fixtures", action="store_true", help="also the replayed samples under tests/data")
    args = ap.parse_args()
    dumps = list(args.dumps) + (sorted(p for p in FIXTURES.iterdir() if p.is_dir()) if args.fixtures else [])
    if not dumps:
        ap.error("give pp_data directories, or --fixtures")
    table = Table(title="Projection from each dump's own costs vs its measured median step")
    for col in ("dump", "schedule", "projected ms", "measured ms", "error", "labels"):
        table.add_column(col, justify="right" if "ms" in col or col == "error" else "left")
    worst = 0.0
    for path in dumps:
        try:
            schedule, projected, measured, labels = project(path)
        except PrimusppError as err:
            table.add_row(str(path), "-", "-", "-", "-", f"error: {err}")
            continue
        error = projected / measured - 1
        worst = max(worst, abs(error))
        table.add_row(str(path), schedule, f"{projected:,.1f}", f"{measured:,.1f}", f"{error:+.1%}", labels)
    Console(width=160).print(table)
    print(f"largest |error| {worst:.1%} (target 5 %)")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
