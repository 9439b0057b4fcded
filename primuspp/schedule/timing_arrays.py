"""`timing.node_times` as array passes: every node's start and end from numpy columns, no per-node Python.

The times obey, rank by rank, `end[i] = max(end[i-1], ready[i]) + d[i]`, where `ready[i]` is the latest
arrival of the node's inputs made on other ranks (their producer's end plus `comm`). An input made earlier on
the node's own rank never delays it (the rank was busy until then), so only the cross-rank inputs count.
Given `ready`, a rank's recurrence is a max-plus scan: with `D` the running sum of the durations,
`end = D + maximum.accumulate(ready - (D - d))`. The cross-rank inputs are not known in advance, so the ranks
are swept in turn (0..p-1, then p-1..0, ...), each from the latest ends of the others, until a sweep changes
nothing: a pipeline's data flows one way per sweep, so with equal costs a handful of sweeps settle it (with
per-rank costs the critical path can zigzag between ranks and need dozens: past a budget of rank passes
the loop takes over). From the second sweep on, one whole-table check of the recurrence (`_solves`) ends the
sweeps as soon as it holds: a fixed point in which every cross-rank consumer takes time is the unique
solution (the order is acyclic), so the confirming sweep is not needed. (After the first sweep it never
holds where data flows both ways, as in every pipeline; a sweep after which no rank's feeders changed is a
fixed point without a check.)

What depends on the order alone (each node's cross-rank inputs, the producers, which ranks feed which:
`TimingGraph`) is kept in the rows' memo (`rows.Rows`), as are the last ends: a build times its order twice
(unit costs for lowering, the real costs for the simulation), and under equal costs the second run is the
first one scaled, accepted once it passes the same check (`_rescaled`). A generator that placed its nodes on
unit slots (the V family) notes each node's slot in the memo (`UNIT_STARTS`): under unit durations that is
a guess of the starts, accepted the same way instead of the sweeps (`_from_unit_starts`).

The scan adds in another order than the loop, so the sweeps run only where that cannot change a bit: every
duration and `comm` a multiple of 2^-20 and every time below 2^32 (then every sum is exact). Everywhere
else — users' float costs, zero-duration consumers (a fixed point would then not prove the order acyclic),
more sweeps than the budget — the times come in rounds (`_in_rounds`): each round, every rank whose next
node has its inputs takes it, with the loop's own float operations, so the loop's bits for any costs, at a
few numpy calls per round on one value per rank. Where the order is not one this form reads (an input made
later on its own rank or never made, a node on a rank its stage is not placed on) or cannot run (a cycle),
`solve` returns None and the caller runs the loop (`timing.node_times_events`), which words the error.

Small tables (a few thousand nodes) pay per numpy call (~1 us each), large ones per byte moved: the passes
below keep the calls few (per-rank views cut once, in-place operations) and the memo compact (int32 indices,
no column that another one implies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
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

_QUANTUM = 2.0**20  # durations and comm must be multiples of 1 / _QUANTUM
#: the rows' memo key of a generator's unit slots: each node's start if every node took one unit of time
UNIT_STARTS = "unit starts"
_LIMIT = 2.0**32  # and every time below this: sums then stay below 2^52 quanta, exact in a float64
#: up to this many values a comparison goes through `tobytes` (one C comparison; above, no copies)
_BYTES_MAX = 1 << 16

# per kind code: whether it is a compute kind, which datum it produces (ACT / GRAD), a composite's overlap
_COMPUTE = tuple(SEMANTICS[k].role == "compute" for k in KINDS)
_MAKES = {what: tuple(what in SEMANTICS[k].produces for k in KINDS) for what in (ACT, GRAD)}
_COMPOSITE = tuple(bool(SEMANTICS[k].parts) for k in KINDS)


class NodeTimeArrays:
    """Flat, rank-major times: node `first[r] + i` is `order[r][i]`. `forward_end[key]` / `grad_end[key]`
    (key = microbatch * stages + stage): when the activation / the input grad was produced (NaN: never).
    `by_stage()`: the same two as one (2, stages * microbatches) array keyed stage-major (stage *
    microbatches + microbatch), the form the array passes make and the simulator's transfers read; each
    form is derived from the other when first asked for. `exact`: every time is a multiple of 2^-20 below
    2^32 (what `solve` proves). Read-only by contract, as every column here."""

    __slots__ = ("_by_stage", "_forward", "_grad", "_n_stages", "ends", "exact", "first", "starts")

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
        exact: bool = False,
    ) -> None:
        if by_stage is None and (forward_end is None or grad_end is None):
            raise ValueError("NodeTimeArrays needs forward_end and grad_end, or by_stage")
        self.first, self.starts, self.ends, self.exact = first, starts, ends, exact
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
    table = _cost_table(costs)[0]
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


_COST_TABLES: dict[StageCosts, tuple[Any, bool, bool]] = {}


def _cost_table(costs: StageCosts) -> tuple[Any, bool, bool]:
    """(the (kind x stage) durations of `kind_durations`, 0.0 for the kinds that take none; whether every
    duration, `comm` and overlap factor is a multiple of 2^-20; whether every duration and `comm` is a whole
    number), worked out once per cost model (a build times its order under the same costs more than once)."""
    got = _COST_TABLES.get(costs)
    if got is None:
        per_kind = kind_durations(costs)
        table = np.zeros((len(KINDS), len(costs.forward)), dtype=np.float64)
        for k, values in per_kind.items():
            table[KINDS.index(k)] = values
        values = [x for row in per_kind.values() for x in row]
        values.append(float(costs.comm))
        whole = all(x.is_integer() for x in values)
        values.extend(float(getattr(costs, sem.overlap)) for sem in SEMANTICS.values() if sem.overlap)
        exact = all((x * _QUANTUM).is_integer() for x in values)
        if len(_COST_TABLES) >= 64:
            _COST_TABLES.clear()
        got = _COST_TABLES[costs] = (table, exact, whole)
    return got


def solve(
    placement: Placement,
    num_microbatches: int,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    rows: dict[str, Any] | None = None,
) -> NodeTimeArrays | None:
    """The times of `timing.node_times` by sweeps of max-plus scans where they are proven identical, else in
    rounds; None where the order is not one these read or cannot run (see the module docstring)."""
    if rows is None:
        rows = order_arrays(order)
    graph = timing_graph(placement, num_microbatches, order, rows)
    if graph is None:
        return None
    d = node_durations(rows, graph.first, costs)
    comm = float(costs.comm)
    # proofs: exact sums, and a fixed point that implies an acyclic order (every consumer takes time)
    n = len(d)
    positive = n == 0 or float(d.min()) > 0.0
    table, exact, whole = _cost_table(costs)
    exact = (
        exact
        and not (graph.composite and not _whole_quanta(d))
        and float(d.sum()) + comm * graph.n_cross < _LIMIT
    )
    if not exact or (not positive and graph.n_cross and (d[graph.consumers] <= 0.0).any()):
        # other costs (or a fixed point that would not prove the order acyclic): the loop's own operations
        return _in_rounds(graph, d, comm, placement.num_stages, exact)
    memo = memo_of(rows) if n <= MEMO_MAX_NODES else {}
    key = ("ends", placement, num_microbatches, len(graph.first) - 1)
    ext = _rescaled(memo.get(key), graph, d, comm, table)
    if ext is None:
        ext = _from_unit_starts(memo.get(UNIT_STARTS), graph, d, comm)
    if ext is None:
        ext = _sweep(graph, d, comm)
        if ext is None:
            return _in_rounds(graph, d, comm, placement.num_stages, exact)
    # a node that takes time, to scale by (a cross-rank consumer takes time: checked above); and, for whole
    # durations of simple nodes, the cost table they came from (see `_rescaled`)
    j = 0 if positive else int(graph.consumers[0]) if graph.n_cross else int(np.argmax(d))
    basis = table if whole and not graph.composite else None
    kept = ext
    if basis is not None and n > NATIVE_MAX and float(ext[:n].max(initial=0.0)) < 2.0**31:
        kept = ext[:n].astype(np.int32)  # whole ends: kept in half the memory (the caller may free ext)
    memo[key] = (j, float(d[j]) if n else 0.0, comm, kept, basis)
    ends = ext[:n]
    starts = ends - d
    ext[n] = np.nan  # the "never made" slot of the producers below
    by_stage = ext.take(graph.producers)
    n_stages = placement.num_stages
    return NodeTimeArrays(graph.first, starts, ends, by_stage=by_stage, n_stages=n_stages, exact=True)


def _in_rounds(graph: TimingGraph, d: Any, comm: float, n_stages: int, exact: bool) -> NodeTimeArrays | None:
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
    return NodeTimeArrays(first, starts, ext[:n], by_stage=by_stage, n_stages=n_stages, exact=exact)


def _whole_quanta(values: Any, block: int = 1 << 20) -> bool:
    """Whether every value is a multiple of 2^-20 (a block at a time: a large table's peak memory)."""
    for lo in range(0, len(values), block):
        quanta = values[lo : lo + block] * _QUANTUM
        if not np.array_equal(quanta, np.floor(quanta)):
            return False
    return True


def _rescaled(known: Any, graph: TimingGraph, d: Any, comm: float, table: Any = None) -> Any:
    """The ends of an earlier solve of the same order (`known`: its node j, j's duration, its comm, its
    ends (with one slot more or not), and optionally its basis: the cost table of whole numbers its simple
    nodes' durations came from), scaled to these costs, if that is what these costs give: equal costs are
    the unit costs lowering timed the order by, times a constant. Returned (with the extra slot) only when
    it is proven: every value a multiple of 2^-20 below 2^32 (so every sum is exact) and every node's end
    `max(end of the node before it on its rank, arrival of its cross-rank inputs) + duration` (the loop's
    recurrence), whose solution is unique (the order is acyclic: every cross-rank consumer takes time).
    Else None: the sweeps run.

    The recurrence is checked (`_solves`) unless the scaling proves it: with whole old durations (so whole
    old ends), a whole scale, these costs' table (`table`) the basis times that scale and no composite
    node, every new duration, comm and end is the old one times the scale exactly (whole numbers below
    2^32), and a recurrence of max and + that held for the old values holds for the scaled ones."""
    if known is None:
        return None
    j, d_j, comm_j, ends, *rest = known
    basis = rest[0] if rest else None
    n = len(d)
    if not d_j > 0.0 or len(ends) not in (n, n + 1):
        return None
    scale = float(d[j]) / d_j
    if not scale > 0.0 or comm != comm_j * scale:
        return None
    ext = np.empty(n + 1, dtype=np.float64)
    np.multiply(ends[:n], scale, out=ext[:n])
    cand = ext[:n]
    ext[n] = -comm if comm else 0.0
    scaled = (
        basis is not None
        and table is not None
        and scale.is_integer()
        and not graph.composite
        and basis.shape == table.shape
        and (basis * scale).tobytes() == table.tobytes()
    )
    if scaled:
        # every product below 2^32: the scaled ends are the solution, and no end exceeds the total of the
        # durations and comm delays, which `solve` checked against 2^32
        return ext
    if not float(cand.max(initial=0.0)) < _LIMIT:
        return None
    return ext if _whole_quanta(cand) and _solves(graph, d, comm, ext) else None


def _from_unit_starts(starts: Any, graph: TimingGraph, d: Any, comm: float) -> Any:
    """The ends (with the extra slot) a generator's unit slots give (`UNIT_STARTS`: each node's start), where
    every duration is one unit and there is no comm delay, and they obey the recurrence (`_solves`: whole
    numbers below 2^32 are exact); else None. A slot grid that left a node later than its inputs and its
    rank allow (v-min's squeeze may) fails the check: the sweeps run."""
    n = len(d)
    if starts is None or len(starts) != n or comm or n == 0 or d[0] != 1.0 or not d.min() == d.max() == 1.0:
        return None
    ext = np.empty(n + 1, dtype=np.float64)
    np.add(starts, 1.0, out=ext[:n])
    ext[n] = 0.0
    if not float(ext[:n].max()) < _LIMIT or float(starts.min()) < 0:
        return None
    return ext if _solves(graph, d, comm, ext) else None


def _solves(graph: TimingGraph, d: Any, comm: float, ext: Any) -> bool:
    """Whether the ends `ext[:n]` (`ext[n]` = -comm: the "no input" slot, which arrives at 0.0) obey the
    loop's recurrence at every node: end = max(end of the node before it on its rank, latest arrival of
    its cross-rank inputs) + duration. Exact when every value is a multiple of 2^-20 below 2^32 (the
    callers' proofs); the solution is then the loop's, being unique (every cross-rank consumer takes time,
    so the order is acyclic)."""
    n = len(d)
    src = graph.src
    ready = ext[src[0]] if len(src) == 1 else ext[src].max(axis=0)
    if comm:
        ready += comm
    prev = np.empty(n, dtype=np.float64)
    prev[1:] = ext[: n - 1]
    prev[graph.heads] = 0.0  # a rank's first node follows nothing
    np.maximum(prev, ready, out=ready)
    del prev
    ready += d
    return _same(ready, ext[:n])


def _same(a: Any, b: Any) -> bool:
    """Whether two float arrays hold the same bits (no time here is -0.0 or NaN, so: the same values)."""
    if len(a) <= _BYTES_MAX:
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a, b))


_PLACEMENTS: dict[Placement, tuple[Any, dict[str, tuple[Any, Any]]]] = {}


def _placement_arrays(placement: Placement) -> tuple[Any, dict[str, tuple[Any, Any, int, set]]]:
    """(each stage's rank; per route term (ACT_PREV / GRAD_NEXT): each stage's neighbour on the route (-1:
    none), whether that neighbour is on the same rank (None: on no stage), how many stages have one on
    another rank, and the (its rank, the stage's rank) pairs of those), once per placement."""
    got = _PLACEMENTS.get(placement)
    if got is None:
        srank = placement.stage_rank
        steps = {}
        for need, step in ((ACT_PREV, placement.prev_stage), (GRAD_NEXT, placement.next_stage)):
            same = [q >= 0 and srank[q] == srank[s] for s, q in enumerate(step)]
            cross = [s for s, q in enumerate(step) if q >= 0 and not same[s]]
            steps[need] = (
                np.array(step, dtype=np.int64),
                np.array(same, dtype=bool) if any(same) else None,
                len(cross),
                {(srank[step[s]], srank[s]) for s in cross},
            )
        if len(_PLACEMENTS) >= 64:
            _PLACEMENTS.clear()
        got = _PLACEMENTS[placement] = (np.array(srank, dtype=np.int64), steps)
    return got


#: orders of up to this many nodes keep their timing graph and times in their rows' memo (larger ones
#: recompute them: the memory of a very large build matters more than its second timing). Above
#: NATIVE_MAX nodes what is kept is compact (int32 indices, whole ends as int32): about 11 bytes a node
MEMO_MAX_NODES = 8_000_000


@dataclass(frozen=True)
class TimingGraph:
    """What `solve` derives from an order alone, whatever the costs: each node's cross-rank inputs as up to
    `src.shape[0]` slots (`src[k, i]`: the producer of node i's k-th such input, n where none; each arrives
    `comm` after its producer ends), the number of those inputs (`n_cross`), the first node of each
    nonempty rank (`heads`), which ranks each rank's inputs come from (`feeds[q]`: the ranks q feeds), the
    producer of each activation (`producers[0]`) and input grad (`producers[1]`) by stage-major key (stage *
    microbatches + microbatch; n: never made), and whether any node is composite."""

    first: Any
    src: Any
    n_cross: int
    heads: Any
    feeds: tuple[tuple[int, ...], ...]
    producers: Any
    composite: bool

    @property
    def n_nodes(self) -> int:
        return int(self.first[-1])

    @property
    def consumers(self) -> Any:
        """The nodes with a cross-rank input, ascending."""
        return np.flatnonzero(self.src[0] != self.n_nodes)


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
    first_l = [0, *accumulate(lengths_l)]
    first = np.array(first_l, dtype=np.int64)
    n = first_l[-1]
    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    n_stages, m = placement.num_stages, num_microbatches
    srank_l = placement.stage_rank
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
    cons, prods, pairs = [], [], set()
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
            step_a, same_stage, n_cross_stages, all_pairs = steps[need]
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
            # which ranks feed which: from the stages that have such a consumer
            at = np.flatnonzero(np.bincount(s_of, minlength=n_stages)).tolist()
            if len(at) == n_cross_stages:  # every stage that can have such an input has one
                pairs |= all_pairs
            else:
                pairs.update((srank_l[step[s]], srank_l[s]) for s in at)
    # each node's cross-rank inputs as up to K slots (slot value n = none: arrives at 0.0). Each group (a
    # kind's rows, one input of it) lists its consumers ascending, each once (a node has one row of each
    # kind): a node's slots are taken in group order. A group naming a node twice is an order the parts
    # check let through oddly: the loop takes it.
    if owner is not None and not all(len(c) < 2 or (c[1:] > c[:-1]).all() for c in cons):
        return None
    n_cross = sum(len(c) for c in cons)
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
    feeds: list[list[int]] = [[] for _ in range(n_ranks)]
    for a, b in sorted(pairs):
        feeds[a].append(b)
    heads = np.array([a for a, b in pairwise(first_l) if b > a], dtype=np.intp)
    return TimingGraph(first, src, n_cross, heads, tuple(map(tuple, feeds)), producers, composite)


def _one_cross_need(present: list[int]) -> bool:
    """Whether each present kind has at most one input that can come from another rank."""
    cross = (ACT_PREV, GRAD_NEXT)
    return all(sum(need in cross for need in SEMANTICS[KINDS[code]].consumes) <= 1 for code in present)


def _sweep(graph: TimingGraph, d: Any, comm: float) -> Any:
    """Ends of every node, with one slot more (`solve` writes its "never made" value there): ranks
    recomputed in alternating sweeps, each from the others' latest ends, until none changes; None when that
    takes more sweeps than the per-node loop would cost."""
    n = len(d)
    first = graph.first
    bounds = first.tolist()
    n_ranks = len(bounds) - 1
    src = graph.src
    n_slots = src.shape[0]
    # running sums restart on each rank: `cum` the rank's sum up to and including each node, `shift` the
    # arrival delay minus the sum before it (both exact: multiples of 2^-20 below 2^33). Small tables take
    # them in a few whole-table calls; large ones rank by rank (no table-sized temporaries: each fresh one
    # costs its page faults)
    small = n <= _BYTES_MAX
    cuts = [slice(a, b) for a, b in pairwise(bounds)]
    if small:
        cum = np.cumsum(d)
        if n_ranks > 1:
            at = first[:-1]
            cum -= np.repeat(np.where(at > 0, cum[at - 1], 0.0), np.diff(first))
        shift = d - cum
        if comm:
            shift += comm
        cum_r = [cum[c] for c in cuts]
        shift_r = [shift[c] for c in cuts]
    else:
        cum_r = [np.cumsum(d[c]) for c in cuts]
        shift_r = [np.subtract(d[c], cr) for c, cr in zip(cuts, cum_r, strict=True)]
        if comm:
            for sr in shift_r:
                sr += comm
    ext = np.zeros(n + 1, dtype=np.float64)  # ext[n]: the "no input" slot, which arrives at 0.0
    ext[n] = -comm if comm else 0.0
    # each rank's pieces of the columns, cut once (views)
    src_r = [src[0, c] for c in cuts] if n_slots == 1 else [src[:, c] for c in cuts]
    ends_r = [ext[c] for c in cuts]
    feeds = graph.feeds
    dirty = [True] * n_ranks  # a rank is recomputed when one of its feeders changed since its last pass
    # rank passes allowed: about a quarter of what the loop costs (a pass ~ 250 nodes of the loop); equal
    # costs settle in 2-7 sweeps, per-rank costs can need dozens (the critical path zigzags)
    budget = max(8 * n_ranks + 64, n // 250)
    passes = 0
    sweeps = 0
    # fmax, not maximum: the same where no value is NaN (none is here), and quicker (no NaN to carry)
    accumulate_max = np.fmax.accumulate
    order_fwd, order_bwd = range(n_ranks), range(n_ranks - 1, -1, -1)
    while True:
        changed = False
        sweeps += 1
        for r in order_fwd if sweeps % 2 else order_bwd:
            if not dirty[r]:
                continue
            dirty[r] = False
            passes += 1
            # cum + accumulate(ready - before), ready = latest arrival (the same operations as the loop's
            # recurrence, in another order: exact here)
            new = ext[src_r[r]] if n_slots == 1 else ext[src_r[r]].max(axis=0)
            new += shift_r[r]
            new = accumulate_max(new) if small else accumulate_max(new, out=new)
            new += cum_r[r]
            old = ends_r[r]
            if (new.tobytes() != old.tobytes()) if small else not np.array_equal(new, old):
                old[:] = new
                for x in feeds[r]:
                    dirty[x] = True
                changed = True
        if not changed or not any(dirty):
            return ext  # every rank computed from its feeders' latest ends: the fixed point
        # settled already? One whole-table check of the recurrence costs less than the sweep that would
        # find nothing left to change (after the first sweep it never holds where data flows both ways)
        if sweeps > 1 and _solves(graph, d, comm, ext):
            return ext
        if passes > budget:
            return None
