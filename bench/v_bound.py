"""Is a V schedule faster than ours possible under the same memory cap? A time-indexed MILP (HiGHS).

    python bench/v_bound.py ALGO --pp 4 --mb 8 [--time-limit 300]

Unit slots (F = B = W per chunk, comm 0, as in the issue's reference figures), V placement (stage s and
2p-1-s on rank s), at most one op per rank and slot, every dependency, and at most `cap` live chunk
activations per rank in every slot (an F counts from its slot on, a W frees after its slot: the
simulator's memory model with b_free_fraction 0). The cap is the one ALGO's table reaches. It asks for a
makespan one slot shorter than ALGO's: "Infeasible" proves ALGO's step time optimal under its memory.
As a check of the model itself, ALGO's own schedule is fixed into it first and must be feasible.
Needs the `optimal` extra (highspy). Small instances only (p=4, m=8 takes seconds; p=8, m=32 does not end).
"""

from __future__ import annotations

import argparse
import time

import highspy
import numpy as np

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.schedule.timing import node_times
from primuspp.sim import simulate

F, B, W = 0, 1, 2
KIND = {"F": F, "B": B, "W": W}


def dependencies(p: int, m: int) -> list[tuple[tuple, tuple]]:
    n = 2 * p
    deps = []
    for mb in range(m):
        for s in range(n):
            if s > 0:
                deps.append(((F, mb, s - 1), (F, mb, s)))
            deps.append(((F, mb, s), (B, mb, s)))
            if s < n - 1:
                deps.append(((B, mb, s + 1), (B, mb, s)))
            deps.append(((B, mb, s), (W, mb, s)))
    return deps


def _dependency_order(op: tuple) -> tuple:
    """Sort key that puts every op after its inputs: within a microbatch F down the stages, then B up
    them, then W."""
    kind, mb, s = op
    return (mb, kind, s if kind == F else -s)


class SlotModel:
    """x[op, t] = 1 when op starts in slot t; windows cut by the dependency chains' lengths."""

    def __init__(self, p: int, m: int, horizon: int, cap: int, time_limit: float) -> None:
        n = 2 * p
        self.rank = [min(s, n - 1 - s) for s in range(n)]
        self.ops = [(k, mb, s) for mb in range(m) for s in range(n) for k in (F, B, W)]
        deps = dependencies(p, m)
        pred: dict[tuple, list[tuple]] = {o: [] for o in self.ops}
        succ: dict[tuple, list[tuple]] = {o: [] for o in self.ops}
        for a, b in deps:
            pred[b].append(a)
            succ[a].append(b)
        est, tail = {}, {}
        for o in sorted(self.ops, key=lambda o: (o[1], o[0] == W, o[0] == B, o[2] if o[0] == F else -o[2])):
            est[o] = max((est[a] + 1 for a in pred[o]), default=0)
        for o in sorted(self.ops, key=lambda o: (o[1], o[0] == W, o[0] == B, o[2] if o[0] == F else -o[2]))[
            ::-1
        ]:
            tail[o] = max((tail[b] + 1 for b in succ[o]), default=0)
        self.window = {o: (est[o], horizon - 1 - tail[o]) for o in self.ops}
        self.empty = any(lo > hi for lo, hi in self.window.values())
        self.col: dict[tuple, int] = {}
        for o in self.ops:
            lo, hi = self.window[o]
            for t in range(lo, hi + 1):
                self.col[(o, t)] = len(self.col)
        self.highs = h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", time_limit)
        cols = len(self.col)
        if self.empty or not cols:
            return
        h.addVars(cols, np.zeros(cols), np.ones(cols))
        h.changeColsIntegrality(cols, np.arange(cols, dtype=np.int32), np.ones(cols, dtype=np.uint8))
        for o in self.ops:
            self._row(1, 1, self._starts(o, None))
        for r in range(p):
            mine = [o for o in self.ops if self.rank[o[2]] == r]
            for t in range(horizon):
                self._row(
                    -highspy.kHighsInf, 1, [(self.col[(o, t)], 1.0) for o in mine if (o, t) in self.col]
                )
                live = self._starts_by(mine, F, t, 1.0) + self._starts_by(mine, W, t - 1, -1.0)
                self._row(-highspy.kHighsInf, cap, live)
        for a, b in deps:  # b started by slot t  =>  a started by slot t - 1
            lo, hi = self.window[b]
            for t in range(lo, hi + 1):
                self._row(
                    -highspy.kHighsInf, 0, self._starts(b, t) + [(c, -1.0) for c, _ in self._starts(a, t - 1)]
                )

    def _starts(self, o: tuple, upto: int | None) -> list[tuple[int, float]]:
        lo, hi = self.window[o]
        hi = hi if upto is None else min(hi, upto)
        return [(self.col[(o, t)], 1.0) for t in range(lo, hi + 1)]

    def _starts_by(self, ops: list[tuple], kind: int, upto: int, sign: float) -> list[tuple[int, float]]:
        return [(c, sign) for o in ops if o[0] == kind for c, _ in self._starts(o, upto)]

    def _row(self, lo: float, hi: float, entries: list[tuple[int, float]]) -> None:
        if entries:
            idx = np.array([c for c, _ in entries], dtype=np.int32)
            val = np.array([v for _, v in entries], dtype=np.double)
            self.highs.addRow(lo, hi, len(idx), idx, val)

    def solve(self, fixed: dict[tuple, int] | None = None) -> str:
        if self.empty:
            return "Infeasible (dependency chains alone are longer)"
        if fixed is not None:
            value = np.zeros(len(self.col))
            for o, t in fixed.items():
                if (o, t) not in self.col:
                    return "Infeasible (outside its window)"
                value[self.col[(o, t)]] = 1.0
            idx = np.arange(len(self.col), dtype=np.int32)
            self.highs.changeColsBounds(len(self.col), idx, value, value)
        self.highs.run()
        return self.highs.modelStatusToString(self.highs.getModelStatus())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("algo")
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--time-limit", type=float, default=300.0)
    args = ap.parse_args()
    costs = CostModel(1000, 1000, 1000)
    table = build_schedule(args.algo, args.pp, 2, args.mb, costs)
    metrics = simulate(table, costs).metrics
    unit = 500.0  # one chunk's share of F = B = W = 1000
    slots = round(metrics.step_time / unit)
    cap = round(2 * metrics.peak_memory)  # microbatches -> chunks
    order = [[n for n in seq if n.kind.is_compute] for seq in table.ranks]
    timing = node_times(table.placement, args.mb, order, costs.for_placement(table.placement))
    t0 = min(ts[0] for ts in timing.starts if ts)
    own = {
        (KIND[n.kind.text], n.microbatch, n.stage): round((st - t0) / unit)
        for seq, ts in zip(order, timing.starts, strict=True)
        for n, st in zip(seq, ts, strict=True)
    }
    print(
        f"{args.algo} p={args.pp} m={args.mb}: step {metrics.step_time:,.0f} ({slots} slots), "
        f"peak {metrics.peak_memory:g} microbatches ({cap} chunks)"
    )
    check = SlotModel(args.pp, args.mb, slots, cap, args.time_limit).solve(own)
    print(f"  its own schedule in the model ({slots} slots): {check}")
    start = time.perf_counter()
    status = SlotModel(args.pp, args.mb, slots - 1, cap, args.time_limit).solve()
    print(
        f"  any schedule in {slots - 1} slots ({(slots - 1) * unit:,.0f}) within {cap} chunks: {status} "
        f"({time.perf_counter() - start:.1f} s)"
    )


if __name__ == "__main__":
    main()
