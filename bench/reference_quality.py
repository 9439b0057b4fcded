"""Are primuspp's cost-aware schedules at least as good as the sail-sg reference generators?

    python bench/reference_quality.py --reference PATH [--pp 4,8,16] [--algo zbv ...] [--cache DIR] [-v]
                                      [--effort fast|auto|full]

PATH is a checkout of github.com/sail-sg/zero-bubble-pipeline-parallelism (or set
PRIMUSPP_REFERENCE). Its schedulers (megatron/core/pipeline_parallel/zerobubble/scheduler/) run unmodified:
their modules are loaded from that directory by file path, without the megatron package around them (the
package's __init__ pulls in the training runtime; only `graph.py` is needed). Two imports the ZB heuristic
makes but does not use for its result (torch, and pulp's `value`, the identity on a float) are stubbed when
missing. Without a reference the script says "reference not available" and exits 0. Nothing of the
reference is copied into primuspp.

For every case — p in {4, 8, 16}, m in {p, 2p, 4p}, and a set of unequal costs (W/B from 0.3 to 2, comm from
0 to 20 % of F, with and without per-stage variation, B twice F, the first and last ranks heavier) — both
sides' compute orders go through primuspp's lowering, validation and simulator under the same cost model. A
case is `worse` when primuspp's step time, its steady bubble (1 - mean busy / longest rank span) or its peak
activation memory (microbatch units per rank, the simulator's memory model) is above the reference's
(relative tolerance 1e-9); `better` when none is worse and the step time or the steady bubble is below it;
else `equal`. The reference generators are fed the cost model they accept: per-stage lists for the ZB
heuristic, one value per kind (the per-stage mean, as its runtime does) for the V generators.

Pairs: zero-bubble <-> ZB-H1 (the ZB heuristic at p microbatches), zb-h2 <-> ZB-H2 (at 2p - 1, primuspp's
budget), zero-bubble-heuristic <-> the ZB heuristic at max_mem p, zbv <-> zbv.py, v-half/v-min <->
zbv_greedy.py, v-auto <-> v_auto_schedule.py at budgets of p, 1.5p and 2p chunk activations (the
reference's unit; primuspp's max_mem p/2, 3p/4 and p microbatches; 2p chunks is the most it plans for).
The comparison is at the same peak memory: where the reference's V-auto table holds less than its budget,
v-auto gets that peak as its max_mem.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import time
import types
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.search.floor import forget
from primuspp.algorithms.search.portfolio import memory_units, order_peak
from primuspp.errors import PrimusppError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import linear, v_shape
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from primuspp.sim import simulate

SCHEDULER_DIR = Path("megatron/core/pipeline_parallel/zerobubble/scheduler")
PACKAGE = "megatron.core.pipeline_parallel.zerobubble.scheduler"
TOL = 1e-9


# ----------------------------------------------------------------------------------------- reference side


class Reference:
    """The reference's scheduler modules, loaded from a checkout without the megatron package."""

    def __init__(self, root: Path) -> None:
        sched = root / SCHEDULER_DIR
        if not (sched / "graph.py").is_file():
            raise FileNotFoundError(f"{sched}/graph.py not found")
        parts = PACKAGE.split(".")
        for i in range(1, len(parts) + 1):  # empty parent packages; the last one searches `sched`
            name = ".".join(parts[:i])
            if name not in sys.modules:
                mod = types.ModuleType(name)
                mod.__path__ = [str(sched)] if i == len(parts) else []
                sys.modules[name] = mod
        for name, attrs in (("pulp", {"value": lambda x: x}), ("torch", {"Tensor": object})):
            if importlib.util.find_spec(name) is None and name not in sys.modules:
                stub = types.ModuleType(name)
                stub.__dict__.update(attrs)
                sys.modules[name] = stub
        self.graph = self._load("graph", sched)
        self.zb = self._load("zb", sched)
        self.zbv = self._load("zbv", sched)
        self.zbv_greedy = self._load("zbv_greedy", sched)
        self.v_auto = self._load("v_auto_schedule", sched)

    @staticmethod
    def _load(name: str, sched: Path) -> types.ModuleType:
        full = f"{PACKAGE}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        spec = importlib.util.spec_from_file_location(full, sched / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        return mod

    # Each returns (rank -> [(kind, microbatch, primuspp stage)]) in the reference's execution order.

    def zb_heuristic(self, p: int, m: int, c: StageCostsIn, max_mem: float) -> list[list[tuple]]:
        cfg = self.graph.GraphConfig(
            cost_f=[float(x) for x in c.f],
            cost_b=[float(x) for x in c.b],
            cost_w=[float(x) for x in c.w],
            cost_comm=float(c.comm),
            mem_f=[1.0] * p,
            mem_b=[0.0] * p,
            mem_w=[-1.0] * p,
            max_mem=[float(max_mem)] * p,
            n_stages=p,
            n_micro=m,
        )
        local = self.zb.create_schedule(cfg)
        return [[(n.type.value, n.microbatch, n.layer_group_idx) for n in seq] for seq in local]

    def _v_config(self, p: int, m: int, f: float, b: float, w: float, comm: float):
        return self.graph.GraphConfig(
            cost_f=[f] * p,
            cost_b=[b] * p,
            cost_w=[w] * p,
            cost_comm=float(comm),
            mem_f=[2.0] * p,
            mem_b=[-1.0] * p,
            mem_w=[-1.0] * p,
            max_chunks=2,
            n_stages=p,
            n_micro=m,
        )

    def zbv_schedule(self, p: int, m: int, c: StageCostsIn) -> list[list[tuple]]:
        f, b, w = c.chunk_means()
        graph = self.zbv.PipelineGraph(p, m, f, b, w, float(c.comm), 1, 0, -1, max_mem=None)
        local = graph.create_schedule(self._v_config(p, m, f, b, w, c.comm))
        return [[(n.type.value, n.microbatch, n.layer_group_idx) for n in seq] for seq in local]

    def v_greedy(self, p: int, m: int, c: StageCostsIn, setup: str) -> list[list[tuple]]:
        f, b, w = c.chunk_means()
        graph = self.zbv_greedy.PipelineGraph(p, m, setup, f, b, w, float(c.comm))
        local = graph.create_schedule(self._v_config(p, m, f, b, w, c.comm))
        return [[(n.type.value, n.microbatch, n.layer_group_idx) for n in seq] for seq in local]

    def v_auto_schedule(self, p: int, m: int, c: StageCostsIn, chunks: int) -> list[list[tuple]]:
        f, b, w = c.chunk_means()
        res = self.v_auto.schedule(p, m, (f, b, w, float(c.comm)), chunks)
        out = []
        for rank, seq in enumerate(res):  # chunk 0 is stage `rank`, chunk 1 stage 2p-1-rank
            out.append([(n.type, n.minibatch, rank if n.chunk == 0 else 2 * p - 1 - rank) for n in seq])
        return out


@dataclass(frozen=True)
class StageCostsIn:
    """One cost case: per-rank F, B, W (a rank's whole share of the model) and the p2p latency."""

    name: str
    f: tuple[float, ...]
    b: tuple[float, ...]
    w: tuple[float, ...]
    comm: float

    def model(self) -> CostModel:
        return CostModel(forward=self.f, backward=self.b, wgrad=self.w, comm=self.comm)

    def chunk_means(self) -> tuple[float, float, float]:
        """Mean per-kind cost of one V chunk (half a rank's share)."""
        n = len(self.f)
        return (sum(self.f) / n / 2, sum(self.b) / n / 2, sum(self.w) / n / 2)


def cost_cases(p: int) -> list[StageCostsIn]:
    """Unequal costs: W/B from 0.3 to 1, comm from 0 to 20 % of F, flat or varying by rank (the first and
    last ranks heavier, as embedding and loss make them, and a mild ripple in between); then B and W apart
    from F: a backward twice the forward, W heavier than B, the first and last ranks 1.5-2x the rest."""
    cases = []
    for name, bf, wb, comm, vary, ends in (
        ("equal", 1.0, 1.0, 0.0, False, 1.0),
        ("w.3-c.2", 1.0, 0.3, 0.2, False, 1.0),
        ("w.5-c.05-var", 1.1, 0.5, 0.05, True, 1.0),
        ("w.7-c.1", 1.0, 0.7, 0.1, False, 1.0),
        ("w.6-c.1-var", 1.1, 0.6, 0.1, True, 1.0),
        ("w1-c.2-var", 1.1, 1.0, 0.2, True, 1.0),
        ("w.3-c0-var", 1.1, 0.3, 0.0, True, 1.0),
        ("b2-w.5", 2.0, 0.5, 0.0, False, 1.0),
        ("b2-w1-c.1", 2.0, 1.0, 0.1, False, 1.0),
        ("w1.5-c.05", 1.0, 1.5, 0.05, False, 1.0),
        ("w2-c.1-var", 1.1, 2.0, 0.1, True, 1.0),
        ("ends1.5-w.5", 1.0, 0.5, 0.05, False, 1.5),
        ("ends2-b2-c.1", 2.0, 0.5, 0.1, False, 2.0),
    ):
        f, b, w = [], [], []
        for r in range(p):
            scale = ends if r in (0, p - 1) else 1.0
            if vary:
                scale = 1.0 + 0.08 * ((r * 7) % 5 - 2) / 2
                if r == 0:
                    scale += 0.15
                if r == p - 1:
                    scale += 0.25
            f.append(round(1000 * scale, 3))
            b.append(round(1000 * bf * scale, 3))
            w.append(round(b[-1] * wb, 3))
        cases.append(StageCostsIn(name, tuple(f), tuple(b), tuple(w), round(comm * sum(f) / p, 3)))
    return cases


# ------------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Figures:
    step: float
    steady: float
    peak: float


def figures(table: ScheduleTable, costs: CostModel) -> Figures:
    res = simulate(table, costs)
    stage_costs = costs.for_placement(table.placement)
    units = memory_units(table.placement, stage_costs.activation)
    peak = order_peak(table.compute_order(), units, stage_costs.fractions())
    return Figures(res.metrics.step_time, res.metrics.steady_bubble_rate, peak)


def reference_table(order: list[list[tuple]], p: int, m: int, v: int) -> ScheduleTable:
    placement = v_shape(p) if v == 2 else linear(p)
    compute = [[Node(NodeKind(k), mb, s) for k, mb, s in seq] for seq in order]
    table = ScheduleTable(placement, m, lower_comms(placement, m, compute), "reference", {})
    validate(table)
    return table


def verdict(ours: Figures, ref: Figures) -> str:
    def above(a: float, b: float) -> bool:
        return a > b + TOL * max(1.0, abs(b))

    if above(ours.step, ref.step) or above(ours.steady, ref.steady) or above(ours.peak, ref.peak):
        return "worse"
    if above(ref.step, ours.step) or above(ref.steady, ours.steady):
        return "better"
    return "equal"


@dataclass(frozen=True)
class Pair:
    label: str  # "ours <-> reference"
    algo: str
    v: int
    params: dict
    run: object  # (Reference, p, m, costs) -> order


def pairs(selected: set[str] | None) -> list[Pair]:
    out = [
        Pair("zero-bubble <-> ZB-H1", "zero-bubble", 1, {}, lambda R, p, m, c: R.zb_heuristic(p, m, c, p)),
        Pair("zb-h2 <-> ZB-H2", "zb-h2", 1, {}, lambda R, p, m, c: R.zb_heuristic(p, m, c, 2 * p - 1)),
        Pair(
            "zero-bubble-heuristic <-> auto ZB",
            "zero-bubble-heuristic",
            1,
            {},
            lambda R, p, m, c: R.zb_heuristic(p, m, c, p),
        ),
        Pair("zbv <-> zbv", "zbv", 2, {}, lambda R, p, m, c: R.zbv_schedule(p, m, c)),
        Pair("v-half <-> v-half", "v-half", 2, {}, lambda R, p, m, c: R.v_greedy(p, m, c, "half")),
        Pair("v-min <-> v-min", "v-min", 2, {}, lambda R, p, m, c: R.v_greedy(p, m, c, "min")),
    ]
    for num, den in ((1, 1), (3, 2), (2, 1)):  # budgets p, 1.5p, 2p in chunk activations

        def run(R, p, m, c, num=num, den=den):
            return R.v_auto_schedule(p, m, c, p * num // den)

        frac = f"{num}/{den}" if den > 1 else str(num)
        out.append(Pair(f"v-auto <-> V-auto ({frac}p chunks)", "v-auto", 2, {"budget": (num, den)}, run))
    return [x for x in out if selected is None or x.algo in selected]


def cached_reference(R: Reference, pair: Pair, p: int, m: int, c: StageCostsIn, cache: Path | None):
    key = f"{pair.label}|{p}|{m}|{c}"
    path = None
    if cache is not None:
        path = cache / (str(abs(hash_text(key))) + ".json")
        if path.is_file():
            data = json.loads(path.read_text())
            if data["key"] == key:
                return data["order"]
    with contextlib.redirect_stdout(io.StringIO()):  # the reference prints progress
        order = pair.run(R, p, m, c)
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": key, "order": order}))
        tmp.replace(path)
    return order


def hash_text(text: str) -> int:
    h = 1469598103934665603
    for ch in text.encode():
        h = ((h ^ ch) * 1099511628211) % (1 << 64)
    return h


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default=os.environ.get("PRIMUSPP_REFERENCE"))
    ap.add_argument("--pp", default="4,8,16", help="comma-separated pipeline sizes")
    ap.add_argument("--mb", default="1,2,4", help="comma-separated multiples of p for m")
    ap.add_argument("--algo", action="append", help="primuspp algorithm(s) to compare (default all)")
    ap.add_argument("--costs", action="append", help="cost case name(s) (default all)")
    ap.add_argument("--cache", help="directory keeping the reference's orders between runs")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    ap.add_argument(
        "--effort", choices=("fast", "auto", "full"), help="primuspp's search effort (default: auto)"
    )
    args = ap.parse_args()
    if not args.reference:
        print("reference not available (give --reference PATH or set PRIMUSPP_REFERENCE)")
        return 0
    try:
        R = Reference(Path(args.reference))
    except (FileNotFoundError, ImportError, SyntaxError) as err:
        print(f"reference not available ({err})")
        return 0
    cache = Path(args.cache) if args.cache else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    worst: dict[str, float] = defaultdict(lambda: float("-inf"))
    seconds: dict[str, float] = defaultdict(float)
    for pair in pairs(set(args.algo) if args.algo else None):
        for p in (int(x) for x in args.pp.split(",")):
            for mult in (int(x) for x in args.mb.split(",")):
                m = p * mult
                for c in cost_cases(p):
                    if args.costs and c.name not in args.costs:
                        continue
                    costs = c.model()
                    params = dict(pair.params)
                    if args.effort:
                        params["effort"] = args.effort
                    if "budget" in params:
                        num, den = params.pop("budget")
                        params["max_mem"] = p * num / den / 2
                    try:
                        ref_order = cached_reference(R, pair, p, m, c, cache)
                    except Exception as err:  # the reference fails on some sizes: nothing to compare
                        counts[pair.label]["no reference"] += 1
                        if args.verbose:
                            print(f"{pair.label} p={p} m={m} {c.name}: reference failed ({err!r:.80})")
                        continue
                    ref = figures(reference_table(ref_order, p, m, pair.v), costs)
                    if "max_mem" in params and ref.peak < params["max_mem"] - TOL:
                        params["max_mem"] = ref.peak  # v-auto at the memory the reference's table holds
                    forget()  # the floored generators' memos: gen s times the generator
                    start = time.perf_counter()
                    try:
                        table = build_schedule(pair.algo, p, pair.v, m, costs, **params)
                    except PrimusppError as err:
                        counts[pair.label]["worse"] += 1
                        print(f"{pair.label} p={p} m={m} {c.name}: primuspp refused ({err})")
                        continue
                    seconds[pair.label] += time.perf_counter() - start
                    ours = figures(table, costs)
                    v = verdict(ours, ref)
                    counts[pair.label]["cases"] += 1
                    counts[pair.label][v] += 1
                    gap = (ours.step - ref.step) / ref.step
                    worst[pair.label] = max(worst[pair.label], gap)
                    if args.verbose or v == "worse":
                        print(
                            f"{v:6} {pair.label:38} p={p:2} m={m:3} {c.name:13} "
                            f"step {ours.step:10.1f} / {ref.step:10.1f}  steady {ours.steady:.4f} / "
                            f"{ref.steady:.4f}  peak {ours.peak:.3g} / {ref.peak:.3g}",
                            flush=True,
                        )
    print()
    head = f"{'pair (primuspp <-> reference)':40} {'cases':>5} {'equal':>5} {'better':>6} {'worse':>5}"
    print(head + f" {'max step gap':>12} {'gen s':>6}")  # gap: (ours - reference) / reference, worst case
    total = defaultdict(int)
    for label, cnt in counts.items():
        for k in ("cases", "equal", "better", "worse"):
            total[k] += cnt[k]
        extra = f"  ({cnt['no reference']} without a reference result)" if cnt["no reference"] else ""
        print(
            f"{label:40} {cnt['cases']:5} {cnt['equal']:5} {cnt['better']:6} {cnt['worse']:5} "
            f"{worst[label]:+12.2%} {seconds[label]:6.1f}{extra}"
        )
    print(f"{'total':40} {total['cases']:5} {total['equal']:5} {total['better']:6} {total['worse']:5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
