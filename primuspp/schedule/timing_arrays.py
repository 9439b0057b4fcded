"""`timing.node_times` as array passes: every node's start and end from numpy columns, no per-node Python.

The times obey, rank by rank, `end[i] = max(end[i-1], ready[i]) + d[i]`, where `ready[i]` is the latest
arrival of the node's inputs made on other ranks (their producer's end plus `comm`). An input made earlier on
the node's own rank never delays it (the rank was busy until then), so only the cross-rank inputs count.
Given `ready`, a rank's recurrence is a max-plus scan: with `D` the running sum of the durations,
`end = D + maximum.accumulate(ready - (D - d))`. The cross-rank inputs are not known in advance, so the ranks
are swept in turn (0..p-1, then p-1..0, ...), each from the latest ends of the others, until a sweep changes
nothing: a pipeline's data flows one way per sweep, so with equal costs a handful of sweeps settle it (with
per-rank costs the critical path can zigzag between ranks and need dozens: past a budget of rank passes
the loop takes over). After each sweep one whole-table check of the recurrence (`_solves`) ends the sweeps
as soon as it holds: a fixed point in which every cross-rank consumer takes time is the unique solution
(the order is acyclic), so the confirming sweep is not needed.

What depends on the order alone (each node's cross-rank inputs, the producers, which ranks feed which:
`TimingGraph`) is kept in the rows' memo (`rows.Rows`), as are the last ends: a build times its order twice
(unit costs for lowering, the real costs for the simulation), and under equal costs the second run is the
first one scaled, accepted once it passes the same check (`_rescaled`).

The scan adds in another order than the loop, so it is used only where that cannot change a bit: every
duration and `comm` a multiple of 2^-20 and every time below 2^32 (then every sum is exact). Where a table
falls outside what this form proves — other costs, zero-duration compute nodes (a fixed point would then not
prove the order acyclic), a node waiting for an input made later on its own rank or never made, a node on a
rank its stage is not placed on, more sweeps than the loop would cost — `solve` returns None and the
caller runs the loop (`timing.node_times_events`), which is also the one that words a cycle's error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from primuspp.schedule.array_order import rank_lengths
from primuspp.schedule.compact import KINDS, kinds_present, order_arrays
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

_QUANTUM = 2.0**20  # durations and comm must be multiples of 1 / _QUANTUM
_LIMIT = 2.0**32  # and every time below this: sums then stay below 2^52 quanta, exact in a float64


@dataclass(frozen=True)
class NodeTimeArrays:
    """Flat, rank-major times: node `first[r] + i` is `order[r][i]`. `forward_end[key]` / `grad_end[key]`
    (key = microbatch * stages + stage): when the activation / the input grad was produced (NaN: never)."""

    first: Any
    starts: Any
    ends: Any
    forward_end: Any
    grad_end: Any


def node_durations(rows: dict[str, Any], first: Any, costs: StageCosts) -> Any:
    """Each node's duration, the same float operations as `semantics.duration`: a simple kind's per-stage
    time (`kind_durations`), a composite's `overlap` x the sum of its parts' (added in part order), 0.0 for
    the kinds that take no time."""
    kind, stage, part = rows["kind"], rows["stage"], rows["part"]
    per_kind = kind_durations(costs)
    n_stages = len(costs.forward)
    table = np.zeros((len(KINDS), n_stages), dtype=np.float64)
    for k, values in per_kind.items():
        table[KINDS.index(k)] = values
    row_d = table[kind, stage]
    n = int(first[-1])
    composites = [code for code in kinds_present(rows, "node_kind") if SEMANTICS[KINDS[code]].parts]
    if len(kind) == n and not composites:
        return row_d  # one row per node, each its own duration
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


def exact_costs(costs: StageCosts) -> bool:
    """Whether `costs` can time a table exactly as array passes: every duration, `comm` and overlap factor a
    multiple of 2^-20 (`solve` checks the node durations themselves again). A cheap test a caller can make
    before building arrays for costs that would only send it to the loop."""
    values = [x for row in kind_durations(costs).values() for x in row]
    values.append(float(costs.comm))
    values.extend(float(getattr(costs, sem.overlap)) for sem in SEMANTICS.values() if sem.overlap)
    return all((x * _QUANTUM).is_integer() for x in values)


def solve(
    placement: Placement,
    num_microbatches: int,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    rows: dict[str, Any] | None = None,
) -> NodeTimeArrays | None:
    """The times of `timing.node_times` by sweeps of max-plus scans, or None where they are not proven
    identical (see the module docstring)."""
    if rows is None:
        rows = order_arrays(order)
    graph = timing_graph(placement, num_microbatches, order, rows)
    if graph is None:
        return None
    d = node_durations(rows, graph.first, costs)
    comm = float(costs.comm)
    # proofs: exact sums, and a fixed point that implies an acyclic order (every consumer takes time)
    if len(graph.consumers) and (d[graph.consumers] <= 0.0).any():
        return None
    scaled = np.concatenate((d, [comm])) * _QUANTUM
    if not np.array_equal(scaled, np.floor(scaled)) or float(d.sum()) + comm * graph.n_cross >= _LIMIT:
        return None
    del scaled
    memo = memo_of(rows) if graph.n_nodes <= MEMO_MAX_NODES else {}
    key = ("ends", placement, num_microbatches, len(graph.first) - 1)
    ends = _rescaled(memo.get(key), graph, d, comm)
    if ends is None:
        ends = _sweep(graph, d, comm)
        if ends is None:
            return None
    # a node that takes time, to scale by (a cross-rank consumer takes time: checked above)
    j = int(graph.consumers[0]) if len(graph.consumers) else int(np.argmax(d))
    memo[key] = (j, float(d[j]), comm, ends)
    starts = ends - d
    f_end = np.full(len(graph.act_producer), np.nan)
    g_end = np.full(len(graph.grad_producer), np.nan)
    for prod, out in ((graph.act_producer, f_end), (graph.grad_producer, g_end)):
        made = prod >= 0
        out[made] = ends[prod[made]]
    return NodeTimeArrays(graph.first, starts, ends, f_end, g_end)


def _rescaled(known: Any, graph: TimingGraph, d: Any, comm: float) -> Any:
    """The ends of an earlier solve of the same order (`known`: its node j, j's duration, its comm, its
    ends), scaled to these costs, if that is what these costs give: equal costs are the unit costs lowering
    timed the order by, times a constant. Returned only when it is proven: every value a multiple of 2^-20
    below 2^32 (so every sum is exact) and every node's end `max(end of the node before it on its rank,
    arrival of its cross-rank inputs) + duration` (the loop's recurrence), whose solution is unique (the
    order is acyclic: every cross-rank consumer takes time). Else None: the sweeps run."""
    if known is None:
        return None
    j, d_j, comm_j, ends = known
    if not d_j > 0.0 or len(ends) != len(d):
        return None
    scale = float(d[j]) / d_j
    if not scale > 0.0 or comm != comm_j * scale:
        return None
    cand = ends * scale
    quanta = cand * _QUANTUM
    if not (np.array_equal(quanta, np.floor(quanta)) and float(cand.max(initial=0.0)) < _LIMIT):
        return None
    del quanta
    n = len(d)
    ext = np.empty(n + 1, dtype=np.float64)
    ext[:n] = cand
    ext[n] = 0.0
    return cand if _solves(graph, d, np.where(graph.via, comm, 0.0), ext) else None


def _solves(graph: TimingGraph, d: Any, add: Any, ext: Any) -> bool:
    """Whether the ends `ext[:n]` (`ext[n]` = 0.0: the "no input" slot) obey the loop's recurrence at every
    node: end = max(end of the node before it on its rank, latest arrival of its cross-rank inputs) +
    duration. Exact when every value is a multiple of 2^-20 below 2^32 (the callers' proofs); the solution
    is then the loop's, being unique (every cross-rank consumer takes time, so the order is acyclic)."""
    n = len(d)
    ready = (ext[graph.src] + add).max(axis=0)
    prev = np.empty(n, dtype=np.float64)
    prev[1:] = ext[: n - 1]
    if n:
        prev[0] = 0.0
    prev[graph.first[:-1][np.diff(graph.first) > 0]] = 0.0  # a rank's first node follows nothing
    return bool(np.array_equal(np.maximum(prev, ready) + d, ext[:n]))


#: orders of up to this many nodes keep their timing graph and times in their rows' memo (larger ones
#: recompute them: the memory of a very large build matters more than its second timing)
MEMO_MAX_NODES = 1_000_000


@dataclass(frozen=True)
class TimingGraph:
    """What `solve` derives from an order alone, whatever the costs: each node's cross-rank inputs as up to
    `src.shape[0]` slots (`src[k, i]`: the producer of node i's k-th such input, n where none; `via[k, i]`:
    it arrives `comm` after its producer ends), the nodes with such an input (`consumers`) and the number of
    those inputs (`n_cross`), which ranks each rank's inputs come from (`feeds[q]`: the ranks q feeds), and
    the producer of each activation / input grad by key (-1: never made)."""

    first: Any
    src: Any
    via: Any
    consumers: Any
    n_cross: int
    feeds: tuple[tuple[int, ...], ...]
    act_producer: Any
    grad_producer: Any

    @property
    def n_nodes(self) -> int:
        return int(self.first[-1])


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
    n_ranks = len(lengths_l)
    lengths = np.array(lengths_l, dtype=np.int64)
    first = np.zeros(n_ranks + 1, dtype=np.int64)
    np.cumsum(lengths, out=first[1:])
    n = int(first[-1])
    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    n_stages, m = placement.num_stages, num_microbatches
    srank = np.asarray(placement.stage_rank, dtype=np.int64)
    if not rows["parts_ok"] or n == 0:
        return None
    if mb.min(initial=0) < 0 or mb.max(initial=0) >= m or stage.min(initial=0) < 0:
        return None
    if (srank[stage] != rank).any():
        return None
    one_row_each = len(kind) == n  # then row i is node i
    owner = np.arange(n, dtype=np.int64) if one_row_each else first[rank] + rows["index"]

    # who produces each datum (one node each), and each compute row's inputs. Keyed stage * m + microbatch
    # here (stage-major: a rank's nodes, a few stages with the microbatches in turn, read neighbouring
    # entries; mb-major, each would touch its own page), turned to the TimingGraph's microbatch-major keys
    # at the end
    key = stage * m
    key += mb
    producer = {}
    present = kinds_present(rows, "kind")
    for what in (ACT, GRAD):
        makes_kind = np.array([what in SEMANTICS[k].produces for k in KINDS], dtype=bool)
        prod = np.full(m * n_stages, -1, dtype=np.int64)
        if makes_kind[present].any():
            makes = makes_kind[kind]
            keys = key[makes]
            if len(keys) and np.bincount(keys, minlength=m * n_stages).max() > 1:
                return None
            prod[keys] = owner[makes]
        producer[what] = prod
    prv = np.asarray(placement.prev_stage, dtype=np.int64)
    nxt = np.asarray(placement.next_stage, dtype=np.int64)
    routes = {ACT_PREV: (ACT, prv, True), GRAD_NEXT: (GRAD, nxt, True), SAVED: (ACT, None, False),
              OWN_GRAD: (GRAD, None, False)}  # fmt: skip
    cons, prods, vias = [], [], []
    for code in present:
        sem = SEMANTICS[KINDS[code]]
        if sem.role != "compute" or not sem.consumes:
            continue  # the other kinds wait for nothing (as the loop)
        sel = np.flatnonzero(kind == code)
        for need in sem.consumes:
            if need not in routes:
                return None
            what, step, via = routes[need]
            if step is None:
                # the node's own stage, so its own rank (checked above): made there, it must come first
                # (the loop would wait for ever) and then never delays
                c_rows = sel
                p = producer[what][key[c_rows]]
                c = owner[c_rows]
                if (p < 0).any():
                    return None  # never made: the loop reports it
                inner = p == c  # made by another part of the same node
                if ((p >= c) & ~inner).any():
                    return None
                continue
            q = step[stage[sel]]
            has = q >= 0
            c_rows, q = sel[has], q[has]
            p = producer[what][q * m + mb[c_rows]]
            c = owner[c_rows]
            if (p < 0).any():
                return None  # never made: the loop reports it
            inner = p == c  # made by another part of the same node
            if inner.any():
                c, p, q, c_rows = c[~inner], p[~inner], q[~inner], c_rows[~inner]
            same = srank[q] == rank[c_rows]
            # made on this rank: it must come first (the loop would wait for ever) and then never delays
            if (p[same] >= c[same]).any():
                return None
            cross = ~same
            cons.append(c[cross])
            prods.append(p[cross])
            vias.append(via)
    # each node's cross-rank inputs as up to K slots (producer index, via); slot value n = none (time 0.0).
    # Each group (a kind's rows, one input of it) lists its consumers ascending, each once (a node has one
    # row of each kind): a node's slots are taken in group order. A group naming a node twice is an order
    # the parts check let through oddly: the loop takes it.
    if not all(len(c) < 2 or (c[1:] > c[:-1]).all() for c in cons):
        return None
    n_cross = sum(len(c) for c in cons)
    taken = np.zeros(n, dtype=np.int64)
    slots = []
    for c in cons:
        slots.append(taken[c])
        taken[c] += 1
    n_slots = int(taken.max(initial=0))
    del taken
    # int32 where it fits: the graph is kept in the memo (a quarter of the memory of the order itself)
    src = np.full((max(n_slots, 1), n), n, dtype=np.int32 if n < 2**31 - 1 else np.int64)
    via_m = np.zeros((max(n_slots, 1), n), dtype=bool)
    for c, p, via, slot in zip(cons, prods, vias, slots, strict=True):
        src[slot, c] = p
        via_m[slot, c] = via
    # which ranks feed each rank: a rank is recomputed only when one of them changed
    feeds: list[list[int]] = [[] for _ in range(n_ranks)]
    if n_cross:
        rank_of = np.repeat(np.arange(n_ranks, dtype=np.int64), lengths)
        pairs = np.zeros(n_ranks * n_ranks, dtype=bool)
        for c, p in zip(cons, prods, strict=True):
            pairs[rank_of[p] * n_ranks + rank_of[c]] = True
        for x in np.flatnonzero(pairs).tolist():
            feeds[x // n_ranks].append(x % n_ranks)
        del rank_of, pairs
    del cons, prods, vias, slots  # large tables: free what is done with (the peak memory of a build)
    consumers = np.flatnonzero(src[0] != n) if n_cross else np.zeros(0, dtype=np.int64)
    act, grad = (producer[what].reshape(n_stages, m).T.reshape(-1) for what in (ACT, GRAD))
    return TimingGraph(first, src, via_m, consumers, n_cross, tuple(map(tuple, feeds)), act, grad)


def _sweep(graph: TimingGraph, d: Any, comm: float) -> Any:
    """Ends of every node: ranks recomputed in alternating sweeps, each from the others' latest ends, until
    none changes; None when that takes more sweeps than the per-node loop would cost."""
    n = len(d)
    first = graph.first
    n_ranks = len(first) - 1
    n_slots = graph.src.shape[0]
    add = np.where(graph.via, comm, 0.0)
    cum = np.cumsum(d)
    cum_before = cum - d
    # running sums restart on each rank
    offset = np.repeat(np.concatenate(([0.0], cum))[first[:-1]], np.diff(first))
    cum = cum - offset
    cum_before = cum_before - offset
    del offset
    ends = np.zeros(n + 1, dtype=np.float64)  # ends[n]: the "no input" slot, time 0.0
    # each rank's pieces of the columns, cut once (views)
    bounds = first.tolist()
    cuts = [slice(a, b) for a, b in pairwise(bounds)]
    if n_slots == 1:
        src_r = [graph.src[0, c] for c in cuts]
        add_r = [add[0, c] for c in cuts]
    else:
        src_r = [graph.src[:, c] for c in cuts]
        add_r = [add[:, c] for c in cuts]
    cum_r = [cum[c] for c in cuts]
    before_r = [cum_before[c] for c in cuts]
    ends_r = [ends[c] for c in cuts]
    feeds = graph.feeds
    dirty = [True] * n_ranks  # a rank is recomputed when one of its feeders changed since its last pass
    # rank passes allowed: about a quarter of what the loop costs (a pass ~ 250 nodes of the loop); equal
    # costs settle in 2-7 sweeps, per-rank costs can need dozens (the critical path zigzags)
    budget = max(8 * n_ranks + 64, n // 250)
    passes = 0
    forward = True
    accumulate = np.maximum.accumulate
    while True:
        changed = False
        for r in range(n_ranks) if forward else range(n_ranks - 1, -1, -1):
            if not dirty[r]:
                continue
            dirty[r] = False
            passes += 1
            new = ends[src_r[r]]  # the same operations as `cum + accumulate(ready - before)`, in place
            new += add_r[r]
            if n_slots > 1:
                new = new.max(axis=0)
            new -= before_r[r]
            accumulate(new, out=new)
            new += cum_r[r]
            old = ends_r[r]
            if not np.array_equal(new, old):
                old[:] = new
                for x in feeds[r]:
                    dirty[x] = True
                changed = True
        if not changed:
            return ends[:n]
        # settled already? One whole-table check of the recurrence costs less than the sweep that would
        # find nothing left to change
        if _solves(graph, d, add, ends):
            return ends[:n]
        if passes > budget:
            return None
        forward = not forward
