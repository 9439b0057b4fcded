"""The simulator: run a lowered table under a cost model and measure it."""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.gcpause import without_gc
from primuspp.schedule.costs import CostModel, StageCosts
from primuspp.schedule.lowering import stage_peers
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.semantics import order_memory
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import node_times
from primuspp.trace.metrics import Metrics, timeline_metrics
from primuspp.trace.timeline import Interval, RankTimeline, Timeline, Transfer

_F, _B, _W, _BW, _FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB


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
    """Activation memory over time, from the one memory model (`semantics.order_memory`): each effect at
    its node's start or end. A rank's events are in table order, which is their order in time, so an
    earlier node's free precedes a later node's allocation at the same instant and a zero-length F
    allocates before the B that frees it (sorting frees first made zero costs go negative, peak 0)."""
    act = costs.activation
    curve, peak = order_memory(nodes, act, costs.fractions(), starts, ends)
    curve.insert(0, (0.0, 0.0))
    return curve, peak
