"""Small helpers shared by generators that build per-rank compute orders."""

from __future__ import annotations

from primuspp.schedule.nodes import Node, NodeKind

F, B, W, BW = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW


def one_f_one_b(warmup: int, forwards: list[Node], backwards: list[Node]) -> list[Node]:
    """`warmup` forwards, then alternate one forward and one backward, then the remaining backwards."""
    total = len(forwards)
    warmup = min(warmup, total)
    order = forwards[:warmup]
    for i in range(total - warmup):
        order.append(forwards[warmup + i])
        order.append(backwards[i])
    order.extend(backwards[total - warmup :])
    return order
