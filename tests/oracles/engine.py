"""The simulator's readable reference: the same run as `engine.simulate`, node by node, with Python objects.

`engine.simulate` computes the same timeline as array passes; a test holds the two identical (intervals,
transfers, memory curves and metrics, bit for bit) over the registry and several cost models."""

from __future__ import annotations

from primuspp.schedule.costs import CostModel, StageCosts
from primuspp.schedule.placement import stage_peers
from primuspp.schedule.semantics import ACT, GRAD, SEMANTICS, order_memory
from primuspp.schedule.table import ScheduleTable
from primuspp.sim.engine import SimResult
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.timeline import Interval, RankTimeline, Timeline, Transfer
from tests.oracles.timing import node_times_reference


def simulate_reference(
    table: ScheduleTable, costs: CostModel | None = None, name: str | None = None
) -> SimResult:
    """`engine.simulate`, one node at a time: compute nodes occupy their rank; a SEND makes its tensor arrive
    at the peer `comm` later without occupying compute; a consumer starts at max(rank free, arrival)."""
    costs = costs or CostModel()
    placement = table.placement
    stage_costs = costs.for_placement(placement)
    # Comm nodes neither take time nor block in this model: time the compute and memory nodes alone.
    order = table.compute_order()
    timing = node_times_reference(placement, table.num_microbatches, order, stage_costs)
    f_end, g_end = timing.forward_end, timing.grad_end
    chunk = placement.stage_chunk
    n_stages = placement.num_stages
    fwd_peer, bwd_peer = stage_peers(placement)
    comm = stage_costs.comm
    # per kind (semantics; keyed by text, which hashes in C where an Enum member hashes in Python): for
    # each datum it produces, the rank it goes to from each stage, when it was produced, the transfer's tag
    route = {ACT: (fwd_peer, f_end, "F"), GRAD: (bwd_peer, g_end, "B")}
    outs = {kind.text: tuple(route[what] for what in sem.produces) for kind, sem in SEMANTICS.items()}
    composite = {kind.text: bool(sem.parts) for kind, sem in SEMANTICS.items()}
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
            if not composite[kind.text]:
                add(Interval(kind.text, node.microbatch, s, chunk[s], starts[i], ends[i]))
                # a valid table sends every cross-rank output once, when it is produced (semantics: what
                # each kind produces; an activation goes to the next stage's rank, a grad to the previous)
                for peers, sent, tag in outs[kind.text]:
                    peer = peers[s]
                    if peer >= 0:
                        t = sent[node.microbatch * n_stages + s]
                        transfers.append(Transfer(tag, node.microbatch, s, r, peer, t, t + comm))
                continue
            # a composite (FB): one interval, its backward part alongside; its parts' outputs
            bp = node.parts[1]
            back = (bp.kind.text, bp.microbatch, bp.stage, chunk[bp.stage])
            add(Interval(kind.text, node.microbatch, s, chunk[s], starts[i], ends[i], back))
            for part in node.parts:
                for peers, sent, tag in outs[part.kind.text]:
                    ps = part.stage
                    peer = peers[ps]
                    if peer >= 0:
                        t = sent[part.microbatch * n_stages + ps]
                        transfers.append(Transfer(tag, part.microbatch, ps, r, peer, t, t + comm))
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
