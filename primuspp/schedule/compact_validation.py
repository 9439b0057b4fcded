"""Validation of a compact lowered table (`compact.LoweredRanks`) as array passes.

It decides only whether the table is valid: every rule of `validation.py` becomes a comparison of position
tables indexed by key = stage * microbatches + microbatch (an input's producer must sit at an earlier
position of the same rank, each node appears the right number of times, sends and receives pair in order
per rank pair). Termination is proven with a certificate: the unit-cost start of the compute node after each
batch (kept by lowering) must strictly increase along each rank and order every matched pair of batches so
that each wait points to a strictly earlier value; then the waits form no cycle and every batch completes.

Whenever a rule fails — or the table holds something this pass does not cover (memory nodes, an odd
composite node) — `valid` returns False and `validation.validate` runs the reference walk, which finds and
names the first problem exactly as before. So a True here is a proof; a False costs only time.

Speed: at p=16 each numpy call (a few microseconds) counts, at p=256 each new array as long as the table
(its memory is faulted in afresh). So what depends on the placement alone is worked out once per
(placement, microbatches) (`_route_tables`), per-key tables stand in for per-row selections, the arrays made
per row are int32 where the values fit, and checks another check already implies are left out (each such
omission says why).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from primuspp.schedule.array_order import CODE, kinds_present, one_row_per_node
from primuspp.schedule.compact import NARROW_FROM, LoweredRanks, index_dtype
from primuspp.schedule.semantics import ACT, ACT_PREV, COMPLETION, GRAD, GRAD_NEXT, OWN_GRAD, SAVED, SEMANTICS

if TYPE_CHECKING:
    from primuspp.schedule.placement import Placement
    from primuspp.schedule.table import ScheduleTable

_F, _B, _W, _BW = CODE["F"], CODE["B"], CODE["W"], CODE["BW"]
_SF, _RF, _SB, _RB = CODE["SEND_F"], CODE["RECV_F"], CODE["SEND_B"], CODE["RECV_B"]


def _rules_match() -> bool:
    """The rules below are those of these kinds; another semantics table sends every table to the
    reference walk. The passes also read a compute row's kind code as its slot (F, B, W, BW = 0..3) and a
    comm row's code minus SEND_F's as its slot (SEND_F, RECV_F, SEND_B, RECV_B = 0..3: a send even, a
    receive odd, grad from 2): another numbering of the kinds sends every table to the walk too."""
    by_text = {k.text: sem for k, sem in SEMANTICS.items()}
    simple = {
        "F": ((ACT_PREV,), (ACT,)),
        "B": ((SAVED, GRAD_NEXT), (GRAD,)),
        "BW": ((SAVED, GRAD_NEXT), (GRAD,)),
        "W": ((OWN_GRAD,), ()),
    }
    carries = {"SEND_F": ACT, "RECV_F": ACT_PREV, "SEND_B": GRAD, "RECV_B": GRAD_NEXT}
    compute = {t for t, sem in by_text.items() if sem.role == "compute" and not sem.parts}
    complete = tuple((name, tuple(tuple(k.text for k in way) for way in ways)) for name, ways in COMPLETION)
    return (
        compute == set(simple)
        and complete == (("forward", (("F",),)), ("backward", (("BW",), ("B", "W"))))
        and all((by_text[t].consumes, by_text[t].produces) == rule for t, rule in simple.items())
        and all(by_text[t].carries == what for t, what in carries.items())
        and {t for t, sem in by_text.items() if sem.role == "comm"} == set(carries)
        and (_F, _B, _W, _BW) == (0, 1, 2, 3)
        and (_RF, _SB, _RB) == (_SF + 1, _SF + 2, _SF + 3)
    )


RULES_MATCH = _rules_match()

#: tables of fewer rows than this are checked with int64 arrays, more with int32 where the values fit
#: (`compact.index_dtype`): numpy indexes with int64 natively and converts an int32 index array on every
#: use (int32 throughout made a validation at p = 64, m = 512, 455,000 rows, 12 % slower), while at
#: p = 256, m = 2048 (7 M rows) each int32 array saves 28 MB of the build's peak
WIDE_UNTIL = 1 << 21
_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


class _Routes:
    """What the checks need of a placement and a microbatch count, worked out once (`_route_tables`).

    Keys are stage * m + microbatch (stage-major: a rank's nodes, a few stages with microbatches in turn,
    read and write neighbouring entries). Per comm slot (SEND_F, RECV_F, SEND_B, RECV_B) and stage, flat
    as slot * n + stage: `peer` the rank the row must name as its peer (-2: no such row can exist: no
    neighbour that way, or one on the same rank), `msg` slot * size + (the producing stage) * m, which plus
    the microbatch is the row's message in the (slot, key) tables; `partner` (0 for the activation, 1 for
    the grad) * size + stage * m, which plus the microbatch is the row's compute partner (its producer for a
    send, its consumer for a receive) in the (F, B-or-BW) position tables."""

    def __init__(self, pl: Placement, m: int) -> None:
        import numpy as np

        n = pl.num_stages
        size = self.size = m * n
        self.srank = np.array(pl.stage_rank, dtype=np.int32)
        nxt = np.array(pl.next_stage, dtype=np.int64)
        prv = np.array(pl.prev_stage, dtype=np.int64)
        member = np.zeros((len(pl.routes), n), dtype=bool)
        for i, route in enumerate(pl.routes):
            member[i, list(route)] = True
        # stage s of microbatch mb: on its route (each stage lies on exactly one route: Placement checks it)
        on2 = member[np.arange(m) % len(pl.routes)].T
        self.on_route = on2.reshape(-1)
        self.all_on_route = bool(self.on_route.all())

        def cross(other: Any) -> Any:  # per stage: a neighbour that way, on another rank
            return (other >= 0) & (self.srank[np.maximum(other, 0)] != self.srank)

        cross_next, cross_prev = cross(nxt), cross(prv)
        # per (comm slot, key): how many rows carry that message (the key is the producer's)
        per_stage = np.stack([cross_next, cross_next, cross_prev, cross_prev])
        # (int64 as bincount's counts, which it is compared with: a comparison of two types is slower; int8
        # for a large table: less memory kept)
        expect_dt = np.int8 if 4 * size >= NARROW_FROM else np.int64
        self.expect = (per_stage[:, :, None] & on2[None]).reshape(-1).astype(expect_dt)
        stages = np.arange(n, dtype=np.int64)
        toward = np.stack([nxt, prv, prv, nxt])  # the other end of each slot's message
        crosses = np.stack([cross_next, cross_prev, cross_prev, cross_next])
        self.peer = np.where(crosses, self.srank[np.maximum(toward, 0)], -2).astype(np.int32).reshape(-1)
        producer = np.stack([stages, prv, stages, nxt])
        slots = np.arange(4, dtype=np.int64)[:, None]
        self.msg = (slots * size + np.maximum(producer, 0) * m).astype(np.int32).reshape(-1)
        self.partner = ((slots >= 2) * size + stages * m).astype(np.int32).reshape(-1)
        # same-rank hand-offs (a V's turn): (producer stage, consumer stage) pairs, activation and grad
        local_next = (nxt >= 0) & ~cross_next
        self.act_local = (stages[local_next], nxt[local_next])
        local_prev = (prv >= 0) & ~cross_prev
        self.grad_local = (stages[local_prev], prv[local_prev])
        self.on2 = on2
        for a in (self.srank, self.on_route, self.expect, self.peer, self.msg, self.partner, on2):
            a.setflags(write=False)


@lru_cache(maxsize=8)
def _route_tables(pl: Placement, m: int) -> _Routes:
    return _Routes(pl, m)


def _within(values: Any, high: int) -> bool:
    """0 <= values < high, all of them (two reductions: no array made)."""
    return len(values) == 0 or (int(values.min()) >= 0 and int(values.max()) < high)


def _below(values: Any, high: Any) -> Any:
    """0 <= values < high, elementwise (a signed int column read as unsigned: one comparison; `high` an int
    >= 0 or an int array)."""

    as_u = _UNSIGNED.get(values.dtype.char)
    if as_u is None:
        return (values >= 0) & (values < high)
    return values.view(as_u) < (high if isinstance(high, int) else high.astype(as_u))


_UNSIGNED = {"q": "Q", "l": "L", "i": "I", "h": "H", "b": "B"}  # numpy's type chars: signed -> unsigned


def _fifo_order(c_rank: Any, c_peer: Any, odd: Any, pp: int) -> tuple[Any, Any]:
    """The sends and the receives (`odd`), each sorted by rank pair (sender * pp + receiver) and, within a
    pair, in row order; (None, None) unless there are as many of each. The rows being in (rank, position)
    order, a stable sort by the pair alone lists each pair's sends (receives) in position order; 16-bit
    keys sort in linear time: one sort of all rows (receives after sends) where the pairs leave room,
    else one per side."""
    import numpy as np

    n_recv = int(np.count_nonzero(odd))
    if 2 * n_recv != len(odd):
        return None, None
    if 2 * pp * pp <= 1 << 16:  # (computed in 16 bits: each value below 2 * pp * pp)
        r16, p16 = c_rank.astype(np.uint16), c_peer.astype(np.uint16)
        # sender * pp + receiver = sender * (pp - 1) + rank + peer (the sender is the rank or the peer)
        pair = np.where(odd, p16, r16)
        pair *= np.uint16(pp - 1)
        pair += r16
        pair += p16
        del r16, p16
        pair += odd.view(np.uint8) * np.uint16(pp * pp)
        order = np.argsort(pair, kind="stable")
        return order[:n_recv], order[n_recv:]
    pair = np.multiply(np.where(odd, c_peer, c_rank), pp, dtype=np.int32)  # the sender
    pair += np.where(odd, c_rank, c_peer)
    if pp * pp <= 1 << 16:
        pair = pair.astype(np.uint16)
    s_idx, r_idx = np.flatnonzero(~odd), np.flatnonzero(odd)
    return s_idx[np.argsort(pair[s_idx], kind="stable")], r_idx[np.argsort(pair[r_idx], kind="stable")]


def valid(table: ScheduleTable) -> bool:
    """True only if `table` (whose ranks are a LoweredRanks) passes every check of `validation.validate`."""
    import numpy as np

    ranks = table.ranks
    if not RULES_MATCH or not isinstance(ranks, LoweredRanks):
        return False
    pl, m = table.placement, table.num_microbatches
    if m < 1 or len(ranks) != pl.pp:
        return False
    rows = ranks.rows
    if not rows["parts_ok"]:
        return False
    if not set(kinds_present(rows, "kind")) <= {_F, _B, _W, _BW}:  # memory nodes: the reference walk
        return False
    n = pl.num_stages
    rt = _route_tables(pl, m)
    size = rt.size
    n_ranks = len(ranks)
    lengths = np.asarray(ranks.lengths, dtype=np.int64)
    if len(lengths) != n_ranks:
        return False
    total = int(lengths.sum())
    # the type of the arrays made per row or per key (each index < 4 * size, each place < total): int64
    # below WIDE_UNTIL rows (most of them index tables)
    it = np.int64 if total < WIDE_UNTIL else index_dtype(total, max(4 * size, total + 2 * n_ranks))
    big = _INT32_MAX if it is np.int32 else _INT64_MAX

    # -- compute rows: each on its stage's rank, F once per key on the routes, the backward as BW or B+W
    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    one_each = one_row_per_node(rows)
    # each row's position (its node's): row i is node i when no node is composite
    pos = ranks.node_pos if one_each else ranks.node_pos[ranks.first[rank] + rows["index"]]
    if not (_within(mb, m) and _within(stage, n)) or not (rt.srank[stage] == rank).all():
        return False
    k = np.multiply(stage, m, dtype=it)
    k += mb
    k += np.multiply(kind, size, dtype=it)  # slot (= kind code) * size + key
    count = np.bincount(k, minlength=4 * size).reshape(4, size)
    # (a row off its microbatch's route is counted where none may be: on_route is not checked per row)
    need = 1 if rt.all_on_route else rt.on_route
    n_f, n_b, n_w, n_bw = count
    if not ((n_f == need).all() and (n_b + n_bw == need).all() and (n_w == n_b).all()):
        return False
    at = np.full(4 * size, big, dtype=it)  # (F, B, W, BW) positions per key; `big`: none
    at[k] = pos
    del k
    at = at.reshape(4, size)
    pos_f, pos_b = at[0], at[1]
    if not (pos_b < at[2]).all(where=n_w > 0):  # W after its B
        return False
    del count, n_f, n_b, n_w, n_bw
    np.minimum(pos_b, at[3], out=pos_b)  # now the input grad's producer: the B or the BW
    pos_g = pos_b
    # F before its backward; same-rank hand-offs (a V's turn) before their consumer
    if not (pos_f < pos_g).all(where=True if rt.all_on_route else rt.on_route):
        return False
    for table2, (src, dst) in ((pos_f.reshape(n, m), rt.act_local), (pos_g.reshape(n, m), rt.grad_local)):
        if len(src) and not (table2[src] < table2[dst]).all(where=rt.on2[dst]):
            return False

    # -- comm rows: the right peer, each message sent and received once, a send after its producer, a
    # receive before its consumer
    c_kind, c_mb, c_stage, c_rank = ranks.c_kind, ranks.c_mb, ranks.c_stage, ranks.c_rank
    c_pos, c_peer = ranks.c_pos, ranks.c_peer
    slot = c_kind - np.int8(_SF)
    if not (_within(slot, 4) and _within(c_mb, m) and _within(c_stage, n)):
        return False
    if not (rt.srank[c_stage] == c_rank).all():
        return False
    tk = np.multiply(slot, n, dtype=it)
    tk += c_stage
    # (no row may name -2, the table's "none")
    if not (rt.peer[tk] == c_peer).all() or c_peer.min(initial=0) < 0:
        return False
    msg = rt.msg[tk]  # slot * size + the message's key (the producer's)
    msg += c_mb
    # (an off-route message is counted where none may be, and a receive's own key shares its message's
    # route: no per-row route check)
    if not (np.bincount(msg, minlength=4 * size) == rt.expect).all():
        return False
    partner = rt.partner[tk]
    del tk
    partner += c_mb
    # a send's partner (its producer) before it, a receive's (its consumer) after it. Both on the row's
    # rank: distinct places (checked below), so "not before" is "after"; the partner exists (the counts)
    odd = (slot & 1).view(bool)  # receives
    if not ((at.reshape(-1)[partner] < c_pos) != odd).all():
        return False
    del partner, at, pos_f, pos_b, pos_g

    # -- places: the comm rows in (rank, position) order, each rank's places 0..length-1 held once
    lowered_first = np.zeros(n_ranks + 1, dtype=np.int64)
    np.cumsum(lengths, out=lowered_first[1:])
    n_nodes = len(ranks.node_pos)
    if n_nodes + len(c_pos) != total:
        return False
    node_rank = rank if one_each else np.repeat(np.arange(n_ranks), np.diff(ranks.first))
    if not (_below(ranks.node_pos, lengths[node_rank]).all() and _below(c_pos, lengths[c_rank]).all()):
        return False
    c_at = lowered_first.astype(it)[c_rank]
    c_at += c_pos
    if len(c_at) > 1 and not (c_at[1:] > c_at[:-1]).all():
        return False
    held = np.zeros(total, dtype=bool)
    held[c_at] = True
    del c_at
    node_at = lowered_first.astype(it)[node_rank]
    node_at += ranks.node_pos
    held[node_at] = True
    del node_at
    # every place marked by total marks (each row marks one place of its own rank): no two rows share a
    # place, and each rank holds as many rows as its length
    if not held.all():
        return False
    del held

    # -- FIFO per rank pair: the sends of a -> b in position order are the receives of b from a in order
    s_idx, r_idx = _fifo_order(c_rank, c_peer, odd, pl.pp)
    if s_idx is None:
        return False
    # the i-th send and the i-th receive carry one message (its receive slot is the send's + 1). Their
    # pairs then agree too: a message's send and receive name each other's ranks (the peer tables)
    if not (msg[r_idx] - msg[s_idx] == size).all():
        return False
    del msg

    # -- termination: batch = (rank, compute nodes before it); certificate from the hints
    # all nodes are compute nodes (memory nodes went to the reference walk), so `first` counts them
    cfirst = ranks.first
    if len(cfirst) != len(ranks.hint_first) or not (cfirst == ranks.hint_first).all():
        return False
    hints = ranks.hints
    if len(hints) != int(cfirst[-1]):
        return False
    # phi(r, b): the hint of the compute node after boundary b of rank r, -inf before the first (b = -1),
    # +inf after the last (b = count): one table, each rank's hints between -inf and +inf
    ranks2 = 2 * np.arange(n_ranks, dtype=np.int64)
    lo, hi = cfirst[:-1] + ranks2, cfirst[1:] + ranks2 + 1
    ext = np.empty(len(hints) + 2 * n_ranks)
    inner = np.ones(len(ext), dtype=bool)
    inner[lo] = inner[hi] = False
    ext[inner] = hints
    ext[lo], ext[hi] = -np.inf, np.inf
    del inner
    # hints strictly increase along each rank: every step but the n_ranks - 1 from a rank's +inf to the
    # next one's -inf goes up
    if np.count_nonzero(ext[1:] > ext[:-1]) != len(ext) - n_ranks:
        return False
    # each comm row's boundary: the compute nodes before it on its rank (its place less the comm rows
    # before it there; the rows being in (rank, position) order, those are its index less its rank's first)
    comm_first = np.searchsorted(c_rank, np.arange(n_ranks))
    # phi(rank, boundary - 1) of each comm row: ext[at_b] (before[at_b]); phi(rank, boundary): after[at_b]
    at_b = (lo + comm_first).astype(it)[c_rank]
    at_b += c_pos
    at_b -= np.arange(len(c_pos), dtype=it)
    before, after = ext[:-1], ext[1:]
    a_at, b_at = at_b[s_idx], at_b[r_idx]
    if not (before[b_at] < after[a_at]).all():
        return False
    return bool((before[a_at] < after[b_at]).all())
