"""`timing.node_times` as array passes (`timing.node_time_arrays`): every node's start and end from numpy
columns, no per-node Python.

The times come in rounds (`_in_rounds`): in each, every rank whose next node has its inputs takes it, start =
max(rank free, latest arrival of its cross-rank inputs), end = start + duration: the loop's own float
operations on each node, so the loop's bits for any costs, at a few numpy calls per round on one value per
rank (an input made earlier on the node's own rank never delays it: the rank was busy until then, so only
the cross-rank inputs count). What depends on the order alone (each node's cross-rank inputs, the producers:
`TimingGraph`) is kept in the rows' memo (`rows.Rows`): a build times its order twice (unit costs for
lowering, the real costs for the simulation).

Where the order is not one this form reads (an input made later on its own rank or never made, a node on a
rank its stage is not placed on, a host transfer that takes time: the loop's host link) or cannot run (a
cycle), `solve` returns None and the caller runs the loop (`timing.node_times`), which words the
error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np

from primuspp.schedule.array_order import (
    KINDS,
    NATIVE_MAX,
    kind_stage,
    kinds_present,
    order_arrays,
    rank_lengths,
)
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
from primuspp.schedule.rows import memo_of
from primuspp.schedule.semantics import (
    ACT,
    ACT_PREV,
    GRAD,
    GRAD_NEXT,
    OWN_GRAD,
    SAVED,
    SEMANTICS,
    kind_durations,
)

#: the rows' memo key under which a generator that placed its nodes on unit slots (the V family) notes each
#: node's slot (read by the V family's own passes)
UNIT_STARTS = "unit starts"

# per kind code: which datum it produces (ACT / GRAD), a composite's overlap, a host transfer
_MAKES = {what: tuple(what in SEMANTICS[k].produces for k in KINDS) for what in (ACT, GRAD)}
_COMPOSITE = tuple(bool(SEMANTICS[k].parts) for k in KINDS)
_TRANSFER = tuple(SEMANTICS[k].role == "memory" for k in KINDS)


class NodeTimeArrays:
    """Flat, rank-major times: node `first[r] + i` is `order[r][i]`. `forward_end[key]` / `grad_end[key]`
    (key = microbatch * stages + stage): when the activation / the input grad was produced (NaN: never).
    `by_stage()`: the same two as one (2, stages * microbatches) array keyed stage-major (stage *
    microbatches + microbatch), the form the array passes make and the simulator's transfers read; each
    form is derived from the other when first asked for. Read-only by contract, as every column here."""

    __slots__ = ("_by_stage", "_forward", "_grad", "_n_stages", "ends", "first", "starts")

    def __init__(
        self,
        first: Any,
        starts: Any,
        ends: Any,
        forward_end: Any = None,
        grad_end: Any = None,
        *,
        by_stage: Any = None,
        n_stages: int = 0,
    ) -> None:
        if by_stage is None and (forward_end is None or grad_end is None):
            raise ValueError("NodeTimeArrays needs forward_end and grad_end, or by_stage")
        self.first, self.starts, self.ends = first, starts, ends
        self._forward, self._grad, self._by_stage, self._n_stages = forward_end, grad_end, by_stage, n_stages

    @property
    def forward_end(self) -> Any:
        if self._forward is None:
            self._forward = _mb_major(self._by_stage[0], self._n_stages)
        return self._forward

    @property
    def grad_end(self) -> Any:
        if self._grad is None:
            self._grad = _mb_major(self._by_stage[1], self._n_stages)
        return self._grad

    def by_stage(self, n_stages: int) -> Any:
        """(forward ends, grad ends) keyed stage * microbatches + microbatch, as one (2, n) array."""
        if self._by_stage is None:
            out = np.empty((2, len(self._forward)), dtype=np.float64)
            for row, col in enumerate((self._forward, self._grad)):
                out[row] = col.reshape(-1, n_stages).T.reshape(-1)
            self._by_stage = out
        return self._by_stage


def _mb_major(col: Any, n_stages: int) -> Any:
    """A stage-major column (stage * microbatches + microbatch) keyed microbatch-major instead."""
    return col.reshape(n_stages, -1).T.reshape(-1) if n_stages else col.copy()


def node_durations(rows: dict[str, Any], first: Any, costs: StageCosts) -> Any:
    """Each node's duration, the same float operations as `semantics.duration`: a simple kind's per-stage
    time (`kind_durations`), a composite's `overlap` x the sum of its parts' (added in part order), 0.0 for
    the kinds that take no time."""
    table = _cost_table(costs)
    n_stages = table.shape[1]
    row_d = table.ravel().take(kind_stage(rows, n_stages))
    n = int(first[-1])
    if len(row_d) == n and rows["parts_ok"]:
        return row_d  # one row per node (a composite node has a row per part), each its own duration
    composites = [code for code in kinds_present(rows, "node_kind") if _COMPOSITE[code]]
    if len(row_d) == n and not composites:
        return row_d
    part = rows["part"]
    owner = first[rows["rank"]] + rows["index"]
    d = np.zeros(n, dtype=np.float64)
    for j in range(int(part.max(initial=0)) + 1):
        sel = part == j
        d[owner[sel]] = row_d[sel] if j == 0 else d[owner[sel]] + row_d[sel]
    node_kind = rows["node_kind"]
    for code in composites:
        sel = node_kind == code
        d[sel] = getattr(costs, SEMANTICS[KINDS[code]].overlap) * d[sel]
    return d


_COST_TABLES: dict[StageCosts, Any] = {}


def _cost_table(costs: StageCosts) -> Any:
    """The (kind x stage) durations of `kind_durations`, 0.0 for the kinds that take none, worked out once
    per cost model (a build times its order under the same costs more than once)."""
    got = _COST_TABLES.get(costs)
    if got is None:
        got = np.zeros((len(KINDS), len(costs.forward)), dtype=np.float64)
        for k, values in kind_durations(costs).items():
            got[KINDS.index(k)] = values
        if len(_COST_TABLES) >= 64:
            _COST_TABLES.clear()
        _COST_TABLES[costs] = got
    return got


def solve(
    placement: Placement,
    num_microbatches: int,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    rows: dict[str, Any] | None = None,
) -> NodeTimeArrays | None:
    """The times of `timing.node_times` in rounds; None where the order is not one these read or cannot run
    (see the module docstring)."""
    if rows is None:
        rows = order_arrays(order)
    graph = timing_graph(placement, num_microbatches, order, rows)
    if graph is None:
        return None
    table = _cost_table(costs)
    if any(_TRANSFER[c] and table[c].any() for c in kinds_present(rows, "node_kind")):
        return None  # host transfers that take time run beside compute, on the host link: the loop's rule
    d = node_durations(rows, graph.first, costs)
    return _in_rounds(graph, d, float(costs.comm), placement.num_stages)


def _in_rounds(graph: TimingGraph, d: Any, comm: float, n_stages: int) -> NodeTimeArrays | None:
    """The loop's times by rounds: in each, every rank whose next node has all its inputs takes that node,
    start = max(rank free, latest arrival of its cross-rank inputs), end = start + duration: the loop's own
    float operations on each node (an input made on the node's own rank was made before it: it never
    delays it), so the same bits for any costs, one round per step of the longest chain of nodes (a few
    numpy calls on arrays of one value per rank). None when no rank can go on: a cycle, which the loop
    words."""
    n = len(d)
    first = graph.first
    src = graph.src
    one = src.shape[0] == 1
    src0 = src[0]
    ext = np.full(n + 1, np.nan)  # NaN: not made yet; ext[n], the "no input" slot, arrives at 0.0
    ext[n] = -comm
    starts = np.empty(n, dtype=np.float64)
    cur, stop = first[:-1].copy(), first[1:]
    free = np.zeros(len(cur), dtype=np.float64)
    live = np.flatnonzero(cur < stop)
    while len(live):
        at = cur[live]
        t = ext[src0[at]] if one else ext[src[:, at]].max(axis=0)  # NaN while an input is missing
        t += comm
        ok = t == t
        moved = live
        if not ok.all():
            if not ok.any():
                return None
            moved, at, t = live[ok], at[ok], t[ok]
        np.maximum(free[moved], t, out=t)
        starts[at] = t
        t += d[at]
        ext[at] = t
        free[moved] = t
        at += 1
        cur[moved] = at
        if (at == stop[moved]).any():
            live = live[cur[live] < stop[live]]
    ext[n] = np.nan  # the "never made" slot of the producers
    by_stage = ext.take(graph.producers)
    return NodeTimeArrays(first, starts, ext[:n], by_stage=by_stage, n_stages=n_stages)


_PLACEMENTS: dict[Placement, tuple[Any, dict[str, tuple[Any, Any]]]] = {}


def _placement_arrays(placement: Placement) -> tuple[Any, dict[str, tuple[Any, Any]]]:
    """(each stage's rank; per route term (ACT_PREV / GRAD_NEXT): each stage's neighbour on the route (-1:
    none) and whether that neighbour is on the same rank (None: on no stage)), once per placement."""
    got = _PLACEMENTS.get(placement)
    if got is None:
        srank = placement.stage_rank
        steps = {}
        for need, step in ((ACT_PREV, placement.prev_stage), (GRAD_NEXT, placement.next_stage)):
            same = [q >= 0 and srank[q] == srank[s] for s, q in enumerate(step)]
            steps[need] = (np.array(step, dtype=np.int64), np.array(same, dtype=bool) if any(same) else None)
        if len(_PLACEMENTS) >= 64:
            _PLACEMENTS.clear()
        got = _PLACEMENTS[placement] = (np.array(srank, dtype=np.int64), steps)
    return got


#: orders of up to this many nodes keep their timing graph in their rows' memo (larger ones recompute it:
#: the memory of a very large build matters more than its second timing)
MEMO_MAX_NODES = 8_000_000


@dataclass(frozen=True)
class TimingGraph:
    """What `solve` derives from an order alone, whatever the costs: each node's cross-rank inputs as up to
    `src.shape[0]` slots (`src[k, i]`: the producer of node i's k-th such input, n where none; each arrives
    `comm` after its producer ends), the
    producer of each activation (`producers[0]`) and input grad (`producers[1]`) by stage-major key (stage *
    microbatches + microbatch; n: never made), and whether any node is composite."""

    first: Any
    src: Any
    producers: Any
    composite: bool


def timing_graph(
    placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]], rows: dict[str, Any]
) -> TimingGraph | None:
    """The order's `TimingGraph`, or None where the array passes cannot time it (an input never made, made
    later on its own rank, a node on a rank its stage is not placed on, ...). Kept in the rows' memo
    (`rows.Rows`): a build's lowering and its simulation time the same order under two cost models."""
    lengths = rank_lengths(order)
    key = ("timing", placement, num_microbatches, len(lengths))
    memo = memo_of(rows) if sum(lengths) <= MEMO_MAX_NODES else {}
    got = memo.get(key)
    if got is not None and got[0] == lengths:
        return got[1]
    graph = _timing_graph(placement, num_microbatches, lengths, rows)
    memo[key] = (lengths, graph)
    return graph


def _timing_graph(
    placement: Placement, num_microbatches: int, lengths_l: list[int], rows: dict[str, Any]
) -> TimingGraph | None:
    first_l = [0, *accumulate(lengths_l)]
    first = np.array(first_l, dtype=np.int64)
    n = first_l[-1]
    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    n_stages, m = placement.num_stages, num_microbatches
    srank, steps = _placement_arrays(placement)
    if not rows["parts_ok"] or n == 0:
        return None
    if mb.min() < 0 or mb.max() >= m or stage.min() < 0:
        return None
    if (srank[stage] != rank).any():
        return None
    itype = np.intp if n <= NATIVE_MAX else np.int32
    one_row_each = len(kind) == n  # then row i is node i
    owner = None if one_row_each else first[rank] + rows["index"]
    present = kinds_present(rows, "kind")
    composite = not one_row_each  # a composite node has a row per part (the parts check above)

    # each present kind's rows (ascending) and their stage-major keys (stage * m + microbatch: a rank's
    # nodes, a few stages with the microbatches in turn, read neighbouring entries; mb-major, each would
    # touch its own page)
    sel_of, key_of = {}, {}
    for code in present:
        sel = np.flatnonzero(kind == code) if len(present) > 1 else np.arange(len(kind))
        k = stage[sel] * m
        k += mb[sel]
        sel_of[code], key_of[code] = sel, k

    def nodes(sel: Any) -> Any:
        return sel if owner is None else owner[sel]

    # who produces each datum (one node each; n: never made)
    producers = np.full((2, m * n_stages), n, dtype=itype)
    producer = {}
    for row, what in enumerate((ACT, GRAD)):
        makers = [code for code in present if _MAKES[what][code]]
        prod = producers[row]
        if makers:
            keys = key_of[makers[0]] if len(makers) == 1 else np.concatenate([key_of[c] for c in makers])
            if len(keys) and np.bincount(keys).max() > 1:
                return None
            for code in makers:
                prod[key_of[code]] = nodes(sel_of[code])
        producer[what] = prod
    prv, nxt = placement.prev_stage, placement.next_stage
    routes = {ACT_PREV: (ACT, prv), GRAD_NEXT: (GRAD, nxt), SAVED: (ACT, None), OWN_GRAD: (GRAD, None)}
    cons, prods = [], []
    for code in present:
        sem = SEMANTICS[KINDS[code]]
        if sem.role != "compute" or not sem.consumes:
            continue  # the other kinds wait for nothing (as the loop)
        sel = sel_of[code]
        for need in sem.consumes:
            if need not in routes:
                return None
            what, step = routes[need]
            if step is None:
                # the node's own stage, so its own rank (checked above): made there, it must come first
                # (the loop would wait for ever) and then never delays. Made by another part of the same
                # node (p == c) or earlier: 0 <= p <= c; never made (n) or later: p > c
                p = producer[what][key_of[code]]
                if (p > nodes(sel)).any():
                    return None
                continue
            # per stage: its neighbour on the route (-1: none), and whether that one is on the same rank
            step_a, same_stage = steps[need]
            s_of = stage[sel]
            q = step_a[s_of]
            has = q >= 0
            c_rows = sel
            if not has.all():
                c_rows, q, s_of = sel[has], q[has], s_of[has]
            q *= m
            q += mb[c_rows]
            p = producer[what][q]
            c = nodes(c_rows)
            if (p == n).any():
                return None  # never made: the loop reports it
            if owner is not None:
                inner = p == c  # made by another part of the same node
                if inner.any():
                    keep = ~inner
                    c, p, c_rows, s_of = c[keep], p[keep], c_rows[keep], s_of[keep]
            if same_stage is not None:
                same = same_stage[s_of]
                # made on this rank: it must come first (the loop would wait for ever) and then never delays
                if (p[same] >= c[same]).any():
                    return None
                cross = ~same
                c, p, s_of = c[cross], p[cross], s_of[cross]
            cons.append(c)
            prods.append(p)
    # each node's cross-rank inputs as up to K slots (slot value n = none: arrives at 0.0). Each group (a
    # kind's rows, one input of it) lists its consumers ascending, each once (a node has one row of each
    # kind): a node's slots are taken in group order. A group naming a node twice is an order the parts
    # check let through oddly: the loop takes it.
    if owner is not None and not all(len(c) < 2 or (c[1:] > c[:-1]).all() for c in cons):
        return None
    # one row per node and at most one cross-rank input per kind: the groups are disjoint, one slot
    disjoint = one_row_each and _one_cross_need(present)
    if disjoint or len(cons) <= 1:
        src = np.full((1, n), n, dtype=itype)
        for c, p in zip(cons, prods, strict=True):
            src[0, c] = p
    else:
        taken = np.zeros(n, dtype=np.int64)
        slots = []
        for c in cons:
            slots.append(taken[c])
            taken[c] += 1
        src = np.full((max(int(taken.max(initial=0)), 1), n), n, dtype=itype)
        del taken
        for c, p, slot in zip(cons, prods, slots, strict=True):
            src[slot, c] = p
        del slots
    del cons, prods  # large tables: free what is done with (the peak memory of a build)
    return TimingGraph(first, src, producers, composite)


def _one_cross_need(present: list[int]) -> bool:
    """Whether each present kind has at most one input that can come from another rank."""
    cross = (ACT_PREV, GRAD_NEXT)
    return all(sum(need in cross for need in SEMANTICS[KINDS[code]].consumes) <= 1 for code in present)
