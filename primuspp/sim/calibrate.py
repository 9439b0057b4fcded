"""A cost model measured from a run: per-stage F/B/W medians, p2p latency and activation per microbatch.

Works on any timeline (our dumps, Primus' simulator output, real runs). Where intervals name their stage,
costs are per virtual stage; otherwise per rank (the sum of the rank's chunk medians, split evenly over
its chunks by the cost model). Runs that only record full backwards (BW) cannot tell B from W: their BW
median is split `bw_split` : 1 - `bw_split` into B and W, an assumption the caller may override.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import pairwise

from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.trace.pp_data import read_pp_data
from primuspp.trace.timeline import Timeline


@dataclass(frozen=True)
class Calibration:
    costs: CostModel
    per_stage: bool
    bw_split_assumed: bool
    samples: int  # intervals measured
    comm_samples: int


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def calibrate(timelines: list[Timeline], bw_split: float = 0.5) -> Calibration:
    """Costs from one or more iterations of the same run (later iterations are usually steadier)."""
    if not timelines:
        raise ConfigError("calibration: no iterations to measure", key="costs_from")
    first = timelines[0]
    per_stage = all(iv.stage >= 0 for tl in timelines for rt in tl.ranks for iv in rt.intervals)
    by_key: dict[tuple[str, int], list[float]] = {}
    n = 0
    for tl in timelines:
        for rt in tl.ranks:
            for iv in rt.intervals:
                if iv.kind == "FB":
                    continue  # overlapped: says nothing about F or B alone
                where = iv.stage if per_stage else rt.rank * 1000 + max(iv.chunk, 0)
                by_key.setdefault((iv.kind, where), []).append(iv.end - iv.start)
                n += 1
    if not n:
        raise ConfigError("calibration: the run has no compute intervals", key="costs_from")
    has_w = any(kind == "W" for kind, _ in by_key)
    keys = sorted({w for _, w in by_key})

    def cost(kind: str, where: int) -> float:
        if kind == "F":
            return _median(by_key.get(("F", where), []))
        if has_w:
            return _median(by_key.get((kind, where), []))
        full = _median(by_key.get(("BW", where), []) + by_key.get(("B", where), []))
        return full * (bw_split if kind == "B" else 1.0 - bw_split)

    def vector(kind: str) -> tuple[float, ...]:
        if per_stage:
            return tuple(cost(kind, s) for s in keys)
        ranks: dict[int, float] = {}
        for where in keys:
            ranks[where // 1000] = ranks.get(where // 1000, 0.0) + cost(kind, where)
        return tuple(ranks.get(r, 0.0) for r in range(first.pp))

    comm, comm_n = _comm_latency(timelines)
    act = _activation_per_microbatch(timelines)
    costs = CostModel(
        forward=vector("F"), backward=vector("B"), wgrad=vector("W"), comm=comm, activation=act or 1.0
    )
    return Calibration(costs, per_stage, not has_w, n, comm_n)


def _comm_latency(timelines: list[Timeline]) -> tuple[float, int]:
    """Median of transfer latencies when recorded, else 0 (a dump without transfers cannot say)."""
    gaps = [tr.arrived - tr.sent for tl in timelines for tr in tl.transfers]
    return _median(gaps), len(gaps)


def _activation_per_microbatch(timelines: list[Timeline]) -> float:
    """Rank-share activation of one microbatch: the median rise of the memory curve at a forward, times the
    number of chunks a rank holds."""
    rises = []
    for tl in timelines:
        for rt in tl.ranks:
            levels = [level for _, level in rt.memory]
            rises.extend(b - a for a, b in pairwise(levels) if b > a)
    return _median(rises) * timelines[0].vpp if rises else 0.0


def costs_from_dir(path: str, bw_split: float = 0.5) -> Calibration:
    """Calibrate from a pp_data directory (a real-run dump or a simulate result directory)."""
    timelines = read_pp_data(path)
    steady = timelines[1:] if len(timelines) > 2 else timelines  # the first iteration includes warm-up
    return calibrate(steady, bw_split)
