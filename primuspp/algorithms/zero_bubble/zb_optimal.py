"""zb-optimal: the heuristic's problem solved exactly as a MILP (HiGHS, the optional `optimal` extra).

Linear placement, B/W split, per-rank activation cap. Variables: the start time of every F, B and W, the
step time C, and one binary per pair of nodes on a rank whose order no dependency fixes (forwards, B's and
W's each keep microbatch order — they are interchangeable, so this loses no optimum). Constraints:
dependencies with comm latency across ranks; the disjunctive pairs (big-M, M = the heuristic's step time);
the memory at every forward's start, which the pair binaries express linearly; C after every rank's last
W. Valid inequalities make the relaxation useful: transitivity of the pair binaries, and a per-rank
lower bound on C (a rank can run at most `cap` forwards before its first B can exist).

The heuristic's schedule is the warm start and the fallback, so the result is never worse. `report` keeps
the solver status, the step time, the proven lower bound and the gap.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.search.portfolio import score
from primuspp.algorithms.zero_bubble import zero_bubble_heuristic as heuristic
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import linear

MAX_BINARIES = 60_000  # beyond this the model alone takes longer to build than any sensible time limit
_KINDS = (NodeKind.F, NodeKind.B, NodeKind.W)


@contextmanager
def _quiet_stdout():
    """HiGHS prints its banner from C++ on stdout; `--json` promises stdout holds one document only."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured or replaced stdout: nothing native to hide
        yield
        return
    saved = os.dup(fd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


class _Model:
    """Columns and rows collected in Python, handed to HiGHS in two calls."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.cost: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[float, float, list[tuple[int, float]]]] = []

    def col(self, lo: float, hi: float, cost: float = 0.0, integer: bool = False) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        self.cost.append(cost)
        if integer:
            self.integer.append(len(self.lo) - 1)
        return len(self.lo) - 1

    def row(self, lo: float, hi: float, terms: list[tuple[int, float]]) -> None:
        self.rows.append((lo, hi, terms))


def lower_bound(p: int, m: int, costs: StageCosts, cap: float) -> float:
    """Step time no schedule can beat: on each rank, the work that cannot fit before its first B."""
    f, b, w, c = costs.forward, costs.backward, costs.wgrad, costs.comm
    best = 0.0
    for r in range(p):
        start = sum(f[q] + c for q in range(r))
        first_b = sum(f) + (p - 1) * c + sum(b[q] + c for q in range(r + 1, p))
        work = m * (f[r] + b[r] + w[r])
        before = min(min(m, math.floor(cap + 1e-9)) * f[r], first_b - start)
        best = max(best, first_b + work - before, start + work)
    return best


def solve(
    p: int, m: int, costs: StageCosts, cap: float, warm: ComputeOrder, time_limit: float
) -> tuple[ComputeOrder | None, dict]:
    """Optimise from the warm start; return (order or None, report)."""
    import highspy

    f, b, w, c = costs.forward, costs.backward, costs.wgrad, costs.comm
    bf = costs.b_free_fraction
    placement = linear(p)
    warm_score = score(placement, m, warm, costs, bf)
    ub = warm_score.makespan
    lb = lower_bound(p, m, costs, cap)
    report = {"heuristic_step_time": ub, "lower_bound": lb, "time_limit": time_limit}
    n_bin = 3 * p * m * (m - 1) // 2
    if ub <= lb * (1 + 1e-9):
        return None, {
            **report,
            "status": "optimal (heuristic meets the lower bound)",
            "step_time": ub,
            "gap": 0.0,
        }
    if n_bin > MAX_BINARIES:
        gap = (ub - lb) / ub
        return None, {
            **report,
            "status": f"too large for the MILP ({n_bin} binaries)",
            "step_time": ub,
            "gap": gap,
        }

    mdl = _Model()
    dur = (f, b, w)
    start = [[[mdl.col(0.0, ub) for _ in range(m)] for _ in range(p)] for _ in range(3)]
    total = mdl.col(lb, ub, cost=1.0)
    mdl.hi[start[0][0][0]] = 0.0  # the first forward opens the step
    for r in range(p):
        for k in range(m):
            fk, bk, wk = start[0][r][k], start[1][r][k], start[2][r][k]
            if r > 0:
                mdl.row(f[r - 1] + c, math.inf, [(fk, 1.0), (start[0][r - 1][k], -1.0)])
            mdl.row(f[r], math.inf, [(bk, 1.0), (fk, -1.0)])
            if r < p - 1:
                mdl.row(b[r + 1] + c, math.inf, [(bk, 1.0), (start[1][r + 1][k], -1.0)])
            mdl.row(b[r], math.inf, [(wk, 1.0), (bk, -1.0)])
            if k + 1 < m:
                for t in range(3):
                    mdl.row(dur[t][r], math.inf, [(start[t][r][k + 1], 1.0), (start[t][r][k], -1.0)])
        mdl.row(w[r], math.inf, [(total, 1.0), (start[2][r][m - 1], -1.0)])
    # pair binaries: before[(a, b)][r][i][j] = 1 if node a_i runs before node b_j (i > j)
    pairs = ((0, 1), (0, 2), (1, 2))  # F before B, F before W, B before W
    binary = {pair: [dict() for _ in range(p)] for pair in pairs}
    for ta, tb in pairs:
        for r in range(p):
            for i in range(1, m):
                for j in range(i):
                    x = mdl.col(0.0, 1.0, integer=True)
                    binary[(ta, tb)][r][(i, j)] = x
                    u, v = start[ta][r][i], start[tb][r][j]
                    mdl.row(dur[ta][r] - ub, math.inf, [(v, 1.0), (u, -1.0), (x, -ub)])
                    mdl.row(dur[tb][r], math.inf, [(u, 1.0), (v, -1.0), (x, ub)])
    for per_rank in binary.values():
        for bins in per_rank:
            for (i, j), x in bins.items():
                if (i + 1, j) in bins:  # a_{i+1} before b_j  =>  a_i before b_j
                    mdl.row(0.0, math.inf, [(x, 1.0), (bins[(i + 1, j)], -1.0)])
                if (i, j + 1) in bins:  # a_i before b_j  =>  a_i before b_{j+1}
                    mdl.row(0.0, math.inf, [(bins[(i, j + 1)], 1.0), (x, -1.0)])
    for r in range(p):
        fb, fw, bw = binary[(0, 1)][r], binary[(0, 2)][r], binary[(1, 2)][r]
        for key, x in fb.items():  # F_i before B_j  =>  F_i before W_j
            mdl.row(0.0, math.inf, [(fw[key], 1.0), (x, -1.0)])
        for key, x in bw.items():  # B_i before W_j  =>  F_i before W_j
            mdl.row(0.0, math.inf, [(fw[key], 1.0), (x, -1.0)])
        for i in range(1, m):  # memory when F_i starts: one unit per forward not yet freed
            terms = [(fb[(i, j)], bf) for j in range(i) if bf] + [(fw[(i, j)], 1.0 - bf) for j in range(i)]
            mdl.row(-math.inf, cap - 1.0 + 1e-9, terms)

    values = _warm_values(mdl, start, total, binary, warm, p, m, costs)
    with _quiet_stdout():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", float(time_limit))
        h.setOptionValue("mip_rel_gap", 1e-6)
        h.setOptionValue("random_seed", 0)
        _load(h, mdl)
        sol = highspy.HighsSolution()
        sol.col_value = values
        h.setSolution(sol)
        h.run()
    info = h.getInfo()
    status = h.modelStatusToString(h.getModelStatus())
    bound = max(lb, info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else lb
    order = None
    best = ub
    if info.primal_solution_status == 2:  # feasible
        col = list(h.getSolution().col_value)
        order = _order_from(col, start, p, m)
        best = min(ub, score(placement, m, order, costs, bf).makespan)
    gap = max(0.0, (best - bound) / best) if best > 0 else 0.0
    if status == "Optimal" and gap <= 1e-6:  # proven within the solver's tolerance: say so plainly
        bound, gap = best, 0.0
    return order, {**report, "status": status, "step_time": best, "lower_bound": bound, "gap": gap}


def _load(h, mdl: _Model) -> None:
    import numpy as np

    n = len(mdl.lo)
    h.addCols(n, np.array(mdl.cost), np.array(mdl.lo), np.array(mdl.hi), 0, np.array([], np.int32),
              np.array([], np.int32), np.array([], np.float64))  # fmt: skip
    ints = np.array(mdl.integer, np.int32)
    h.changeColsIntegrality(len(ints), ints, np.ones(len(ints), np.uint8))
    starts, index, value, lo, hi = [], [], [], [], []
    for rlo, rhi, terms in mdl.rows:
        starts.append(len(index))
        lo.append(rlo)
        hi.append(rhi)
        for col, coef in terms:
            index.append(col)
            value.append(coef)
    h.addRows(len(lo), np.array(lo), np.array(hi), len(index), np.array(starts, np.int32),
              np.array(index, np.int32), np.array(value, np.float64))  # fmt: skip


def _warm_values(mdl, start, total, binary, warm, p, m, costs) -> list[float]:
    from primuspp.schedule.timing import node_times

    times = node_times(linear(p), m, warm, costs)
    values = [0.0] * len(mdl.lo)
    position: list[dict[tuple[int, int], int]] = [dict() for _ in range(p)]
    t0 = min(times.starts[r][0] for r in range(p) if warm[r])
    end = 0.0
    for r, seq in enumerate(warm):
        for i, node in enumerate(seq):
            t = ("F", "B", "W").index(node.kind.value)
            values[start[t][r][node.microbatch]] = times.starts[r][i] - t0
            position[r][(t, node.microbatch)] = i
            end = max(end, times.ends[r][i] - t0)
    values[total] = end
    for (ta, tb), per_rank in binary.items():
        for r, bins in enumerate(per_rank):
            for (i, j), x in bins.items():
                values[x] = 1.0 if position[r][(ta, i)] < position[r][(tb, j)] else 0.0
    return values


def _order_from(col: list[float], start, p: int, m: int) -> ComputeOrder:
    order = []
    for r in range(p):
        nodes = [(col[start[t][r][k]], t, k) for t in range(3) for k in range(m)]
        nodes.sort()
        order.append([Node(_KINDS[t], k, r) for _, t, k in nodes])
    return order


def generate(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    placement = linear(p)
    costs = heuristic.planning_costs(req.costs, req.params).for_placement(placement)
    cap = heuristic.default_cap(p, req.params)
    warm_report: dict = {}
    warm = heuristic.generate(GenerationRequest(p, 1, m, req.costs, req.params, warm_report))
    order, report = solve(p, m, costs, cap, warm, float(req.params.get("time_limit", 10.0)))
    req.report.update(report)
    if order is not None:
        sc = score(placement, m, order, costs, costs.fractions())
        if sc.peak <= cap + 1e-9 and sc.makespan <= report["heuristic_step_time"] * (1 + 1e-12):
            return order
    req.report["step_time"] = report["heuristic_step_time"]
    return warm
