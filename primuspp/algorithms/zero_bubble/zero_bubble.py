"""ZB-H1: 1F1B with the backward split into B (input grad) and W (weight grad).

Rank r keeps up to r weight-grad passes pending (each W runs after the B that makes the pending count
exceed r); the rest run at the end. W fills the warm-up/cool-down bubbles without raising peak activation
memory above p microbatches.

With unequal costs (W cheaper than B, comm > 0) that fixed order leaves waits; `generate_cost_aware` (the
registered generator) lets the capped list scheduler's orders compete under the construction's own peak
and re-places W's with the cost model (`cost_aware.best_linear`); the construction wins ties.
"""

from __future__ import annotations

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.effort import full_search
from primuspp.algorithms.orders import (
    B,
    F,
    W,
    code,
)
from primuspp.algorithms.search import cost_aware, greedy
from primuspp.algorithms.zero_bubble import zb_timed
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.placement import linear

FULL_SEARCH_LIMIT = 20_000  # with effort="auto": compute nodes up to which the cost-aware search runs
POLICIES = tuple(
    p
    for p in greedy.POLICIES
    if p.name in ("alt-fit", "alt-lag", "alt-lag-wait", "alt-fit-wait", "b-fit-wait")
)


def generate(req: GenerationRequest) -> ArrayOrder:
    """ZB-H1 as columns, every rank at once (no Node built; its Node form: tests/oracles/generators.py):
    each node's place in its rank's
    order is counted in closed form (`_places`)."""
    import numpy as np

    p, m = req.pp, req.micro_batches
    place_f, place_b, place_w = _places(p, m)
    n = 3 * m
    rows = np.arange(p, dtype=np.int64)[:, None] * n
    kind = np.empty(p * n, dtype=np.int8)
    mb = np.empty(p * n, dtype=np.int64)
    mbs = np.broadcast_to(np.arange(m, dtype=np.int64), (p, m))
    for k, place in ((F, place_f), (B, place_b), (W, place_w)):
        at = (rows + place).ravel()
        kind[at] = code(k)
        mb[at] = mbs.ravel()
    stage = np.repeat(np.arange(p, dtype=np.int64), n)
    return ArrayOrder.from_flat(kind, mb, stage, [n] * p)


def _places(p: int, m: int) -> tuple:
    """Per rank r (rows) and microbatch (columns), the place of its F, B and W in rank r's order.

    Rank r runs w = min(p - r - 1, m) forwards, then F(w + j), B(j) pairs, then the remaining B's; B(k) is
    followed by W(k - r) once k >= r, and the last r W's close the order. So before F(i >= w) come w
    forwards, i - w pairs and the W's after the first i - w B's; before B(k), its forwards (k + w + 1, or
    all m), k B's and the W's after the B's before it; W(j) follows B(j + r), or, past the last B with a
    W after it, it comes after all 2m F and B and the j W's before it."""
    import numpy as np

    r = np.arange(p, dtype=np.int64)[:, None]
    i = np.arange(m, dtype=np.int64)[None, :]
    w = np.minimum(p - r - 1, m)
    steady = m - w
    j = i - w  # F(i)'s pair, when i >= w
    place_f = np.where(i < w, i, w + 2 * j + np.maximum(0, j - r))
    place_b = np.where(i < steady, w + 2 * i + 1, m + i) + np.maximum(0, i - r)
    k = i + r  # the B that W(i) follows
    after = np.take_along_axis(place_b, np.minimum(k, m - 1), axis=1) + 1
    place_w = np.where(k <= m - 1, after, 2 * m + i)
    return place_f, place_b, place_w


def generate_cost_aware(req: GenerationRequest) -> ComputeOrder:
    """The construction, or with a full search the best of it, the greedy orders within its peak and their
    W post-pass (see the module docstring)."""
    own = generate(req)
    if not full_search(
        req.params.get("effort", "auto"), 3 * req.pp * req.micro_batches, FULL_SEARCH_LIMIT, req.report
    ):
        return own
    placement = linear(req.pp)
    costs = req.costs.for_placement(placement)
    return cost_aware.best_linear(
        placement, req.micro_batches, costs, [("zb-h1", own)], None, POLICIES, "span", True, req.report
    )


#: the registered generator (`registry`): the cost-aware search, floored by the timed construction at p
generate_floored = zb_timed.floored(generate_cost_aware, lambda p, params: float(p))
