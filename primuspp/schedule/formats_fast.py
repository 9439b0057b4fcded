"""`schedule.json` of a compact table, written from its arrays: the bytes that `formats.to_json_dict` and
`json.dumps` write (tests/schedule/test_formats_fast.py holds the two equal over the registry).

A lowered table at p=64, m=512 has about half a million nodes; formatting each node's text and encoding
the list cost more than simulating it. Here every node's JSON text is cut in two pieces from small
vocabularies: `"F12` (an opening quote when the node starts, its kind, its microbatch) and `.3>1", ` (its
stage, a comm node's peer, and what follows: `+` before a composite node's next part, `", ` before the
next node, `"` at the end of the rank). Each distinct piece is formatted once; the text is their gathered
list, joined (`str.join` over an object array: no per-node Python code).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from primuspp.schedule.compact import KINDS, LoweredRanks
from primuspp.schedule.table import ScheduleTable

_NEXT = ('", ', "+", '"')  # what follows a piece: the next node, the composite node's next part, rank end


def ranks_json(table: ScheduleTable) -> str | None:
    """`json.dumps(formats.node_texts(table))`, or None when the table is not a compact lowered one."""
    ranks = table.ranks
    if not isinstance(ranks, LoweredRanks):
        return None
    rows = ranks.rows
    lengths = np.asarray(ranks.lengths, dtype=np.int64)
    out_first = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_first[1:])
    n_out = int(out_first[-1])
    names = [k.text for k in KINDS]

    # order rows (compute and memory nodes, a composite node's parts in order) and comm rows, as columns
    r_rank, part = rows["rank"], rows["part"]
    node = np.asarray(ranks.first, dtype=np.int64)[r_rank] + rows["index"]
    r_pos = out_first[r_rank] + np.asarray(ranks.node_pos, dtype=np.int64)[node]
    c_pos = out_first[ranks.c_rank] + ranks.c_pos
    n_rows, n_comm = len(part), len(c_pos)
    if n_rows + n_comm == 0:
        return json.dumps([[] for _ in range(len(lengths))])
    max_parts = int(part.max(initial=0)) + 1
    last_part = np.ones(n_rows, dtype=bool)
    last_part[:-1] = part[1:] <= part[:-1]  # the next row starts another node (part 0) or there is none
    pos = np.concatenate([r_pos, c_pos])
    slot = np.concatenate([part, np.zeros(n_comm, dtype=part.dtype)]).astype(np.int64)
    kind = np.concatenate([rows["kind"], ranks.c_kind]).astype(np.int64)
    mb = np.concatenate([rows["mb"], ranks.c_mb]).astype(np.int64)
    stage = np.concatenate([rows["stage"], ranks.c_stage]).astype(np.int64)
    peer = np.concatenate([np.full(n_rows, -1, dtype=np.int64), np.asarray(ranks.c_peer, dtype=np.int64)])
    at_end = np.zeros(n_out, dtype=bool)
    at_end[out_first[1:][lengths > 0] - 1] = True  # a rank's last node
    follow = np.where(
        np.concatenate([last_part, np.ones(n_comm, dtype=bool)]), np.where(at_end[pos], 2, 0), 1
    )
    if (mb < 0).any() or (stage < 0).any():
        return None

    # piece 1: `"F12` (quote only on a node's first part); piece 2: `.3>1", "`
    n_mb, n_peer = int(mb.max()) + 1, int(peer.max()) + 2
    head = _pieces((kind * n_mb + mb) * 2 + (slot == 0), lambda code: _head(code, n_mb, names))
    tail = _pieces(((stage * n_peer + peer + 1) * len(KINDS) + kind) * 3 + follow, lambda c: _tail(c, n_peer))

    # each output slot (node position x part) gets the index of its two pieces; empty slots get ""
    n_slots = n_out * max_parts
    flat = pos * max_parts + slot
    pieces = np.empty((n_slots, 2), dtype=object)
    for col, (vocab, index) in enumerate((head, tail)):
        at = np.full(n_slots, len(vocab) - 1, dtype=np.int64)
        at[flat] = index
        pieces[:, col] = vocab[at]
    texts = []
    step = 2 * max_parts
    for r in range(len(lengths)):
        lo, hi = int(out_first[r]) * step, int(out_first[r + 1]) * step
        texts.append("[" + "".join(pieces.reshape(-1)[lo:hi].tolist()) + "]")
    return "[" + ", ".join(texts) + "]"


def _head(code: int, n_mb: int, names: list[str]) -> str:
    rest, quote = divmod(code, 2)
    kind, mb = divmod(rest, n_mb)
    return f"{chr(34) if quote else ''}{names[kind]}{mb}"


def _tail(code: int, n_peer: int) -> str:
    rest, follow = divmod(code, 3)
    rest, kind = divmod(rest, len(KINDS))
    stage, peer1 = divmod(rest, n_peer)
    k = KINDS[kind]
    link = "" if peer1 == 0 else ("<>"[k.is_send] + str(peer1 - 1))
    return f".{stage}{link}{_NEXT[follow]}"


def _pieces(codes: np.ndarray, text: Any) -> tuple[np.ndarray, np.ndarray]:
    """(vocabulary, index): `vocabulary[index[i]] == text(codes[i])`, each distinct code formatted once, and
    "" as the vocabulary's last entry (for empty slots). Codes are non-negative."""
    top = int(codes.max(initial=0)) + 1
    if top <= 4 * len(codes) + 4096:  # a bitmap of the codes used: no sort
        used = np.zeros(top, dtype=bool)
        used[codes] = True
        values = np.flatnonzero(used)
        index = (np.cumsum(used) - 1)[codes]
    else:  # sorted distinct codes (not np.unique: it imports numpy.ma)
        values = np.sort(codes)
        keep = np.ones(len(values), dtype=bool)
        keep[1:] = values[1:] != values[:-1]
        values = values[keep]
        index = np.searchsorted(values, codes)
    vocab = np.array([*(text(c) for c in values.tolist()), ""], dtype=object)
    return vocab, index
