"""Small helpers shared by generators that build per-rank compute orders as integer columns
(`schedule.array_order.ArrayOrder`: no Node at all); tests/oracles/generators.py holds their Node forms."""

from __future__ import annotations

from primuspp.schedule.nodes import NodeKind

F, B, W, BW, FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB


def code(kind: NodeKind) -> int:
    """The kind's code in an ArrayOrder's columns."""
    from primuspp.schedule.array_order import KINDS

    return KINDS.index(kind)


def one_f_one_b_pick(warmup: int, total: int):
    """Indices into forwards + backwards (backward j at `total + j`), for `total` forwards and as many
    backwards, in 1F1B order: `warmup` forwards, then one forward and one backward alternately, then the
    remaining backwards."""
    import numpy as np

    warmup = min(warmup, total)
    steady = total - warmup
    pairs = np.empty(2 * steady, dtype=np.int64)
    pairs[0::2] = np.arange(warmup, total)
    pairs[1::2] = total + np.arange(steady)
    return np.concatenate((np.arange(warmup), pairs, total + np.arange(steady, total)))


def one_f_one_b_columns(warmup: int, forward: tuple, backward: tuple) -> tuple:
    """`one_f_one_b_pick` on columns: `forward` and `backward` are (kind codes, microbatches, stages) of
    equal lengths; the result is the same three columns in 1F1B order."""
    import numpy as np

    pick = one_f_one_b_pick(warmup, len(forward[1]))
    return tuple(np.concatenate((f, b))[pick] for f, b in zip(forward, backward, strict=True))


def simple_columns(kind: NodeKind, microbatches, stage) -> tuple:
    """(kind codes, microbatches, stages) of one node of `kind` per microbatch at `stage` (one for all or a
    column)."""
    import numpy as np

    mbs = np.asarray(microbatches, dtype=np.int64)
    stages = np.broadcast_to(np.asarray(stage, dtype=np.int64), mbs.shape)
    return np.full(len(mbs), code(kind), dtype=np.int8), mbs, stages
