"""Compact storage (`compact.LoweredRanks`) of any per-rank node lists: what tests build to hand the fast
validator a changed table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from primuspp.schedule.array_order import CODE, order_arrays
from primuspp.schedule.compact import LoweredRanks
from primuspp.schedule.nodes import Node


def from_ranks(ranks: Sequence[Sequence[Node]], hints: Any = None, hint_first: Any = None) -> LoweredRanks:
    """Compact storage of any per-rank node lists (comm nodes included, in any order): the inverse of
    reading a LoweredRanks. Without `hints` the termination certificate is absent (all hints zero), so the
    fast validator defers to the reference walk; tests pass a lowering's hints to a changed table."""
    import numpy as np

    order, positions = [], []
    c_rank, c_pos, c_kind, c_mb, c_stage, c_peer = [], [], [], [], [], []
    for r, seq in enumerate(ranks):
        keep, where = [], []
        for i, node in enumerate(seq):
            if node.kind.is_comm:
                c_rank.append(r)
                c_pos.append(i)
                c_kind.append(CODE[node.kind.text])
                c_mb.append(node.microbatch)
                c_stage.append(node.stage)
                c_peer.append(-1 if node.peer is None else node.peer)
            else:
                keep.append(node)
                where.append(i)
        order.append(tuple(keep))
        positions.extend(where)
    order_t = tuple(order)
    lengths = [len(seq) for seq in ranks]
    first = np.zeros(len(order_t) + 1, dtype=np.int64)
    np.cumsum([len(seq) for seq in order_t], out=first[1:])
    comm = {
        "rank": np.array(c_rank, dtype=np.int64),
        "pos": np.array(c_pos, dtype=np.int64),
        "kind": np.array(c_kind, dtype=np.int8),
        "mb": np.array(c_mb, dtype=np.int64),
        "stage": np.array(c_stage, dtype=np.int64),
        "peer": np.array(c_peer, dtype=np.int64),
    }
    if hints is None:
        n_compute = [sum(1 for n in seq if n.kind.is_compute) for seq in order_t]
        hints = np.zeros(sum(n_compute))
        hint_first = np.zeros(len(order_t) + 1, dtype=np.int64)
        np.cumsum(n_compute, out=hint_first[1:])
    rows = order_arrays(order_t)
    node_pos = np.array(positions, dtype=np.int64)
    return LoweredRanks(order_t, rows, node_pos, first, comm, hints, hint_first, lengths)
