"""A cost model measured from a run: per-stage F/B/W medians, p2p latency and activation per microbatch.

Works on any timeline (our dumps, Primus' simulator output, real runs). Where intervals name their stage,
costs are per virtual stage; otherwise per rank (the sum of the rank's chunk medians, split evenly over
its chunks by the cost model). Runs that only record full backwards (BW) cannot tell B from W: their BW
median is split `bw_split` : 1 - `bw_split` into B and W, an assumption the caller may override.

- **comm**: the simulator's `comm` is the delay from a producer's end to the start of a consumer on another
  rank that was waiting for it. Measured on every cross-rank hand-off (F(mb, s) -> F(mb, s+1) and
  B(mb, s+1) -> B(mb, s)) whose consumer rank was idle when the producer finished: median of consumer start
  - producer end (0 when no hand-off qualifies). Across hosts this includes the clocks' offset.
- **fb_overlap**: where the run has FB nodes (an FB node's two parts overlapped, or run back to back), the
  median of an FB node's time over its parts' F and B (+ W) medians; 1 without FB nodes.
- **memory**: when the memory curve is sampled after every compute node (our runtime and emulator dumps),
  each stage's activation is the median rise over its F nodes and its `b_free_fraction` is the median part
  of that an B frees (negative when B leaves more behind, as a weight-grad store does); otherwise the
  activation is the median rise of the curve at a forward (one value for every stage). Values are in the
  run's memory unit (bytes for real runs).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.trace.metrics import steady
from primuspp.trace.reconstruct import read_labelled
from primuspp.trace.timeline import Interval, Timeline


@dataclass(frozen=True)
class Calibration:
    """`costs`: per virtual stage of the measured run's placement (or per rank when the run does not name
    stages). `portable()` gives the same costs per rank, for projecting any placement with the same p.
    `activation_per_microbatch`: one microbatch's activations through a whole rank (mean over ranks), in
    `memory_unit`: what one unit of a simulated peak is worth."""

    costs: CostModel
    per_stage: bool
    bw_split_assumed: bool
    samples: int  # intervals measured
    comm_samples: int
    activation_per_microbatch: float = 0.0
    memory_unit: str = "microbatches"
    memory_per_stage: bool = False
    stage_rank: tuple[int, ...] = ()
    #: how a run without microbatch/chunk labels was labelled before measuring ("" when it had them)
    labels: str = ""
    pp: int = 0  # the measured run's size (sizes a command line leaves out come from it)
    micro_batches: int = 0

    def portable(self) -> CostModel:
        """The costs with one value per rank (a rank's stages summed; its B-freed part weighted by
        activation), valid for any placement over the same number of ranks. Activation measured in a real
        unit (bytes) comes in microbatch units: 1 = `activation_per_microbatch`, one microbatch through an
        average rank (so memory limits and budgets keep their meaning)."""
        c = self.costs
        scale = 1.0
        if self.memory_unit != "microbatches" and self.activation_per_microbatch > 0:
            scale = 1.0 / self.activation_per_microbatch
        if not self.per_stage or not self.stage_rank:
            return c if scale == 1.0 else replace(c, activation=_scaled(c.activation, scale))
        pp = max(self.stage_rank) + 1

        def per_rank(value):  # a scalar already means a rank's share
            return tuple(rank_sums(value, self.stage_rank, pp)) if isinstance(value, tuple) else value

        act = c.activation if isinstance(c.activation, tuple) else (c.activation,) * len(self.stage_rank)
        bf = c.b_free_fraction
        if isinstance(bf, tuple):
            freed = per_rank(tuple(a * f for a, f in zip(act, bf, strict=True)))
            bf = tuple(f / h if h else 0.0 for f, h in zip(freed, per_rank(act), strict=True))
        return CostModel(
            forward=per_rank(c.forward),
            backward=per_rank(c.backward),
            wgrad=per_rank(c.wgrad),
            comm=c.comm,
            activation=_scaled(per_rank(c.activation), scale),
            b_free_fraction=bf,
            fb_overlap=c.fb_overlap,
        )


def rank_sums(values: tuple[float, ...] | float, stage_rank: Sequence[int], pp: int) -> list[float]:
    """Per-stage values summed over each rank's stages (a scalar: already each rank's share)."""
    if not isinstance(values, tuple):
        return [float(values)] * pp
    out = [0.0] * pp
    for s, x in enumerate(values):
        out[stage_rank[s]] += x
    return out


def _scaled(value: float | tuple[float, ...], k: float) -> float | tuple[float, ...]:
    return tuple(x * k for x in value) if isinstance(value, tuple) else value * k


#: the chunk slot of intervals that do not say which chunk they ran (per-rank calibration)
_UNKNOWN = 999


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
                where = iv.stage if per_stage else rt.rank * 1000 + (iv.chunk if iv.chunk >= 0 else _UNKNOWN)
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
            # a chunk-less interval is one of the rank's v chunks: the rank's share is v of them
            share = cost(kind, where) * (first.vpp if where % 1000 == _UNKNOWN else 1)
            ranks[where // 1000] = ranks.get(where // 1000, 0.0) + share
        return tuple(ranks.get(r, 0.0) for r in range(first.pp))

    stage_rank = _stage_ranks(timelines) if per_stage else ()
    comm, comm_n = _comm_latency(timelines)
    memory = _stage_memory(timelines, keys) if per_stage else None
    if memory is not None:
        act, bfree = memory
        per_rank_act = [0.0] * first.pp
        for s, a in zip(keys, act, strict=True):
            per_rank_act[stage_rank[s]] += a
        act_mb = statistics.fmean(per_rank_act)
        activation: float | tuple[float, ...] = act
        b_free: float | tuple[float, ...] = bfree if has_w else 0.0
    else:
        act_mb = _activation_per_microbatch(timelines)
        activation, b_free = act_mb or 1.0, 0.0
    costs = CostModel(
        forward=vector("F"),
        backward=vector("B"),
        wgrad=vector("W"),
        comm=comm,
        activation=activation,
        b_free_fraction=b_free,
        fb_overlap=_fb_overlap(timelines, cost) if per_stage else 1.0,
    )
    return Calibration(
        costs,
        per_stage,
        not has_w,
        n,
        comm_n,
        act_mb,
        first.memory_unit,
        memory is not None,
        tuple(stage_rank[s] for s in keys) if per_stage and keys == list(range(len(keys))) else (),
        pp=first.pp,
        micro_batches=first.micro_batches,
    )


def _fb_overlap(timelines: list[Timeline], cost: Any) -> float:
    """The measured `fb_overlap`: median over FB intervals of their duration / (their forward part's F
    median + their backward part's B (+ W for a BW part) median); 1.0 without FB intervals."""
    ratios = []
    for tl in timelines:
        for rt in tl.ranks:
            for iv in rt.intervals:
                if iv.kind != "FB" or iv.backward is None:
                    continue
                kind, _, stage, _ = iv.backward
                alone = cost("F", iv.stage) + cost("B", stage) + (cost("W", stage) if kind == "BW" else 0.0)
                if alone > 0:
                    ratios.append((iv.end - iv.start) / alone)
    return _median(ratios) if ratios else 1.0


def _stage_ranks(timelines: list[Timeline]) -> dict[int, int]:
    return {iv.stage: rt.rank for tl in timelines for rt in tl.ranks for iv in rt.intervals}


def _comm_latency(timelines: list[Timeline]) -> tuple[float, int]:
    """Median delay from a producer's end to its waiting consumer's start on another rank (see the module
    doc), or 0 when no consumer waited."""
    gaps = []
    for tl in timelines:
        fwd: dict[tuple[int, int], tuple[int, Interval]] = {}
        bwd: dict[tuple[int, int], tuple[int, Interval]] = {}
        idle_since: dict[int, float] = {}  # id(interval) -> end of the rank's previous interval
        for rt in tl.ranks:
            prev_end = float("-inf")
            for iv in sorted(rt.intervals, key=lambda iv: iv.start):
                idle_since[id(iv)] = prev_end
                prev_end = max(prev_end, iv.end)
                if iv.stage < 0 or iv.microbatch < 0:
                    continue
                if iv.kind in ("F", "FB"):
                    fwd[(iv.microbatch, iv.stage)] = (rt.rank, iv)
                if iv.kind in ("B", "BW"):
                    bwd[(iv.microbatch, iv.stage)] = (rt.rank, iv)
                elif iv.kind == "FB" and iv.backward is not None:
                    _, bmb, bstage, _ = iv.backward
                    bwd[(bmb, bstage)] = (rt.rank, iv)
        for table, step in ((fwd, 1), (bwd, -1)):
            for (mb, s), (rank, producer) in table.items():
                hit = table.get((mb, s + step))
                if hit is None or hit[0] == rank:
                    continue
                consumer = hit[1]
                if idle_since[id(consumer)] <= producer.end and consumer.start >= producer.end - 1e-9:
                    gaps.append(consumer.start - producer.end)
    return max(_median(gaps), 0.0), len(gaps)


def _stage_memory(timelines: list[Timeline], stages: list[int]) -> tuple[tuple, tuple] | None:
    """Per stage (activation, b_free_fraction) from curves sampled after every compute node, else None."""
    rises: dict[int, list[float]] = {}
    b_deltas: dict[int, list[float]] = {}
    for tl in timelines:
        for rt in tl.ranks:
            ivs = sorted(rt.intervals, key=lambda iv: iv.end)
            points = rt.memory[1:]
            if not ivs or len(points) != len(ivs):
                return None
            if any(abs(t - iv.end) > 1e-6 for (t, _), iv in zip(points, ivs, strict=True)):
                return None
            level = rt.memory[0][1]
            for iv, (_, after) in zip(ivs, points, strict=True):
                if iv.kind == "F":
                    rises.setdefault(iv.stage, []).append(after - level)
                elif iv.kind == "B":
                    b_deltas.setdefault(iv.stage, []).append(level - after)
                level = after
    act = tuple(max(_median(rises.get(s, [])), 0.0) for s in stages)
    if not any(act):
        return None
    bfree = tuple(
        _median(b_deltas[s]) / a if a and b_deltas.get(s) else 0.0 for s, a in zip(stages, act, strict=True)
    )
    return act, tuple(min(f, 1.0) for f in bfree)


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
    """Calibrate from a pp_data directory (a real-run dump or a simulate result directory).

    A dump without microbatch/chunk labels (Primus' older format) is labelled first from the schedule that
    produced it (as `viz` does): with v > 1 each chunk is then measured on its own, instead of both chunks'
    intervals pooled into one median that stands for only one of them."""
    timelines, labels = read_labelled(path)
    return replace(calibrate(steady(timelines), bw_split), labels=labels)  # the first includes warm-up
