"""The simulator: run a lowered table under a cost model and measure it."""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.gcpause import without_gc
from primuspp.schedule.costs import CostModel, StageCosts
from primuspp.schedule.lowering import stage_peers
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import node_times
from primuspp.trace.metrics import Metrics, timeline_metrics
from primuspp.trace.timeline import Interval, RankTimeline, Timeline, Transfer

_F, _B, _W, _BW, _FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB
_OFFLOAD, _RELOAD = NodeKind.OFFLOAD, NodeKind.RELOAD


@dataclass(frozen=True)
class SimResult:
    name: str
    table: ScheduleTable
    costs: CostModel
    timeline: Timeline
    metrics: Metrics


@without_gc
def simulate(table: ScheduleTable, costs: CostModel | None = None, name: str | None = None) -> SimResult:
    """Discrete-event run of `table`: compute nodes occupy their rank; a SEND makes its tensor arrive at the
    peer `comm` later without occupying compute; a consumer starts at max(rank free, arrival)."""
    costs = costs or CostModel()
    placement = table.placement
    stage_costs = costs.for_placement(placement)
    # Comm nodes neither take time nor block in this model: time the compute and memory nodes alone.
    order = table.compute_order()
    timing = node_times(placement, table.num_microbatches, order, stage_costs)
    f_end, g_end = timing.forward_end, timing.grad_end
    chunk = placement.stage_chunk
    n_stages = placement.num_stages
    fwd_peer, bwd_peer = stage_peers(placement)
    comm = stage_costs.comm
    ranks = []
    transfers = []
    for r, nodes in enumerate(order):
        starts, ends = timing.starts[r], timing.ends[r]
        intervals: list[Interval] = []
        add = intervals.append
        for i, node in enumerate(nodes):
            kind = node.kind
            if not kind.is_compute:
                continue
            s = node.stage
            back = None
            if kind is _FB:
                bp = node.parts[1]
                back = (bp.kind.text, bp.microbatch, bp.stage, chunk[bp.stage])
                parts = node.parts
            else:
                parts = (node,)
            add(Interval(kind.text, node.microbatch, s, chunk[s], starts[i], ends[i], back))
            # a valid table sends every cross-rank output once, when it is produced
            for part in parts:
                kind, s = part.kind, part.stage
                if kind is _F:
                    peer, sent, tag = fwd_peer[s], f_end, "F"
                elif kind is _W:
                    continue
                else:
                    peer, sent, tag = bwd_peer[s], g_end, "B"
                if peer >= 0:
                    t = sent[part.microbatch * n_stages + s]
                    transfers.append(Transfer(tag, part.microbatch, s, r, peer, t, t + comm))
        memory, peak = _memory_curve(nodes, starts, ends, stage_costs)
        ranks.append(RankTimeline(r, intervals, memory, peak))
    label = name or table.algorithm
    timeline = Timeline(
        label,
        table.pp,
        table.vpp,
        table.num_microbatches,
        ranks,
        table.algorithm,
        "simulated",
        "0",
        transfers,
    )
    return SimResult(label, table, costs, timeline, timeline_metrics(timeline))


def _memory_curve(nodes, starts, ends, costs: StageCosts) -> tuple[list[tuple[float, float]], float]:
    """Activation memory over time: F allocates at its start; B frees `b_free_fraction`, W the rest, BW all,
    at their ends; OFFLOAD/RELOAD move what is resident to host and back.

    Events at equal times keep the rank's table order (then a node's start before its end): a rank runs its
    nodes one after another, so an earlier node's free precedes a later node's allocation at the same instant,
    and a zero-length F allocates before the B that frees it. Sorting frees first regardless of order made
    zero costs free before allocating (a negative curve, peak 0)."""
    act = costs.activation
    bf = costs.b_free or (costs.b_free_fraction,) * len(act)
    resident: dict[tuple[int, int], float] = {}
    offloaded: dict[tuple[int, int], float] = {}
    events: list[tuple[float, int, int, float]] = []  # (time, node index, 0 at start / 1 at end, delta)
    append = events.append

    def backward(kind, mb, s, t, i):
        key = (mb, s)
        freed = act[s] if kind is _BW else act[s] * bf[s]
        resident[key] = resident.get(key, act[s]) - freed
        append((t, i, 1, -freed))

    for i, node in enumerate(nodes):
        kind = node.kind
        if kind is _F:
            append((starts[i], i, 0, act[node.stage]))
        elif kind is _BW:
            append((ends[i], i, 1, -act[node.stage]))
        elif kind is _B:
            backward(kind, node.microbatch, node.stage, ends[i], i)
        elif kind is _W:
            key = (node.microbatch, node.stage)
            append((ends[i], i, 1, -resident.pop(key, act[node.stage] * (1 - bf[node.stage]))))
        elif kind is _FB:
            fpart, bpart = node.parts
            append((starts[i], i, 0, act[fpart.stage]))
            backward(bpart.kind, bpart.microbatch, bpart.stage, ends[i], i)
        elif kind is _OFFLOAD:
            key = (node.microbatch, node.stage)
            amount = resident.get(key, act[node.stage])
            offloaded[key] = amount
            resident[key] = 0.0
            append((starts[i], i, 0, -amount))
        elif kind is _RELOAD:
            key = (node.microbatch, node.stage)
            amount = offloaded.pop(key, 0.0)
            resident[key] = amount
            append((starts[i], i, 0, amount))
    events.sort()
    level, peak = 0.0, 0.0
    curve = [(0.0, 0.0)]
    for t, _, _, delta in events:
        level += delta
        if -1e-9 < level < 1e-9:
            level = 0.0
        curve.append((t, level))
        if level > peak:
            peak = level
    return curve, peak
