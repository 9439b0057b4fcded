"""ZB-H1: 1F1B with the backward split into B (input grad) and W (weight grad).

Rank r keeps up to r weight-grad passes pending (each W runs after the B that makes the pending count
exceed r); the rest run at the end. W fills the warm-up/cool-down bubbles without raising peak activation
memory above p microbatches.
"""

from __future__ import annotations

from primuspp.algorithms.base import Algorithm, ComputeOrder, GenerationRequest
from primuspp.algorithms.orders import B, F, W, one_f_one_b
from primuspp.schedule.nodes import Node, NodeKind


def generate(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    order = []
    for r in range(p):
        base = one_f_one_b(
            p - r - 1, [Node(F, mb, r) for mb in range(m)], [Node(B, mb, r) for mb in range(m)]
        )
        seq: list[Node] = []
        pending: list[int] = []
        for node in base:
            seq.append(node)
            if node.kind is NodeKind.B:
                pending.append(node.microbatch)
                if len(pending) > r:
                    seq.append(Node(W, pending.pop(0), r))
        seq.extend(Node(W, mb, r) for mb in pending)
        order.append(seq)
    return order


ALGORITHM = Algorithm(
    name="zero-bubble",
    aliases=("zerobubble", "zb-h1", "zb1p"),
    placement="linear",
    summary="ZB-H1: 1F1B with B/W split, W delayed to fill bubbles at 1F1B's memory",
    memory="p",
    constraints="any p >= 1, m >= 1",
    vpp_default=1,
    vpp_rule="1",
    vpp_ok=lambda v: v == 1,
    generate=generate,
)
