"""Validation of a compact lowered table (`compact.LoweredRanks`) as array passes.

It decides only whether the table is valid: every rule of `validation.py` becomes a comparison of position
arrays indexed by key = stage * microbatches + microbatch (an input's producer must sit at an earlier
position of the same rank, each node appears the right number of times, sends and receives pair in order
per rank pair). Termination is proven with a certificate: the unit-cost start of the compute node after each
batch (kept by lowering) must strictly increase along each rank and order every matched pair of batches so
that each wait points to a strictly earlier value; then the waits form no cycle and every batch completes.

Whenever a rule fails — or the table holds something this pass does not cover (memory nodes, an odd
composite node) — `valid` returns False and `validation.validate` runs the reference walk, which finds and
names the first problem exactly as before. So a True here is a proof; a False costs only time.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from primuspp.schedule.compact import CODE, KINDS, LoweredRanks, kinds_present, one_row_per_node
from primuspp.schedule.semantics import ACT, ACT_PREV, COMPLETION, GRAD, GRAD_NEXT, OWN_GRAD, SAVED, SEMANTICS

if TYPE_CHECKING:
    from primuspp.schedule.table import ScheduleTable

_F, _B, _W, _BW = CODE["F"], CODE["B"], CODE["W"], CODE["BW"]
_SF, _RF, _SB, _RB = CODE["SEND_F"], CODE["RECV_F"], CODE["SEND_B"], CODE["RECV_B"]


def _rules_match() -> bool:
    """The rules below are those of these kinds; another semantics table sends every table to the
    reference walk."""
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
    )


RULES_MATCH = _rules_match()


@cache
def _slots() -> tuple[Any, Any]:
    """Per kind code, its slot among the compute kinds (F, B, BW, W) and among the comm kinds (SEND_F,
    SEND_B, RECV_F, RECV_B); slot 4: any other kind."""
    import numpy as np

    compute = np.full(len(KINDS), 4, dtype=np.int64)
    compute[[_F, _B, _BW, _W]] = (0, 1, 2, 3)
    comm = np.full(len(KINDS), 4, dtype=np.int64)
    comm[[_SF, _SB, _RF, _RB]] = (0, 1, 2, 3)
    return compute, comm


def _below(values: Any, high: Any) -> Any:
    """0 <= values < high, elementwise (an int64 column read as unsigned: one comparison)."""
    import numpy as np

    if values.dtype == np.int64:
        return values.view(np.uint64) < np.asarray(high).astype(np.uint64)
    return (values >= 0) & (values < high)


def _inner(first: Any) -> Any:
    """Of the n - 1 steps between consecutive nodes (rank-major, rank r's from first[r]), those within one
    rank."""
    import numpy as np

    n = int(first[-1])
    inner = np.ones(max(n - 1, 0), dtype=bool)
    ends = first[1:-1] - 1  # the step from a rank's last node to the next rank's first
    inner[ends[(ends >= 0) & (ends < n - 1)]] = False
    return inner


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
    n = pl.num_stages
    size = m * n
    srank = np.array(pl.stage_rank, dtype=np.int64)
    nxt = np.array(pl.next_stage, dtype=np.int64)
    prv = np.array(pl.prev_stage, dtype=np.int64)
    member = np.zeros((len(pl.routes), n), dtype=bool)
    for i, route in enumerate(pl.routes):
        member[i, list(route)] = True
    # per key = stage * m + microbatch: stage-major, so that a rank's nodes (a few stages, microbatches
    # in turn) read and write neighbouring entries of the per-key tables (mb-major, each would touch its
    # own page: at p=256, m=2048 most of the time of this pass)
    on_route = member[np.arange(m) % len(pl.routes)].T.reshape(-1)

    kind, mb, stage, rank = rows["kind"], rows["mb"], rows["stage"], rows["rank"]
    if not set(kinds_present(rows, "kind")) <= {_F, _B, _W, _BW}:  # memory nodes: the reference walk
        return False
    # each row's position (its node's): row i is node i when no node is composite
    pos = ranks.node_pos if one_row_per_node(rows) else ranks.node_pos[ranks.first[rank] + rows["index"]]
    c_kind, c_mb, c_stage, c_rank = ranks.c_kind, ranks.c_mb, ranks.c_stage, ranks.c_rank
    c_pos, c_peer = ranks.c_pos, ranks.c_peer

    def placed(mbs, stages, on) -> object:
        """The rows' keys (stage * m + mb), or None unless each row's microbatch and stage exist, the
        stage is on the row's rank and on the microbatch's route."""
        if not (_below(mbs, m) & _below(stages, n)).all():
            return None
        keys = stages * m
        keys += mbs
        return keys if (srank[stages] == on).all() and on_route[keys].all() else None

    key = placed(mb, stage, rank)
    c_key = None if key is None else placed(c_mb, c_stage, c_rank)
    if c_key is None:
        return False
    big = np.iinfo(np.int64).max

    compute_slot, comm_slot = _slots()

    def at(slot_of, kinds, keys, where) -> tuple[object, object]:
        """Per slot of `slot_of` (a kind code's slot, 0..4): (count per key, position per key: `big` where
        none) of the rows of that slot's kind, as (5, size) tables (one pass over all rows)."""
        k = slot_of[kinds]
        k *= size
        k += keys
        count = np.bincount(k, minlength=5 * size).reshape(5, size)
        p = np.full(5 * size, big, dtype=np.int64)
        p[k] = where
        return count, p.reshape(5, size)

    (n_f, n_b, n_bw, n_w, _), (pos_f, pos_b, pos_bw, _, _) = at(compute_slot, kind, key, pos)
    # each node once; F everywhere on the routes; the backward as BW or as B then W
    need = on_route.astype(np.int64)
    if not ((n_f == need).all() and (n_b + n_bw == need).all() and (n_w == n_b).all()):
        return False
    pos_g = np.minimum(pos_b, pos_bw)  # the input grad's producer (one of the two)

    # messages: key of the producer; a send's own stage is the producer, a receive's the consumer
    send = (c_kind == _SF) | (c_kind == _SB)
    grad = (c_kind == _SB) | (c_kind == _RB)
    # the other stage: (SEND_F, RECV_B) the next one, else the previous one (tables of int32: each array as
    # long as the table is made once, and a large table's time is in making them)
    toward = nxt.astype(np.int32)[c_stage]
    np.copyto(toward, prv.astype(np.int32)[c_stage], where=(c_kind != _SF) & (c_kind != _RB))
    if not (toward >= 0).all():
        return False
    if not ((srank[toward] == c_peer) & (c_peer != c_rank)).all():
        return False
    msg_key = np.multiply(toward, m, dtype=np.int64)
    msg_key += c_mb
    np.copyto(msg_key, c_key, where=send)
    del c_key, toward  # large tables: each pass frees what it is done with (the build's peak memory)
    (n_sf, n_sb, n_rf, n_rb, n_other), (_, _, pos_rf, pos_rb, _) = at(comm_slot, c_kind, msg_key, c_pos)
    if n_other.any():  # a comm row of no comm kind
        return False
    stages = np.arange(size) // m
    cross_next = on_route & (nxt[stages] >= 0) & (srank[np.maximum(nxt[stages], 0)] != srank[stages])
    cross_prev = on_route & (prv[stages] >= 0) & (srank[np.maximum(prv[stages], 0)] != srank[stages])
    if not ((n_sf == cross_next) & (n_rf == cross_next) & (n_sb == cross_prev) & (n_rb == cross_prev)).all():
        return False
    # a send after what it sends (an activation: its F; an input grad: its B or BW)
    s_idx = np.nonzero(send)[0]
    s_key = msg_key[s_idx]
    made_at = np.where(grad[s_idx], pos_g[s_key], pos_f[s_key])
    if not (made_at < c_pos[s_idx]).all():
        return False
    del s_key, made_at

    # inputs before use, on the same rank: the producer itself, or the receive of what it made
    f = kind == _F
    fs, fk, fp = stage[f], key[f], pos[f]
    p = prv[fs]
    has = p >= 0
    pk = fk[has] + (p[has] - fs[has]) * m
    local = srank[p[has]] == rank[f][has]
    came = np.where(local, pos_f[pk], pos_rf[pk])
    if not (came < fp[has]).all():
        return False
    g = (kind == _B) | (kind == _BW)
    gs, gk, gp = stage[g], key[g], pos[g]
    if not (pos_f[gk] < gp).all():
        return False
    q = nxt[gs]
    has = q >= 0
    qk = gk[has] + (q[has] - gs[has]) * m
    local = srank[q[has]] == rank[g][has]
    came = np.where(local, pos_g[qk], pos_rb[qk])
    if not (came < gp[has]).all():
        return False
    w = kind == _W
    if not (pos_b[key[w]] < pos[w]).all():
        return False
    del f, fs, fk, fp, p, has, pk, local, came, g, gs, gk, gp, q, qk, w, key

    # FIFO per rank pair: the sends of a -> b in position order are the receives of b from a in order
    src = np.where(send, c_rank, c_peer)
    dst = np.where(send, c_peer, c_rank)
    msg = 2 * msg_key + grad
    r_idx = np.nonzero(~send)[0]
    # the rows are in (rank, position) order (checked: LoweredRanks keeps them so), so each pair's sends are
    # in position order on the sender's rows and its receives on the receiver's: a stable sort by the pair
    # alone lists both in position order (16-bit keys sort in linear time). Checked on each row's place in
    # the whole lowered table (rank-major; positions within their rank's length: checked below)
    lengths = np.asarray(ranks.lengths, dtype=np.int64)
    if len(lengths) != len(ranks):
        return False
    lowered_first = np.cumsum(lengths) - lengths
    c_at = lowered_first[c_rank]
    c_at += c_pos
    if len(c_at) > 1 and not (c_at[1:] > c_at[:-1]).all():
        return False
    del c_at  # (made again below: a large table's peak memory is in the pairing that follows)
    n_pairs = pl.pp * pl.pp
    pair = src * pl.pp
    pair += dst
    pair = pair.astype(np.int16 if n_pairs <= np.iinfo(np.int16).max else np.int64, copy=False)
    s_idx = s_idx[np.argsort(pair[s_idx], kind="stable")]
    r_idx = r_idx[np.argsort(pair[r_idx], kind="stable")]
    if len(s_idx) != len(r_idx):
        return False
    if not ((src[s_idx] == src[r_idx]).all() and (dst[s_idx] == dst[r_idx]).all()):
        return False
    if not (msg[s_idx] == msg[r_idx]).all():
        return False
    del src, dst, msg, pair, msg_key, send, grad, pos_f, pos_b, pos_bw, pos_g, pos_rf, pos_rb

    # termination: batch = (rank, compute nodes before it); certificate from the hints
    n_ranks = len(ranks)
    # all nodes are compute nodes (memory nodes went to the reference walk), so `first` counts them
    cfirst = ranks.first
    counts = np.diff(cfirst)
    if len(cfirst) != len(ranks.hint_first) or not (cfirst == ranks.hint_first).all():
        return False
    hints = ranks.hints
    if len(hints) != int(cfirst[-1]):
        return False
    # each rank's positions are 0..length-1, each held once (compute and comm rows together): the comm rows
    # being in (rank, position) order, the j-th comm row of rank r has r's first `c_pos - j` compute nodes
    # before it
    c_counts = np.bincount(c_rank, minlength=n_ranks)
    if not (counts + c_counts == lengths).all():
        return False
    node_pos = ranks.node_pos
    rank_of_node = np.repeat(np.arange(n_ranks, dtype=np.int64), counts)
    if not (_below(node_pos, lengths[rank_of_node]).all() and _below(c_pos, lengths[c_rank]).all()):
        return False
    held = np.zeros(int(lengths.sum()), dtype=np.int8)
    held[lowered_first[rank_of_node] + node_pos] = 1
    held[lowered_first[c_rank] + c_pos] += 1
    if not (held == 1).all():
        return False
    del held, rank_of_node, pos
    comm_first = np.cumsum(c_counts) - c_counts
    boundary = c_pos - (np.arange(len(c_pos), dtype=np.int64) - comm_first[c_rank])
    # hints strictly increase along each rank
    step = np.diff(hints) > 0
    if len(step) and not step[_inner(cfirst)].all():
        return False

    # phi(r, b): the hint of the compute node after boundary b of rank r, -inf before the first (b = -1),
    # +inf after the last (b = count): read from one table, each rank's hints between -inf and +inf
    ext = np.full(len(hints) + 2 * n_ranks, np.inf)
    ext[cfirst[:-1] + 2 * np.arange(n_ranks, dtype=np.int64)] = -np.inf
    ext[
        np.arange(len(hints), dtype=np.int64) + 2 * np.repeat(np.arange(n_ranks, dtype=np.int64), counts) + 1
    ] = hints
    at_b = cfirst[c_rank] + 2 * c_rank + 1 + boundary  # phi(rank, boundary) of each comm row: ext[at_b]
    a_at, b_at = at_b[s_idx], at_b[r_idx]
    if not (ext[b_at - 1] < ext[a_at]).all():
        return False
    return bool((ext[a_at - 1] < ext[b_at]).all())
