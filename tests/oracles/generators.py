"""The Node-list forms of the generators that emit columns: each test holds the product's columns equal to
its readable order here."""

from __future__ import annotations

from collections.abc import Iterable

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.dualpipe import dualpipe as _dp
from primuspp.algorithms.orders import BW, B, F, W
from primuspp.schedule.nodes import Node, NodeKind, fused

node = Node


def nodes(kind: NodeKind, microbatches: Iterable[int], stage: int) -> list[Node]:
    return [Node(kind, mb, stage) for mb in microbatches]


def one_f_one_b(warmup: int, forwards: list, backwards: list) -> list:
    """`warmup` forwards, then alternate one forward and one backward, then the remaining backwards."""
    warmup = min(warmup, len(forwards))
    steady = len(forwards) - warmup
    order = forwards[:warmup]
    for f, b in zip(forwards[warmup:], backwards[:steady], strict=True):
        order += [f, b]
    return order + backwards[steady:]


def gpipe(req: GenerationRequest) -> ComputeOrder:
    m = req.micro_batches
    return [nodes(F, range(m), r) + nodes(BW, range(m), r) for r in range(req.pp)]


def one_f_one_b_order(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    return [one_f_one_b(p - r - 1, nodes(F, range(m), r), nodes(BW, range(m), r)) for r in range(p)]


def zero_bubble(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    order = []
    for r in range(p):
        base = one_f_one_b(p - r - 1, nodes(F, range(m), r), nodes(B, range(m), r))
        seq: list[Node] = []
        pending: list[int] = []
        for n in base:
            seq.append(n)
            if n.kind is B:
                pending.append(n.microbatch)
                if len(pending) > r:
                    seq.append(node(W, pending.pop(0), r))
        seq.extend(nodes(W, pending, r))
        order.append(seq)
    return order


def dualpipe(req: GenerationRequest) -> ComputeOrder:
    return _dp._dualpipe_ranks(req, node, fused)


def dualpipe_v(req: GenerationRequest) -> ComputeOrder:
    return _dp._dualpipe_v_ranks(req, node, fused)
