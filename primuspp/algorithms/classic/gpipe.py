"""GPipe: every forward, then every full backward."""

from __future__ import annotations

from primuspp.algorithms.base import Algorithm, GenerationRequest
from primuspp.algorithms.orders import BW, F, simple_columns
from primuspp.schedule.array_order import ArrayOrder


def generate(req: GenerationRequest) -> ArrayOrder:
    """`tests/oracles/generators.gpipe` as columns (no Node built)."""
    import numpy as np

    m = req.micro_batches
    ranks = []
    for r in range(req.pp):
        f, bw = simple_columns(F, np.arange(m), r), simple_columns(BW, np.arange(m), r)
        ranks.append(tuple(np.concatenate(pair) for pair in zip(f, bw, strict=True)))
    return ArrayOrder.from_ranks(ranks)


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
