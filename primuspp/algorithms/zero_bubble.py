"""ZB-H1: 1F1B with the backward split into B (input grad) and W (weight grad).

Rank r keeps up to r weight-grad passes pending (each W runs after the B that makes the pending count
exceed r); the rest run at the end. W fills the warm-up/cool-down bubbles without raising peak activation
memory above p microbatches.

With unequal costs (W cheaper than B, comm > 0) that fixed order leaves waits; `generate_cost_aware` (the
registered generator) lets the capped list scheduler's orders compete under the construction's own peak
and re-places W's with the cost model (`cost_aware.best_linear`); the construction wins ties.
"""

from __future__ import annotations

from primuspp.algorithms import cost_aware, greedy, zb_timed
from primuspp.algorithms.base import Algorithm, ComputeOrder, GenerationRequest
from primuspp.algorithms.effort import EFFORT, full_search
from primuspp.algorithms.orders import (
    B,
    F,
    W,
    code,
    node,
    nodes,
    one_f_one_b,
    one_f_one_b_columns,
    simple_columns,
)
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import linear

FULL_SEARCH_LIMIT = 20_000  # with effort="auto": compute nodes up to which the cost-aware search runs
POLICIES = tuple(
    p
    for p in greedy.POLICIES
    if p.name in ("alt-fit", "alt-lag", "alt-lag-wait", "alt-fit-wait", "b-fit-wait")
)


def generate(req: GenerationRequest) -> ArrayOrder:
    """`generate_reference` as columns (no Node built): rank r's k-th B (of microbatch k) is followed by the
    W of microbatch k - r once k >= r; the last r W's close the rank."""
    import numpy as np

    p, m = req.pp, req.micro_batches
    mbs = np.arange(m)
    ranks = []
    for r in range(p):
        base = one_f_one_b_columns(p - r - 1, simple_columns(F, mbs, r), simple_columns(B, mbs, r))
        at_b = np.flatnonzero(base[0] == code(B))
        # sort keys: base node i at 2i; the W after B k at 2 * (B k's place) + 1; the rest after everything
        early = max(m - r, 0)  # W's placed right after a later B
        w_key = np.concatenate((2 * at_b[r:] + 1, 2 * len(base[0]) + np.arange(m - early)))
        keys = np.concatenate((2 * np.arange(len(base[0])), w_key))
        w = simple_columns(W, mbs, r)
        pick = np.argsort(keys, kind="stable")
        ranks.append(tuple(np.concatenate((c, wc))[pick] for c, wc in zip(base, w, strict=True)))
    return ArrayOrder.from_ranks(ranks)


def generate_reference(req: GenerationRequest) -> ComputeOrder:
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
    generate=zb_timed.floored(generate_cost_aware, lambda p, params: float(p)),
    uses_costs=True,
    params=(EFFORT,),
)
