"""Pick the best of several candidate compute orders under a cost model and a memory cap.

Generators that try several constructions or tie-break policies hand their candidates here. Each is timed
with `schedule.timing.node_times` (the simulator's own timing model, without importing the simulator) and
its per-rank peak activation is counted from the order alone: on one rank nodes run one after another, so
what is resident when an F starts depends on which nodes came before it, not on their durations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from primuspp.algorithms.base import ComputeOrder
from primuspp.errors import ScheduleError
from primuspp.schedule import semantics
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
from primuspp.schedule.timing import node_time_arrays, node_times


@dataclass(frozen=True)
class Score:
    makespan: float
    max_span: float
    peak: float

    def key(self, objective: str) -> tuple[float, float, float]:
        """`span`: the papers' steady metric first (longest rank span), then step time; `step`: reverse.
        Ties go to the lower peak (memory a budget allows but nothing gains from stays unused)."""
        if objective == "span":
            return (self.max_span, self.makespan, self.peak)
        return (self.makespan, self.max_span, self.peak)


def memory_units(placement: Placement, activation: Sequence[float]) -> list[float]:
    """Each stage's activation in microbatch units of its rank: 1 = all the activations one microbatch
    leaves on that rank (a V chunk of an evenly split model holds 0.5)."""
    units = [0.0] * placement.num_stages
    for route in placement.routes:
        per_rank: dict[int, float] = {}
        for s in route:
            r = placement.stage_rank[s]
            per_rank[r] = per_rank.get(r, 0.0) + activation[s]
        for s in route:
            total = per_rank[placement.stage_rank[s]]
            units[s] = activation[s] / total if total > 0 else 0.0
    return units


def order_peak(
    order: Sequence[Sequence[Node]], units: Sequence[float], b_free: float | Sequence[float]
) -> float:
    """Highest activation (in `units`) any rank holds: the simulator's memory model (`semantics.order_peak`)
    in microbatch units. `b_free`: the part B frees, one value per stage (or one for all). An ArrayOrder is
    counted as array passes (`schedule.memory_levels`, the same events and float operations)."""
    b_free = semantics.per_stage(b_free, len(units))
    if isinstance(order, ArrayOrder):
        peaks = array_rank_peaks(order, units, b_free)
        if peaks is not None:
            return max(peaks, default=0.0)
    return semantics.order_peak(order, units, b_free)


def array_rank_peaks(
    order: ArrayOrder, units: Sequence[float], b_free: Sequence[float]
) -> list[float] | None:
    """Each rank's peak (`semantics.order_memory`'s) of an ArrayOrder as array passes
    (`schedule.memory_levels`, the same events and float operations), or None where the arrays
    cannot reproduce it (the caller walks the Nodes). `b_free`: one value per stage."""
    import numpy as np

    from primuspp.schedule.memory_levels import memory_levels

    at = np.zeros(order.num_nodes())  # the peak does not depend on when the events happen
    levels = memory_levels(order.rows, order.first, at, at, units, b_free)
    return None if levels is None else [float(peak) for _, _, peak in levels]


def score(
    placement: Placement, m: int, order: ComputeOrder, costs: StageCosts, b_free: float | Sequence[float]
) -> Score:
    units = memory_units(placement, costs.activation)
    return timed_score(placement, m, order, costs, order_peak(order, units, b_free))


def timed_score(placement: Placement, m: int, order: ComputeOrder, costs: StageCosts, peak: float) -> Score:
    """`score` with the peak already known (a search that changed one rank recounts that rank only)."""
    if isinstance(order, ArrayOrder):
        return _timed_score_arrays(placement, m, order, costs, peak)
    timing = node_times(placement, m, order, costs)
    first, last = float("inf"), float("-inf")
    max_span = 0.0
    for r, seq in enumerate(order):
        lo = hi = None
        for node, start, end in zip(seq, timing.starts[r], timing.ends[r], strict=True):
            if node.kind.is_compute:
                if lo is None:
                    lo = start
                hi = end
        if lo is not None:
            first, last = min(first, lo), max(last, hi)
            max_span = max(max_span, hi - lo)
    return Score(last - first if last > first else 0.0, max_span, peak)


def _timed_score_arrays(
    placement: Placement, m: int, order: ArrayOrder, costs: StageCosts, peak: float
) -> Score:
    """`timed_score` of an ArrayOrder: the same times (`node_time_arrays`) and the same min/max per rank,
    as array passes."""
    import numpy as np

    from primuspp.schedule.array_order import KINDS

    times = node_time_arrays(placement, m, order, costs)
    is_compute = np.array([k.is_compute for k in KINDS], dtype=bool)[order.rows["node_kind"]]
    idx = np.flatnonzero(is_compute)
    if not len(idx):
        return Score(0.0, 0.0, peak)
    rank = np.searchsorted(order.first, idx, "right") - 1
    cut = np.flatnonzero(np.diff(rank)) + 1
    lo = times.starts[idx[np.concatenate(([0], cut))]]
    hi = times.ends[idx[np.concatenate((cut - 1, [len(idx) - 1]))]]
    first, last = float(lo.min()), float(hi.max())
    max_span = max(0.0, float((hi - lo).max()))
    return Score(last - first if last > first else 0.0, max_span, peak)


def pick(
    placement: Placement,
    m: int,
    candidates: Sequence[tuple[str, ComputeOrder] | tuple[str, ComputeOrder, Score]],
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
) -> tuple[str, ComputeOrder, Score]:
    """The best candidate whose peak fits `cap` (None: no cap); earlier candidates win exact ties. A candidate
    may carry its Score already (a greedy plan knows its own); the others are timed here."""
    best: tuple[str, ComputeOrder, Score] | None = None
    if len(candidates) == 1 and len(candidates[0]) == 2:  # nothing to compare: check the cap, skip timing
        name, order = candidates[0]
        if cap is None:  # nor a cap to check: a lone candidate is not scored at all
            return name, order, Score(float("nan"), float("nan"), float("nan"))
        peak = order_peak(order, memory_units(placement, costs.activation), costs.fractions())
        if cap is None or peak <= cap + 1e-9:
            return name, order, Score(float("nan"), float("nan"), peak)
        candidates = []
    for cand in candidates:
        name, order = cand[0], cand[1]
        sc = cand[2] if len(cand) == 3 else score(placement, m, order, costs, costs.fractions())
        if cap is not None and sc.peak > cap + 1e-9:
            continue
        if best is None or sc.key(objective) < best[2].key(objective):
            best = (name, order, sc)
    if best is None:  # every generator includes a candidate that fits any admissible cap
        raise ScheduleError(f"no candidate schedule fits an activation cap of {cap:g}", key="max_mem")
    return best


def lower_bounds(placement: Placement, order: ComputeOrder, costs: StageCosts) -> tuple[float, float]:
    """(longest span, step time) no order of the same nodes can go below: a rank's span is at least its
    busy time, and it cannot start before the first forward's activation can reach it (the route's earlier
    forwards plus `comm` per rank crossed), so the step ends no earlier than that plus its busy time."""
    earliest = [float("inf")] * placement.pp
    for route in placement.routes:
        t, prev = 0.0, None
        for s in route:
            r = placement.stage_rank[s]
            if prev is not None and prev != r:
                t += costs.comm
            earliest[r] = min(earliest[r], t)
            t += costs.forward[s]
            prev = r
    span = step = 0.0
    if isinstance(order, ArrayOrder):
        busy_of, held = _array_busy(order, costs), order.lengths()
    else:
        busy_of = [sum(costs.duration(n) for n in seq if n.kind.is_compute) for seq in order]
        held = [len(seq) for seq in order]
    for r, busy in enumerate(busy_of):
        span = max(span, busy)
        if held[r]:
            step = max(step, earliest[r] + busy)
    return span, step


def _array_busy(order: ArrayOrder, costs: StageCosts) -> list[float]:
    """Each rank's compute time, `sum(costs.duration(n) for n in seq if n.kind.is_compute)` as array
    passes: the same durations (`timing_arrays.node_durations`) added in the same order (bincount adds its
    weights in order, from 0.0; a memory node adds 0.0, which changes no sum)."""
    import numpy as np

    from primuspp.schedule.array_order import KINDS
    from primuspp.schedule.timing_arrays import node_durations

    d = node_durations(order.rows, order.first, costs)
    is_compute = np.array([k.is_compute for k in KINDS], dtype=bool)[order.rows["node_kind"]]
    lengths = np.diff(order.first)
    rank = np.repeat(np.arange(len(lengths)), lengths)
    return np.bincount(rank, weights=np.where(is_compute, d, 0.0), minlength=len(lengths)).tolist()
