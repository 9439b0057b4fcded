"""GPipe: every forward, then every full backward."""

from __future__ import annotations

from primuspp.algorithms.base import Algorithm, ComputeOrder, GenerationRequest
from primuspp.schedule.nodes import Node, NodeKind


def generate(req: GenerationRequest) -> ComputeOrder:
    m = req.micro_batches
    return [
        [Node(NodeKind.F, mb, r) for mb in range(m)] + [Node(NodeKind.BW, mb, r) for mb in range(m)]
        for r in range(req.pp)
    ]


ALGORITHM = Algorithm(
    name="gpipe",
    aliases=(),
    placement="linear",
    summary="all forwards, then all backwards",
    memory="m",
    constraints="any p >= 1, m >= 1",
    vpp_default=1,
    vpp_rule="1",
    vpp_ok=lambda v: v == 1,
    generate=generate,
)
