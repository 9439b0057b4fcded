"""Step time, bubble rates and per-rank figures of a timeline (simulated or measured alike)."""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.trace.columns import IntervalColumns
from primuspp.trace.timeline import Timeline


@dataclass(frozen=True)
class RankMetrics:
    rank: int
    busy: float
    span: float
    total: float
    peak_memory: float


@dataclass(frozen=True)
class Metrics:
    """`step_time` is the makespan (first start to last end). `bubble_rate` = 1 - mean(busy) / step_time.
    `steady_bubble_rate` = 1 - mean(busy) / max(span): the zero-bubble papers' metric, where consecutive
    iterations overlap."""

    step_time: float
    bubble_rate: float
    steady_bubble_rate: float
    peak_memory: float
    per_rank: tuple[RankMetrics, ...]
    p2p_transfers: int = 0


def steady(timelines: list[Timeline]) -> list[Timeline]:
    """A measured run's iterations that count: all but the first (warm-up) when there are more than two."""
    return timelines[1:] if len(timelines) > 2 else timelines


def typical(timelines: list[Timeline] | tuple[Timeline, ...]) -> int:
    """The index of the iteration whose step time is the run's median (the lower median; the earliest of
    equals): not a warm-up iteration nor an outlier."""
    steps = [timeline_metrics(t).step_time for t in timelines]
    order = sorted(range(len(steps)), key=lambda i: (steps[i], i))
    return order[(len(order) - 1) // 2]


def has_memory_curve(timeline: Timeline) -> bool:
    """Whether the run recorded activation memory over time (not only a peak figure)."""
    return any(len(rt.memory) > 1 for rt in timeline.ranks)


def timeline_metrics(timeline: Timeline) -> Metrics:
    per_rank = []
    first, last = float("inf"), float("-inf")
    for rt in timeline.ranks:
        ivs = rt.intervals
        if isinstance(ivs, IntervalColumns) and ivs:
            # the simulator's columns: the same values without building the intervals (the busy time
            # summed by Python's sum, in the same order, as below)
            lo, hi = float(ivs.start.min()), float(ivs.end.max())
            busy = sum((ivs.end - ivs.start).tolist())
        elif ivs:
            lo = min(iv.start for iv in rt.intervals)
            hi = max(iv.end for iv in rt.intervals)
            busy = sum(iv.end - iv.start for iv in rt.intervals)
        else:
            lo = hi = busy = 0.0
        first, last = min(first, lo), max(last, hi)
        per_rank.append(RankMetrics(rt.rank, busy, hi - lo, hi, rt.peak_memory))
    if not per_rank:
        return Metrics(0.0, 0.0, 0.0, 0.0, ())
    step = last - first if last > first else 0.0
    mean_busy = sum(r.busy for r in per_rank) / len(per_rank)
    max_span = max(r.span for r in per_rank)
    return Metrics(
        step_time=step,
        bubble_rate=1.0 - mean_busy / step if step > 0 else 0.0,
        steady_bubble_rate=1.0 - mean_busy / max_span if max_span > 0 else 0.0,
        peak_memory=max(r.peak_memory for r in per_rank),
        per_rank=tuple(per_rank),
        p2p_transfers=len(timeline.transfers),
    )
