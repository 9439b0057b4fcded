"""`timing.node_times` as array passes: every node's start and end from numpy columns, no per-node Python.

The times obey, rank by rank, `end[i] = max(end[i-1], ready[i]) + d[i]`, where `ready[i]` is the latest
arrival of the node's inputs made on other ranks (their producer's end plus `comm`). An input made earlier on
the node's own rank never delays it (the rank was busy until then), so only the cross-rank inputs count.
Given `ready`, a rank's recurrence is a max-plus scan: with `D` the running sum of the durations,
`end = D + maximum.accumulate(ready - (D - d))`. The cross-rank inputs are not known in advance, so the ranks
are swept in turn (0..p-1, then p-1..0, ...), each from the latest ends of the others, until a sweep changes
nothing: a pipeline's data flows one way per sweep, so with equal costs a handful of sweeps settle it (with
per-rank costs the critical path can zigzag between ranks and need dozens: past a budget of rank passes
the loop takes over).

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
from typing import Any

import numpy as np

from primuspp.schedule.array_order import rank_lengths
from primuspp.schedule.compact import KINDS, order_arrays
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
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
    owner = first[rows["rank"]] + rows["index"]
    per_kind = kind_durations(costs)
    n_stages = len(costs.forward)
    table = np.zeros((len(KINDS), n_stages), dtype=np.float64)
    for k, values in per_kind.items():
        table[KINDS.index(k)] = values
    row_d = table[kind, stage]
    d = np.zeros(int(first[-1]), dtype=np.float64)
    for j in range(int(part.max(initial=0)) + 1):
        sel = part == j
        d[owner[sel]] = row_d[sel] if j == 0 else d[owner[sel]] + row_d[sel]
    node_kind = rows["node_kind"]
    for code, k in enumerate(KINDS):
        sem = SEMANTICS[k]
        if sem.parts:
            sel = node_kind == code
            if sel.any():
                d[sel] = getattr(costs, sem.overlap) * d[sel]
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
    n_ranks = len(order)
    lengths = np.array(rank_lengths(order), dtype=np.int64)
    first = np.zeros(n_ranks + 1, dtype=np.int64)
    np.cumsum(lengths, out=first[1:])
    n = int(first[-1])
    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    n_stages, m = placement.num_stages, num_microbatches
    srank = np.asarray(placement.stage_rank, dtype=np.int64)
    if not rows["parts_ok"] or n == 0:
        return None
    if mb.min(initial=0) < 0 or mb.max(initial=0) >= m or (srank[stage] != rank).any():
        return None
    owner = first[rank] + rows["index"]
    d = node_durations(rows, first, costs)
    comm = float(costs.comm)

    # who produces each datum (one node each), and each compute row's inputs
    key = mb * n_stages + stage
    producer = {}
    for what in (ACT, GRAD):
        makes = np.array([what in SEMANTICS[k].produces for k in KINDS], dtype=bool)[kind]
        keys = key[makes]
        if len(keys) and np.bincount(keys, minlength=m * n_stages).max() > 1:
            return None
        prod = np.full(m * n_stages, -1, dtype=np.int64)
        prod[keys] = owner[makes]
        producer[what] = prod
    prv = np.asarray(placement.prev_stage, dtype=np.int64)
    nxt = np.asarray(placement.next_stage, dtype=np.int64)
    routes = {ACT_PREV: (ACT, prv, True), GRAD_NEXT: (GRAD, nxt, True), SAVED: (ACT, None, False),
              OWN_GRAD: (GRAD, None, False)}  # fmt: skip
    cons, prods, cross_comm = [], [], []
    for code in np.unique(kind).tolist():
        sem = SEMANTICS[KINDS[code]]
        if sem.role != "compute" or not sem.consumes:
            continue  # the other kinds wait for nothing (as the loop)
        sel = np.flatnonzero(kind == code)
        for need in sem.consumes:
            if need not in routes:
                return None
            what, step, via = routes[need]
            q = step[stage[sel]] if step is not None else stage[sel]
            has = q >= 0
            c_rows, q = sel[has], q[has]
            p = producer[what][mb[c_rows] * n_stages + q]
            c = owner[c_rows]
            if (p < 0).any():
                return None  # never made: the loop reports it
            inner = p == c  # made by another part of the same node
            c, p, q = c[~inner], p[~inner], q[~inner]
            same = srank[q] == rank[c_rows[~inner]]
            # made on this rank: it must come first (the loop would wait for ever) and then never delays
            if (p[same] >= c[same]).any():
                return None
            cons.append(c[~same])
            prods.append(p[~same])
            cross_comm.append(np.full(int((~same).sum()), comm if via else 0.0))
    cons_a = np.concatenate(cons) if cons else np.zeros(0, dtype=np.int64)
    prods_a = np.concatenate(prods) if prods else np.zeros(0, dtype=np.int64)
    comm_a = np.concatenate(cross_comm) if cross_comm else np.zeros(0)
    del cons, prods, cross_comm  # large tables: free what is done with (the peak memory of a build)
    # proofs: exact sums, and a fixed point that implies an acyclic order (every consumer takes time)
    if len(cons_a) and (d[cons_a] <= 0.0).any():
        return None
    scaled = np.concatenate((d, [comm])) * _QUANTUM
    if not np.array_equal(scaled, np.floor(scaled)) or float(d.sum()) + comm * len(cons_a) >= _LIMIT:
        return None
    del scaled, key, owner

    edges = [cons_a, prods_a, comm_a]  # handed over: _sweep frees them once read
    del cons_a, prods_a, comm_a
    ends = _sweep(n_ranks, first, d, edges, rank_of=np.repeat(np.arange(n_ranks), lengths))
    if ends is None:
        return None
    starts = ends - d
    f_end = np.full(m * n_stages, np.nan)
    g_end = np.full(m * n_stages, np.nan)
    for what, out in ((ACT, f_end), (GRAD, g_end)):
        prod = producer[what]
        made = prod >= 0
        out[made] = ends[prod[made]]
    return NodeTimeArrays(first, starts, ends, f_end, g_end)


def _sweep(n_ranks: int, first: Any, d: Any, edges: list[Any], rank_of: Any) -> Any:
    """Ends of every node: ranks recomputed in alternating sweeps, each from the others' latest ends, until
    none changes; None when that takes more sweeps than the per-node loop would cost. `edges`: [consumer,
    producer, comm] of each cross-rank input (emptied here: the arrays are freed once read)."""
    n = len(d)
    cons, prods, comm = edges
    edges.clear()
    # each node's cross-rank inputs as up to K slots (producer index, comm); slot value n = none (time 0.0)
    sort = np.argsort(cons, kind="stable")
    cons, prods, comm = cons[sort], prods[sort], comm[sort]
    del sort
    slot = np.arange(len(cons)) - np.searchsorted(cons, cons, "left")
    n_slots = int(slot.max(initial=-1)) + 1
    src = np.full((max(n_slots, 1), n), n, dtype=np.int64)
    add = np.zeros((max(n_slots, 1), n), dtype=np.float64)
    src[slot, cons] = prods
    add[slot, cons] = comm
    del slot, comm
    cum = np.cumsum(d)
    cum_before = cum - d
    # running sums restart on each rank
    offset = np.repeat(np.concatenate(([0.0], cum))[first[:-1]], np.diff(first))
    cum = cum - offset
    cum_before = cum_before - offset
    # which ranks feed each rank: a rank is recomputed only when one of them changed
    feeders: list[set[int]] = [set() for _ in range(n_ranks)]
    if len(cons):
        pairs = np.unique(rank_of[cons] * n_ranks + rank_of[prods])
        for x in pairs.tolist():
            feeders[x // n_ranks].add(x % n_ranks)
    ends = np.zeros(n + 1, dtype=np.float64)  # ends[n]: the "no input" slot, time 0.0
    version = [0] * n_ranks  # bumped when a rank's ends change
    # the feeders' versions each rank was last computed from
    seen: list[tuple[int, ...] | None] = [None] * n_ranks
    # rank passes allowed: about a quarter of what the loop costs (a pass ~ 250 nodes of the loop); equal
    # costs settle in 2-7 sweeps, per-rank costs can need dozens (the critical path zigzags)
    budget = max(8 * n_ranks + 64, n // 250)
    passes = 0
    forward = True
    while True:
        changed = False
        for r in range(n_ranks) if forward else range(n_ranks - 1, -1, -1):
            state = tuple(version[q] for q in sorted(feeders[r]))
            if seen[r] == state:
                continue
            seen[r] = state
            passes += 1
            a, b = int(first[r]), int(first[r + 1])
            ready = ends[src[0, a:b]] + add[0, a:b]
            for k in range(1, n_slots):
                np.maximum(ready, ends[src[k, a:b]] + add[k, a:b], out=ready)
            new = cum[a:b] + np.maximum.accumulate(ready - cum_before[a:b])
            if not np.array_equal(new, ends[a:b]):
                ends[a:b] = new
                version[r] += 1
                changed = True
        if not changed:
            return ends[:n]
        if passes > budget:
            return None
        forward = not forward
