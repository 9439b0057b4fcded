"""Small helpers shared by generators that build per-rank compute orders."""

from __future__ import annotations

from collections.abc import Iterable

from primuspp.schedule.nodes import Node, NodeKind

F, B, W, BW, FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB

# Generators create one Node per compute step: at p=64, m=512 that is 100,000 to 200,000 of them, and the
# frozen dataclass's __init__ (one object.__setattr__ per field) is most of a simple generator's time.
# `node` fills the same slots through their descriptors: the same object (equal, same hash, same repr,
# pickles alike) in half the time. tests/algorithms/test_orders.py holds it equal to Node(...).
_new = object.__new__
_set_kind, _set_mb, _set_stage, _set_peer, _set_parts = (
    Node.__dict__[name].__set__ for name in ("kind", "microbatch", "stage", "peer", "parts")
)


def node(kind: NodeKind, microbatch: int, stage: int) -> Node:
    """`Node(kind, microbatch, stage)`, built faster (a compute or memory node: no peer, no parts)."""
    out = _new(Node)
    _set_kind(out, kind)
    _set_mb(out, microbatch)
    _set_stage(out, stage)
    _set_peer(out, None)
    _set_parts(out, ())
    return out


def fb_node(forward: Node, backward: Node) -> Node:
    """`nodes.fused(forward, backward)` without its checks, for generators that pair an F with a B/BW by
    construction."""
    out = _new(Node)
    _set_kind(out, FB)
    _set_mb(out, forward.microbatch)
    _set_stage(out, forward.stage)
    _set_peer(out, None)
    _set_parts(out, (forward, backward))
    return out


def nodes(kind: NodeKind, microbatches: Iterable[int], stage: int) -> list[Node]:
    """`[Node(kind, mb, stage) for mb in microbatches]`, built faster."""
    return [node(kind, mb, stage) for mb in microbatches]


def one_f_one_b(warmup: int, forwards: list[Node], backwards: list[Node]) -> list[Node]:
    """`warmup` forwards, then alternate one forward and one backward, then the remaining backwards."""
    total = len(forwards)
    warmup = min(warmup, total)
    steady = total - warmup
    order = forwards[:warmup]
    pairs = forwards[:1] * (2 * steady)  # placeholders, overwritten: forward, backward, forward, ...
    pairs[0::2] = forwards[warmup:]
    pairs[1::2] = backwards[:steady]
    order += pairs
    order += backwards[steady:]
    return order


# -- the same orders as integer columns (`schedule.array_order.ArrayOrder`): no Node at all ------------------


def code(kind: NodeKind) -> int:
    """The kind's code in an ArrayOrder's columns."""
    from primuspp.schedule.array_order import KINDS

    return KINDS.index(kind)


def one_f_one_b_pick(warmup: int, total: int):
    """`one_f_one_b(warmup, forwards, backwards)` as indices into forwards + backwards (backward j at
    `total + j`), for `total` forwards and as many backwards."""
    import numpy as np

    warmup = min(warmup, total)
    steady = total - warmup
    pairs = np.empty(2 * steady, dtype=np.int64)
    pairs[0::2] = np.arange(warmup, total)
    pairs[1::2] = total + np.arange(steady)
    return np.concatenate((np.arange(warmup), pairs, total + np.arange(steady, total)))


def one_f_one_b_columns(warmup: int, forward: tuple, backward: tuple) -> tuple:
    """`one_f_one_b` on columns: `forward` and `backward` are (kind codes, microbatches, stages) of equal
    lengths; the result is the same three columns in 1F1B order."""
    import numpy as np

    pick = one_f_one_b_pick(warmup, len(forward[1]))
    return tuple(np.concatenate((f, b))[pick] for f, b in zip(forward, backward, strict=True))


def simple_columns(kind: NodeKind, microbatches, stage) -> tuple:
    """(kind codes, microbatches, stages) of `nodes(kind, microbatches, stage)`; `stage`: one for all or a
    column."""
    import numpy as np

    mbs = np.asarray(microbatches, dtype=np.int64)
    stages = np.broadcast_to(np.asarray(stage, dtype=np.int64), mbs.shape)
    return np.full(len(mbs), code(kind), dtype=np.int8), mbs, stages
