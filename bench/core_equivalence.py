"""Hashes of the offline core's outputs for every registered algorithm, to prove a refactor changes nothing.

Usage: python bench/core_equivalence.py --save FILE   (before the change)
       python bench/core_equivalence.py --check FILE  (after: lists every case whose hash differs)

For each algorithm, each admissible v, five sizes (p, m) and several cost models, the SHA-256 of the table
as JSON, the simulated intervals, transfers and memory curves, and the metrics. `zb-optimal` (a MILP with a
time limit, not deterministic) is left out. Sizes an algorithm refuses are recorded as refused.

Every case also checks the fast paths against their references: the compact lowering
(`lower_comms`) against `lower_comms_reference` of the same compute order, and the array validator
(`compact_validation.valid`) proving the table valid where it applies (no memory nodes); any mismatch is
listed as FAST and fails the check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule import compact_validation
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import to_json
from primuspp.sim import simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/oracles
from tests.oracles.lowering import lower_comms_reference

SKIP = {"zb-optimal"}
SIZES = ((2, 4), (4, 8), (4, 10), (8, 32), (16, 64))
VPPS = (1, 2, 3, 4)


def cost_models(p: int) -> dict[str, CostModel]:
    """Equal costs, unequal per-rank costs with comm, zero costs, per-rank b_free_fraction varying (in [0, 1],
    and partly negative), and users' float costs (not multiples of a power of two: the loop's sums), equal
    and per rank."""
    return {
        "equal": CostModel(1000, 1000, 1000),
        "unequal": CostModel(
            forward=tuple(900.0 + 37 * r for r in range(p)),
            backward=tuple(1500.0 - 21 * r for r in range(p)),
            wgrad=tuple(700.0 + 13 * (r % 3) for r in range(p)),
            comm=55.0,
            activation=tuple(1.0 + 0.25 * (r % 2) for r in range(p)),
            b_free_fraction=0.5,
        ),
        "zero": CostModel(0.0, 0.0, 0.0),
        "bfree": CostModel(1000, 1200, 800, comm=10.0, b_free_fraction=tuple((r % 4) / 4 for r in range(p))),
        # B keeping more than F saved on some ranks (a weight-grad store)
        "bgrow": CostModel(1000, 1000, 500, b_free_fraction=tuple(-0.25 if r % 2 else 0.5 for r in range(p))),
        "float": CostModel(1.13, 2.27, 0.71, comm=0.13),
        "float-ranks": CostModel(
            forward=tuple(1.13 + 0.017 * r for r in range(p)),
            backward=tuple(2.27 - 0.031 * (r % 5) for r in range(p)),
            wgrad=tuple(0.71 + 0.003 * (r % 3) for r in range(p)),
            comm=0.13,
        ),
    }


def digest(table, result) -> str:
    h = hashlib.sha256()
    h.update(to_json(table).encode())
    for rt in result.timeline.ranks:
        h.update(
            repr(
                [
                    (iv.kind, iv.microbatch, iv.stage, iv.chunk, iv.start, iv.end, iv.backward)
                    for iv in rt.intervals
                ]
            ).encode()
        )
        h.update(repr(rt.memory).encode())
        h.update(repr(rt.peak_memory).encode())
    h.update(repr([asdict(t) for t in result.timeline.transfers]).encode())
    h.update(repr(asdict(result.metrics)).encode())
    return h.hexdigest()


def cases(only: list[str] | None):
    for name, algo in ALGORITHMS.items():
        if name in SKIP or (only and name not in only):
            continue
        for v in (v for v in VPPS if algo.vpp_ok(v)):
            for p, m in SIZES:
                for cname, costs in cost_models(p).items():
                    yield f"{name} v={v} p={p} m={m} costs={cname}", name, v, p, m, costs, {}
                    if algo.budget_param:  # a tighter cap too
                        cap = {algo.budget_param: max(1.0, p / 2)}
                        yield f"{name} v={v} p={p} m={m} costs={cname} cap", name, v, p, m, costs, cap


def fast_paths_agree(table) -> bool:
    """The compact lowering equals the reference lowering; the array validator proves the table valid."""
    order = table.compute_order()
    if tuple(table.ranks) != lower_comms_reference(table.placement, table.num_microbatches, order):
        return False
    has_memory_nodes = any(n.kind.is_memory for seq in order for n in seq)
    return has_memory_nodes or compact_validation.valid(table)


def compute(only: list[str] | None) -> tuple[dict[str, str], list[str]]:
    out, fast_diff = {}, []
    for label, name, v, p, m, costs, params in cases(only):
        try:
            table = build_schedule(name, p, v, m, costs, **params)
        except ScheduleError as err:
            out[label] = f"refused: {err}"
            continue
        out[label] = digest(table, simulate(table, costs))
        if not fast_paths_agree(table):
            fast_diff.append(label)
    return out, fast_diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    ap.add_argument("--algo", action="append", help="only these algorithms")
    args = ap.parse_args()
    hashes, fast_diff = compute(args.algo)
    for k in fast_diff:
        print(f"FAST {k}: a fast path disagrees with its reference")
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(hashes, fh, indent=1, sort_keys=True)
        print(f"saved {len(hashes)} cases to {args.save}")
        sys.exit(1 if fast_diff else 0)
    with open(args.check) as fh:
        before = json.load(fh)
    diff = [k for k in hashes if before.get(k) != hashes[k]]
    missing = [k for k in before if k not in hashes and (not args.algo or k.split()[0] in args.algo)]
    for k in diff:
        print(f"DIFF {k}: {before.get(k, '(new)')[:16]} -> {hashes[k][:16]}")
    for k in missing:
        print(f"MISSING {k}")
    counts = f"{len(diff)} differ, {len(missing)} missing, {len(fast_diff)} fast-path mismatches"
    print(f"{len(hashes)} cases, {counts}")
    sys.exit(1 if diff or missing or fast_diff else 0)


if __name__ == "__main__":
    main()
