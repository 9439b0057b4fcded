"""GPipe: every forward, then every full backward."""

from __future__ import annotations

from primuspp.algorithms.base import GenerationRequest
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
