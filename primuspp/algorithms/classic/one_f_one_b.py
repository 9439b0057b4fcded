"""1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward / one full backward."""

from __future__ import annotations

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.orders import BW, F, code
from primuspp.schedule.array_order import ArrayOrder


def generate(req: GenerationRequest) -> ArrayOrder:
    """1F1B as columns, every rank at once (no Node built; its Node form: tests/oracles/generators.py):
    rank r runs w = min(p - r - 1, m)
    forwards, then F(w + j), B(j) pairs, then the remaining backwards, so F(i) sits at i (i < w) or
    w + 2 (i - w), and B(j) at w + 2 j + 1 (j < m - w) or m + j."""
    import numpy as np

    p, m = req.pp, req.micro_batches
    r = np.arange(p, dtype=np.int64)[:, None]
    i = np.arange(m, dtype=np.int64)[None, :]
    w = np.minimum(p - r - 1, m)
    place_f = np.where(i < w, i, 2 * i - w)
    place_b = np.where(i < m - w, w + 2 * i + 1, m + i)
    n = 2 * m
    rows = np.arange(p, dtype=np.int64)[:, None] * n
    kind = np.empty(p * n, dtype=np.int8)
    mb = np.empty(p * n, dtype=np.int64)
    mbs = np.broadcast_to(i, (p, m)).ravel()
    for k, place in ((F, place_f), (BW, place_b)):
        at = (rows + place).ravel()
        kind[at] = code(k)
        mb[at] = mbs
    stage = np.repeat(np.arange(p, dtype=np.int64), n)
    return ArrayOrder.from_flat(kind, mb, stage, [n] * p)
