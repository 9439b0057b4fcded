"""Compact lowered tables: the comm nodes lowering adds, stored as integer arrays (struct of arrays).

A lowered table at p=64, m=512 holds about half a million nodes, more than half of them SEND/RECV nodes that
lowering derives from the compute order. `LoweredRanks` keeps the compute order as given (an
`array_order.ArrayOrder`, columns whose Nodes are built only when read, or the Node tuples of a generator
that made Nodes) and every comm node as one row of a few numpy int arrays (rank, position, kind, microbatch,
stage, peer).
It behaves as the tuple of per-rank node tuples it stands for (`ScheduleTable.ranks`): indexing a rank
builds that rank's nodes once and caches them; equality, iteration and length are a tuple's. The validator
and the simulator read the arrays and the compute order directly, so a build and a simulation never create a
comm Node at all.

numpy is imported inside the functions that need it: importing this module costs nothing at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from itertools import chain
from typing import Any

from primuspp.schedule.array_order import (
    CODE,
    KINDS,
    ArrayOrder,
    kind_stage,
    kinds_present,
    one_row_per_node,
    order_arrays,
    rank_lengths,
)
from primuspp.schedule.lazy_ranks import LazyRanks
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement, stage_peers
from primuspp.schedule.semantics import ACT, GRAD, RECV_OF, SEMANTICS, SEND_OF


class LoweredRanks(LazyRanks):
    """Each rank's lowered node list, stored compactly; reads as `tuple[tuple[Node, ...], ...]`.

    `order[r]`: rank r's compute and memory nodes (the lowering's input: an ArrayOrder or Node tuples);
    `rows`: the same as arrays (`order_arrays`); `node_pos`: each order node's position in its rank's
    lowered list (rank-major, rank r's from `first[r]`). Comm rows (all ranks, sorted by rank then
    position): `c_rank`, `c_pos`, `c_kind` (a code of KINDS), `c_mb`, `c_stage` (the stage on the row's own
    rank), `c_peer` (int64; in a large table the narrowest type that holds them: `column_dtype`). `hints`
    (rank-major, rank r's from `hint_first[r]`): the unit-cost start of each compute node in the run
    lowering placed the receives by; the validator proves termination with them (and checks them: a wrong
    hint cannot make a bad table pass, only send it to the reference validator)."""

    __slots__ = (
        "_cache",
        "c_kind",
        "c_mb",
        "c_peer",
        "c_pos",
        "c_rank",
        "c_stage",
        "first",
        "hint_first",
        "hints",
        "lengths",
        "node_pos",
        "order",
        "rows",
    )

    def __init__(
        self,
        order: tuple[tuple[Node, ...], ...],
        rows: dict[str, Any],
        node_pos: Any,
        first: Any,
        comm: dict[str, Any],
        hints: Any,
        hint_first: Any,
        lengths: list[int],
    ) -> None:
        self.order, self.rows, self.node_pos, self.first = order, rows, node_pos, first
        self.c_rank, self.c_pos, self.c_kind = comm["rank"], comm["pos"], comm["kind"]
        self.c_mb, self.c_stage, self.c_peer = comm["mb"], comm["stage"], comm["peer"]
        self.hints, self.hint_first = hints, hint_first
        self.lengths = lengths
        self._cache: list[tuple[Node, ...] | None] = [None] * len(order)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self._cache = [None] * len(self.order)

    def _build(self, r: int) -> tuple[Node, ...]:
        out: list[Node | None] = [None] * self.lengths[r]
        positions = self.node_pos[self.first[r] : self.first[r + 1]].tolist()
        for pos, node in zip(positions, self.order[r], strict=True):
            out[pos] = node
        lo, hi = _span(self.c_rank, r)
        for pos, k, mb, s, peer in zip(
            self.c_pos[lo:hi].tolist(),
            self.c_kind[lo:hi].tolist(),
            self.c_mb[lo:hi].tolist(),
            self.c_stage[lo:hi].tolist(),
            self.c_peer[lo:hi].tolist(),
            strict=True,
        ):
            out[pos] = Node(KINDS[k], mb, s, peer)
        return tuple(out)  # type: ignore[arg-type]

    def texts(self, r: int) -> list[str]:
        """Rank r's nodes in their text form (`nodes.format_node` of each), without building comm Nodes."""
        return self.joined(r, " ").split(" ") if self.lengths[r] else []

    def joined(self, r: int, sep: str) -> str:
        """`sep.join(self.texts(r))`, made from the columns in a few numpy passes (no Node, no str per node):
        each row (a node, or a composite node's part) is laid out as NUL-padded words read from tables (kind
        name; microbatch and '.'; stage; the tail: a comm node's arrow and peer, then `sep`, or '+' between
        parts), and the NUL bytes are dropped."""
        import numpy as np

        rows, first = self.rows, self.first
        (a, b), (lo, hi) = _span(rows["rank"], r), _span(self.c_rank, r)
        node_pos = self.node_pos[first[r] : first[r + 1]]
        pos = node_pos[rows["index"][a:b]]
        c_pos = self.c_pos[lo:hi]
        n = self.lengths[r] + (b - a) - len(node_pos)  # rows: a composite node has one per part
        part = rows["part"][a:b]
        if n > self.lengths[r]:  # row of each position: a composite node's parts push the later ones on
            width = np.ones(self.lengths[r], dtype=np.int64)
            np.add.at(width, pos, part > 0)
            start = np.cumsum(width) - width
            pos, c_pos = start[pos] + part, start[c_pos]
        kind, mb, stage, tail = (np.empty(n, dtype=np.intp) for _ in range(4))
        kind[pos], kind[c_pos] = rows["kind"][a:b], self.c_kind[lo:hi]
        mb[pos], mb[c_pos] = rows["mb"][a:b], self.c_mb[lo:hi]
        stage[pos], stage[c_pos] = rows["stage"][a:b], self.c_stage[lo:hi]
        tail[pos] = 0  # `sep`, or 1: a part with another part after it ('+')
        tail[pos[:-1]] = part[1:] > 0
        is_send = np.array([k.is_send for k in KINDS])[self.c_kind[lo:hi]]
        tail[c_pos] = self.c_peer[lo:hi].astype(np.intp) * 2 + 2 + is_send  # '<' or '>', peer, `sep`
        high = max(int(mb.max(initial=0)), int(stage.max(initial=0)), int(tail.max(initial=0)) // 2)
        tables = _text_tables(sep, 1 << high.bit_length())  # (a few tables serve all ranks)
        columns = [
            (word, index)
            for table, index in zip(tables, (kind, mb, stage, tail), strict=True)
            for word in table
        ]
        words = np.empty(n, dtype=[(str(i), word.dtype) for i, (word, _) in enumerate(columns)])
        for i, (word, index) in enumerate(columns):
            words[str(i)] = word[index]
        out = words.view(np.uint8)
        return out[out != 0].tobytes().decode("ascii")[: -len(sep) or None]

    # -- cheap facts --------------------------------------------------------------------------------------

    def num_nodes(self) -> int:
        return sum(self.lengths)

    def compute_order(self) -> tuple[tuple[Node, ...], ...]:
        return self.order


def _span(column: Any, r: int) -> tuple[int, int]:
    """Rank r's rows lo:hi of a rank column sorted ascending (the needles in the column's type: numpy would
    convert the whole column to theirs)."""
    import numpy as np

    lo, hi = np.searchsorted(column, np.array([r, r + 1], dtype=column.dtype))
    return int(lo), int(hi)


@lru_cache(maxsize=4)
def _text_tables(sep: str, high: int) -> tuple[list[Any], ...]:
    """`LoweredRanks.joined`'s fields, each a table of NUL-padded texts as columns of 8-byte words: per kind
    code its name; per number 0..high itself and '.' (a microbatch), itself (a stage); the tail: `sep`, '+',
    then per peer '<' peer `sep` and '>' peer `sep` (a receive's, a send's)."""
    import numpy as np

    def table(texts: list[str]) -> list[Any]:  # 1, 2, 4 or 8 bytes a word: numpy copies those fastest
        width = 1 << (max(map(len, texts)) - 1).bit_length()
        size = min(width, 8)
        words = np.array(texts, dtype=f"S{width}").view(f"u{size}").reshape(len(texts), -1)
        return [words[:, j].copy() for j in range(width // size)]

    numbers = [str(i) for i in range(high + 1)]
    tails = [sep, "+"] + [f"{arrow}{i}{sep}" for i in numbers for arrow in "<>"]
    return table([k.text for k in KINDS]), table([f"{i}." for i in numbers]), table(numbers), table(tails)


#: arrays of at least this many elements are made int32 where their values fit (half the memory: a large
#: table's time is mostly in faulting in the pages of new arrays); shorter ones int64, numpy's index type
#: (indexing with an int32 array costs three times as long, which at a few thousand elements outweighs
#: what the memory saves)
NARROW_FROM = 1 << 18


def column_dtype(n: int, high: int) -> Any:
    """`index_dtype`, or int16 where the values fit: a column the table keeps."""
    import numpy as np

    return np.int16 if n >= NARROW_FROM and high <= np.iinfo(np.int16).max else index_dtype(n, high)


def index_dtype(n: int, high: int) -> Any:
    """The integer type of an array of `n` elements holding values in [-high, high]: int32 if `n` is at
    least NARROW_FROM and the values fit, else int64."""
    import numpy as np

    return np.int32 if n >= NARROW_FROM and high < np.iinfo(np.int32).max else np.int64


def _compute_before(cstarts: Any, cfirst: Any, t: Any, peer: Any) -> Any:
    """For each hand-off (time `t`, rank `peer`): the compute nodes that start before `t` on that rank, plus
    all those of the ranks before it (`cstarts`: each rank's compute starts, ascending, rank r's from
    `cfirst[r]`): a binary search of the ranks' starts laid end to end."""
    import numpy as np

    n_ranks = len(cfirst) - 1
    span = float(max(cstarts.max(initial=0.0), t.max(initial=0.0))) + 2.0
    shifted = np.repeat(np.arange(n_ranks, dtype=np.float64) * span, np.diff(cfirst))
    shifted += cstarts
    needle = peer * span
    needle += t
    return np.searchsorted(shifted, needle, "left")


@cache
def _lowering_tables() -> tuple[Any, Any, Any]:
    """Per kind code: whether it is a compute kind; per datum (ACT, GRAD), whether a simple kind makes it
    and its rank among what the kind produces (the reference sends them in that order)."""
    import numpy as np

    is_compute = np.array([k.is_compute for k in KINDS])
    makes, ranks = [], []
    for what in (ACT, GRAD):
        makes.append(np.array([what in SEMANTICS[k].produces and not SEMANTICS[k].parts for k in KINDS]))
        produces = [SEMANTICS[k].produces for k in KINDS]
        ranks.append(np.array([made.index(what) if what in made else 0 for made in produces]))
    return is_compute, makes, ranks


def lower_compact(
    placement: Placement,
    num_microbatches: int,
    order: Sequence[Sequence[Node]],
    timing,
    rows: dict | None = None,
) -> LoweredRanks:
    """The fast lowering (same nodes, same places as `tests/oracles/lowering.py`): `timing` is the
    unit-cost run of `order`, as `timing.node_times` gives it (per-rank lists) or as
    `timing.node_time_arrays` does (flat arrays: nothing to convert); `rows`: `order_arrays(order)` when
    the caller has them."""
    import numpy as np

    if not isinstance(order, ArrayOrder):
        order = tuple(tuple(seq) for seq in order)
    n_ranks = len(order)
    arr = rows if rows is not None else order_arrays(order)
    mb, stage, rank = arr["mb"], arr["stage"], arr["rank"]
    lengths0 = np.array(rank_lengths(order), dtype=np.int64)
    first = np.zeros(n_ranks + 1, dtype=np.int64)
    np.cumsum(lengths0, out=first[1:])
    n_nodes = int(first[-1])
    simple = one_row_per_node(arr)
    # the node's index in the concatenated order (row i is node i when no node is composite)
    gidx = None if simple else first[rank] + arr["index"]

    # compute flags and compute indices per node of the concatenated order (every node a compute node, as
    # without OFFLOAD/RELOAD: node_compute None, the compute numbering is the node numbering, and the
    # per-node columns below are not needed)
    is_compute_kind = _lowering_tables()[0]
    if all(is_compute_kind[c] for c in kinds_present(arr, "node_kind")):
        node_compute = node_rank = node_ci = None
        cfirst = first
    else:
        node_rank = np.repeat(np.arange(n_ranks, dtype=np.int64), lengths0)
        node_compute = is_compute_kind[arr["node_kind"]]
        ccount = np.cumsum(node_compute) - node_compute  # compute nodes before each node (global)
        cfirst = np.zeros(n_ranks + 1, dtype=np.int64)
        np.cumsum(np.bincount(node_rank[node_compute], minlength=n_ranks), out=cfirst[1:])
        node_ci = ccount - cfirst[node_rank]  # compute nodes before it on its rank
        del ccount

    if isinstance(timing.starts, np.ndarray):  # flat already (`node_time_arrays`)
        starts, ends = timing.starts, timing.ends
    else:
        starts = np.fromiter(chain.from_iterable(timing.starts), dtype=np.float64, count=n_nodes)
        ends = np.fromiter(chain.from_iterable(timing.ends), dtype=np.float64, count=n_nodes)
    cstarts = starts if node_compute is None else starts[node_compute]  # rank-major, in order

    # hand-offs: one per (simple part, produced datum) whose consumer lives on another rank

    # (the (kind, stage) cells as the unit-cost timing left them in the rows' memo)
    h_rows, datum, peer, cons = _hand_offs(placement, kind_stage(arr, placement.num_stages))
    h_rank = rank[h_rows]
    h_node = h_rows if gidx is None else gidx[h_rows]  # (the rows' microbatch and stage: read when needed)
    del gidx
    # the receive goes before the consumer rank's first compute node starting at or after the producer's
    # end: `before` counts the compute nodes before it in the whole table (the peer's and earlier ranks')
    before = _compute_before(cstarts, cfirst, ends[h_node], peer)
    del starts, ends, timing  # (the caller passes the unit-cost times on, holding no copy)
    # a receive after the peer's last compute node is never emitted (as in the reference)
    keep = before < cfirst[1:][peer]
    keep_all = bool(keep.all())  # as usual: every hand-off gets its receive
    send_kind = np.array([CODE[SEND_OF[w].text] for w in (ACT, GRAD)], dtype=np.int8)[datum]
    recv_kind = np.array([CODE[RECV_OF[w].text] for w in (ACT, GRAD)], dtype=np.int8)[datum]
    del datum

    # positions. Boundary b of a rank is the place just before its compute node b (b = C: after the last);
    # there the sends of node b-1 come first, then the receives placed at b (memory nodes after node b-1
    # come before both). One slot per (rank, boundary), rank-major: rank r's slots from slot_base[r]
    # (cfirst[r] + r). Each array below is as long as the table: a large lowering's time is in making them
    # (the memory of each new one is touched for the first time), so few are made and those few are used
    # in place.
    slot_base = cfirst + np.arange(n_ranks + 1, dtype=np.int64)  # rank r's boundaries 0..C_r
    n_slots = int(slot_base[-1])
    if node_compute is None:  # the producer's boundary is its node index + 1: slot = node + rank + 1
        send_slot = h_node + h_rank
        send_slot += 1
    else:
        send_slot = slot_base[h_rank] + node_ci[h_node]
        send_slot += 1
    del h_node
    recv_rank = peer if keep_all else peer[keep]
    recv_slot = before if keep_all else before[keep]  # slot = boundary + slot_base[rank] = before + rank
    recv_slot += recv_rank
    del before
    # s_at[x] / r_at[x]: the sends / receives at slots before x (whole table); at[x]: both. The comm rows
    # (all ranks, in (rank, position) order) are numbered slot by slot, each slot's sends before its
    # receives: the j-th send of slot x (in creation order: send slots ascend) is comm row at[x] + j, where
    # j = (sends before it) - s_at[x]: row r_at[x] + (its index among the sends); the j-th receive of slot x
    # (receives sorted by slot, stably) is row s_at[x + 1] + (its index among the sorted receives)
    sdt = index_dtype(n_slots, len(send_slot) + len(recv_slot))
    s_at = np.zeros(n_slots + 1, dtype=sdt)
    np.cumsum(np.bincount(send_slot, minlength=n_slots), out=s_at[1:])
    r_at = np.zeros(n_slots + 1, dtype=sdt)
    np.cumsum(np.bincount(recv_slot, minlength=n_slots), out=r_at[1:])
    at = s_at + r_at
    n_h, n_c = len(send_slot), int(at[-1])
    send_row = r_at[send_slot]
    send_row += np.arange(n_h, dtype=sdt)
    # (16-bit keys sort in linear time)
    rsort = np.argsort(recv_slot.astype(np.uint16) if n_slots <= 1 << 16 else recv_slot, kind="stable")
    rs = recv_slot[rsort]
    del recv_slot
    rr = recv_rank[rsort]  # receives in (rank, position) order
    recv_row = s_at[1:][rs]
    recv_row += np.arange(len(rs), dtype=sdt)
    # a row's position: its comm row, less the comm rows of earlier ranks, plus the compute nodes before it
    # on its rank (its boundary: slot - slot_base[rank]); memory nodes before it are added below
    comm_upto = at[slot_base]  # the comm rows of the ranks before each rank (and all: the last)
    comm_before = comm_upto[:-1]
    off = slot_base[:-1] + comm_before
    send_pos = send_slot - off[h_rank]
    send_pos += send_row
    recv_pos = rs - off[rr]
    recv_pos += recv_row
    dt = index_dtype(n_nodes, int(lengths0.max(initial=0)) + n_c)
    if node_compute is None:
        # compute node i (rank r, slot i + r) after the comm at its boundary and the earlier ones:
        # at[i + r + 1] - comm_before[r] + (i - first[r])
        # rank by rank, in place (views: no array as long as the table but the result)
        pos_all = np.empty(n_nodes, dtype=dt)
        steps = np.arange(int(lengths0.max(initial=0)), dtype=dt)
        bounds = zip(first[:-1].tolist(), first[1:].tolist(), slot_base[:-1].tolist(), strict=True)
        for r, (lo, hi, sb) in enumerate(bounds):
            out = pos_all[lo:hi]
            np.subtract(at[sb + 1 : sb + 1 + hi - lo], comm_before[r], out=out, casting="same_kind")
            out += steps[: hi - lo]
    else:
        # index in the rank's order of its compute node b (the rank's length for b = C)
        i_of_slot = np.empty(n_slots, dtype=np.int64)
        last = slot_base[:-1] + np.diff(cfirst)
        i_of_slot[last] = lengths0
        mask = np.ones(n_slots, dtype=bool)
        mask[last] = False
        i_of_slot[mask] = np.nonzero(node_compute)[0] - first[node_rank[node_compute]]
        # (send_pos, recv_pos hold the boundary; the compute node's index replaces it)
        send_pos += i_of_slot[send_slot] - (send_slot - slot_base[h_rank])
        recv_pos += i_of_slot[rs] - (rs - slot_base[rr])
        node_slot = slot_base[node_rank] + node_ci
        node_pos = np.arange(n_nodes, dtype=np.int64) - first[node_rank]
        s_count, r_count = np.diff(s_at), np.diff(r_at)
        excl = at[:-1]  # comm at this slot's earlier boundaries, + comm_before
        before = node_pos + excl[node_slot] - comm_before[node_rank]
        pos_all = np.where(node_compute, before + s_count[node_slot] + r_count[node_slot], before)
        del i_of_slot, mask, node_slot, node_pos, s_count, r_count, excl, before
    del s_at, r_at, at, send_slot, rs, node_rank, node_ci, slot_base, off

    to_recv = np.empty(len(rsort), dtype=sdt)  # each receive's row, in hand-off order
    to_recv[rsort] = recv_row
    del rsort
    own = slice(None) if keep_all else np.nonzero(keep)[0]
    del keep

    # the comm columns, column by column (each made, filled and its sources freed in turn: a large
    # lowering's peak memory): the sends at send_row, the receives at to_recv (in hand-off order) or at
    # recv_row (in sorted order)
    def column(dtype: Any, sent: Any, received: Any, at_recv: Any, at_send: Any = send_row) -> Any:
        col = np.empty(n_c, dtype=dtype)
        col[at_send] = sent
        col[at_recv] = received
        return col

    comm = {"kind": column(np.int8, send_kind, recv_kind[own], to_recv)}
    del send_kind, recv_kind
    rank_dt = column_dtype(n_c, n_ranks)
    comm["rank"] = column(rank_dt, h_rank, recv_rank, to_recv)
    comm["peer"] = column(rank_dt, peer, h_rank[own], to_recv)
    del h_rank, recv_rank, peer
    comm["stage"] = column(column_dtype(n_c, placement.num_stages), stage[h_rows], cons[own], to_recv)
    del cons
    h_mb = mb[h_rows]
    comm["mb"] = column(column_dtype(n_c, num_microbatches), h_mb, h_mb[own], to_recv)
    del h_mb, h_rows, to_recv, own
    comm["pos"] = column(column_dtype(n_c, int(lengths0.max(initial=0)) + n_c), send_pos, recv_pos, recv_row)
    del send_pos, recv_pos, send_row, recv_row
    lengths0 += comm_upto[1:]
    lengths0 -= comm_before
    lengths = lengths0.tolist()
    if pos_all.dtype != dt:
        pos_all = pos_all.astype(dt)
    return LoweredRanks(order, arr, pos_all, first, comm, cstarts, cfirst, lengths)


@lru_cache(maxsize=32)
def _hand_off_cells(placement: Placement) -> tuple[Any, Any, Any, Any]:
    """Per (kind, stage) cell, kind * stages + stage: whether the cell hands off, its datum (0 = ACT, 1 =
    GRAD), the peer rank and the consuming stage. A simple kind makes at most one datum (the semantics
    table: an FB's parts make one each)."""
    import numpy as np

    _, makes_of, _ = _lowering_tables()
    if (makes_of[0] & makes_of[1]).any():
        raise NotImplementedError("lowering: a node kind that makes both an activation and an input grad")
    n_stages = placement.num_stages
    fwd_peer, bwd_peer = stage_peers(placement)
    peer_of = np.full((3, n_stages), -1, dtype=np.int64)
    peer_of[0], peer_of[1] = fwd_peer, bwd_peer
    cons_of = np.full((3, n_stages), -1, dtype=np.int64)
    cons_of[0], cons_of[1] = placement.next_stage, placement.prev_stage
    datum_of = np.full(len(KINDS), 2 * n_stages, dtype=np.int64)
    datum_of[makes_of[0]], datum_of[makes_of[1]] = 0, n_stages
    cell = (datum_of[:, None] + np.arange(n_stages, dtype=np.int64)[None, :]).reshape(-1)
    tables = (
        (peer_of >= 0).reshape(-1)[cell],
        cell // n_stages,
        peer_of.reshape(-1)[cell],
        cons_of.reshape(-1)[cell],
    )
    for a in tables:
        a.setflags(write=False)
    return tables


def _hand_offs(placement: Placement, ks: Any) -> tuple[Any, Any, Any, Any]:
    """The hand-offs of the order's rows (`ks`: each row's kind * stages + stage, `array_order.kind_stage`):
    one per (simple part, produced datum) whose consumer lives on another rank, in the reference's creation
    order (rank, node, part), as (row, datum 0 = ACT / 1 = GRAD, peer rank, consumer stage)."""
    import numpy as np

    hands_ks, datum_ks, peer_ks, cons_ks = _hand_off_cells(placement)
    rows = np.flatnonzero(hands_ks[ks])
    cell = ks[rows]
    return rows, datum_ks[cell], peer_ks[cell], cons_ks[cell]
