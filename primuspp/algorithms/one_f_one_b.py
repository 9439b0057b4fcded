"""1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward / one full backward."""

from __future__ import annotations

from primuspp.algorithms.base import Algorithm, ComputeOrder, GenerationRequest
from primuspp.algorithms.orders import BW, F, nodes, one_f_one_b, one_f_one_b_columns, simple_columns
from primuspp.schedule.array_order import ArrayOrder


def generate(req: GenerationRequest) -> ArrayOrder:
    """`generate_reference` as columns (no Node built)."""
    import numpy as np

    p, m = req.pp, req.micro_batches
    mbs = np.arange(m)
    return ArrayOrder.from_ranks(
        [
            one_f_one_b_columns(p - r - 1, simple_columns(F, mbs, r), simple_columns(BW, mbs, r))
            for r in range(p)
        ]
    )


def generate_reference(req: GenerationRequest) -> ComputeOrder:
    p, m = req.pp, req.micro_batches
    return [one_f_one_b(p - r - 1, nodes(F, range(m), r), nodes(BW, range(m), r)) for r in range(p)]


ALGORITHM = Algorithm(
    name="1f1b",
    aliases=("basic-1f1b",),
    placement="linear",
    summary="one forward, one backward after p - r - 1 warm-up forwards",
    memory="p - rank",
    constraints="any p >= 1, m >= 1",
    vpp_default=1,
    vpp_rule="1",
    vpp_ok=lambda v: v == 1,
    generate=generate,
)
