"""The simulator: run a lowered table under a cost model and measure it.

The run is a few array passes over the table's compute order (`array_order.order_arrays`: one row per node,
one per part of a composite node): the times of every node (`timing.node_time_arrays`), then the intervals,
transfers and memory curves as numpy columns. The timeline's lists (`RankTimeline.intervals`,
`Timeline.transfers`, `RankTimeline.memory`) are lazy views of those columns (`trace.columns`): their objects
are built only when someone reads them, and the metrics are reductions over the columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from primuspp.schedule.array_order import KINDS, kinds_present, one_row_per_node, order_arrays
from primuspp.schedule.compact import LoweredRanks
from primuspp.schedule.costs import CostModel
from primuspp.schedule.memory_levels import memory_levels
from primuspp.schedule.placement import stage_peers
from primuspp.schedule.semantics import ACT, GRAD, SEMANTICS, order_memory
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import node_time_arrays
from primuspp.trace.columns import CurveColumns, IntervalColumns, TransferColumns
from primuspp.trace.metrics import Metrics, timeline_metrics
from primuspp.trace.timeline import RankTimeline, Timeline

_NAMES = tuple(k.text for k in KINDS)
_TAGS = ("F", "B")  # a transfer's tag: the activation (F) or the input grad (B)
# per kind code: a compute kind; a composite one
_IS_COMPUTE = np.array([k.is_compute for k in KINDS], dtype=bool)
_IS_COMPOSITE = np.array([bool(SEMANTICS[k].parts) for k in KINDS], dtype=bool)


@dataclass(frozen=True)
class SimResult:
    name: str
    table: ScheduleTable
    costs: CostModel
    timeline: Timeline
    metrics: Metrics


def simulate(table: ScheduleTable, costs: CostModel | None = None, name: str | None = None) -> SimResult:
    """Discrete-event run of `table`: compute nodes occupy their rank; a SEND makes its tensor arrive at the
    peer `comm` later without occupying compute; a consumer starts at max(rank free, arrival)."""
    costs = costs or CostModel()
    placement = table.placement
    stage_costs = costs.for_placement(placement)
    # Comm nodes neither take time nor block in this model: time the compute and memory nodes alone.
    order = table.compute_order()
    rows = table.ranks.rows if isinstance(table.ranks, LoweredRanks) else order_arrays(order)
    times = node_time_arrays(placement, table.num_microbatches, order, stage_costs, rows)
    starts, ends = times.starts, times.ends
    n_ranks = len(order)
    node_first = times.first
    # each row's node, in the flat numbering (row i is node i when no node is composite)
    simple = one_row_per_node(rows)
    owner = (
        np.arange(len(rows["kind"]), dtype=np.int64) if simple else node_first[rows["rank"]] + rows["index"]
    )
    # per node: a compute node or not (None: all are, as without OFFLOAD/RELOAD)
    all_compute = all(_IS_COMPUTE[c] for c in kinds_present(rows, "node_kind"))
    is_compute = None if all_compute and simple else _IS_COMPUTE[rows["node_kind"]]
    intervals = _intervals(rows, owner, is_compute, node_first, starts, ends, placement.stage_chunk)

    # memory: the one memory model, as array passes where the table allows it
    act, fractions = stage_costs.activation, stage_costs.fractions()
    levels = memory_levels(rows, node_first, starts, ends, act, fractions)
    ranks = []
    for r in range(n_ranks):
        if levels is not None:
            t, level, peak = levels[r]
            memory = CurveColumns(t, level)
        else:
            a, b = int(node_first[r]), int(node_first[r + 1])
            memory, peak = order_memory(order[r], act, fractions, starts[a:b].tolist(), ends[a:b].tolist())
            memory.insert(0, (0.0, 0.0))
        ranks.append(RankTimeline(r, intervals[r], memory, peak))

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
        _transfers(rows, owner, is_compute, times, placement, stage_costs.comm),
    )
    return SimResult(label, table, costs, timeline, timeline_metrics(timeline))


def _intervals(rows, owner, is_compute, node_first, starts, ends, stage_chunk) -> list[IntervalColumns]:
    """Per rank, one interval per compute node: its kind, its (first part's) microbatch and stage, its times;
    an FB's backward part alongside, as (kind, microbatch, stage, chunk) of its second part."""
    kind, mb, stage, part = rows["kind"], rows["mb"], rows["stage"], rows["part"]
    node_kind = rows["node_kind"]
    chunk = np.asarray(stage_chunk, dtype=np.int64)
    if is_compute is None:  # every row a compute node of its own: the intervals are the rows
        n_mb, n_stage, i_kind, i_start, i_end = mb, stage, node_kind, starts, ends
        nodes = None
        cuts = node_first.tolist()
    else:
        head = part == 0  # one row per node, in node order
        nodes = np.flatnonzero(is_compute)
        n_mb, n_stage = mb[head][nodes], stage[head][nodes]
        i_kind, i_start, i_end = node_kind[nodes], starts[nodes], ends[nodes]
        cuts = np.searchsorted(nodes, node_first).tolist()  # rank r's intervals: cuts[r]:cuts[r + 1]
    i_chunk = chunk[n_stage]
    n_ranks = len(cuts) - 1
    b_cuts = None  # no composite node: no backward parts
    if nodes is not None:
        back_rows = np.flatnonzero(_IS_COMPOSITE[node_kind[owner]] & (part == 1))  # rank-major, as all rows
        b_rank = rows["rank"][back_rows]
        b_where = np.searchsorted(nodes, owner[back_rows]) - np.asarray(cuts)[b_rank]
        b_cols = (b_where, kind[back_rows], mb[back_rows], stage[back_rows], chunk[stage[back_rows]])
        b_cuts = np.searchsorted(b_rank, np.arange(n_ranks + 1)).tolist()
    out = []
    for r in range(n_ranks):
        lo, hi = cuts[r], cuts[r + 1]
        cols = (i_kind[lo:hi], n_mb[lo:hi], n_stage[lo:hi], i_chunk[lo:hi], i_start[lo:hi], i_end[lo:hi])
        backward = None
        if b_cuts is not None and b_cuts[r + 1] > b_cuts[r]:
            backward = tuple(col[b_cuts[r] : b_cuts[r + 1]] for col in b_cols)
        out.append(IntervalColumns(_NAMES, *cols, backward))
    return out


def _transfers(rows, owner, is_compute, times, placement, comm: float) -> TransferColumns:
    """Every cross-rank output of a compute node, once, when it is produced (semantics: what each kind
    produces; an activation goes to the next stage's rank, a grad to the previous), in the order of the
    nodes, their parts, and the data each part produces: gathered per kind and datum, then merged."""
    n_stages = placement.num_stages
    # the times by stage-major key (stage * microbatches + microbatch): a rank's rows, a few stages with the
    # microbatches in turn, then read neighbouring entries (microbatch-major, each would touch its own page)
    sent_by = times.by_stage(n_stages)
    fwd_peer, bwd_peer = stage_peers(placement)
    route = {ACT: (np.asarray(fwd_peer, dtype=np.int64), sent_by[0], 0),
             GRAD: (np.asarray(bwd_peer, dtype=np.int64), sent_by[1], 1)}  # fmt: skip
    kind, mb, stage = rows["kind"], rows["mb"], rows["stage"]
    n_mb = sent_by.shape[1] // n_stages if n_stages else 0
    pieces = []
    for code in kinds_present(rows, "kind"):
        made = SEMANTICS[KINDS[code]].produces
        if not made:
            continue
        sel = np.flatnonzero(kind == code if is_compute is None else (kind == code) & is_compute[owner])
        for ordinal, what in enumerate(made):
            peers, sent, tag = route[what]
            peer = peers[stage[sel]]
            ok = peer >= 0
            r_sel = sel[ok]
            t = sent[stage[r_sel] * n_mb + mb[r_sel]]
            pieces.append((r_sel, ordinal, tag, peer[ok], t))
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return TransferColumns(_TAGS, empty, empty, empty, empty, empty, np.zeros(0), np.zeros(0))
    row = np.concatenate([p[0] for p in pieces])
    # in (row, ordinal) order; each piece is ascending in row, so a stable sort merges the runs
    width = max(p[1] for p in pieces) + 1
    if width > 1:
        ordinal = np.concatenate([np.full(len(p[0]), p[1], dtype=np.int64) for p in pieces])
        order = np.argsort(row * width + ordinal, kind="stable")
        del ordinal
    else:
        order = np.argsort(row, kind="stable")
    row = row[order]
    tag = np.concatenate([np.full(len(p[0]), p[2], dtype=np.int8) for p in pieces])[order]
    dst = np.concatenate([p[3] for p in pieces])[order]
    sent = np.concatenate([p[4] for p in pieces])[order]
    return TransferColumns(_TAGS, tag, mb[row], stage[row], rows["rank"][row], dst, sent, sent + comm)
