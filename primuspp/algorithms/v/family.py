"""The V family: zbv, v-half, v-min and v-auto (V placement, v = 2, B/W split).

All four build candidates the same way — building blocks repeated and squeezed (`v_block_orders`), plus,
on small instances, the capped greedy (`greedy`) — and keep the one with the shortest longest-rank span (the
zero-bubble papers' metric), then the shortest step time, among those within the memory budget. They
differ in the budget and the blocks they start from:

- zbv: budget p (1F1B's), the wide blocks; zero bubble when F = B = W.
- v-half: budget floor((p+2)/2), the block with doubled F0/B1 spacing.
- v-min: budget floor((p+4)/3), the tight block.
- v-auto: any budget >= 1 (`max_mem`, default p), the blocks that fit it, widest first.

With `offload=true` each chunk-0 activation moves to host right after its forward (OFFLOAD) and back just
before its backward (RELOAD); the simulator's memory follows.
"""

from __future__ import annotations

import math

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.effort import full_search
from primuspp.algorithms.search import greedy, score_memo
from primuspp.algorithms.search.bounds import Proof
from primuspp.algorithms.search.portfolio import memory_units, pick
from primuspp.algorithms.search.refine import pick_refined
from primuspp.algorithms.v import auto_blocks as v_auto_blocks
from primuspp.algorithms.v import auto_grid as v_auto_grid
from primuspp.algorithms.v import block_orders as v_block_orders
from primuspp.algorithms.v import zbv_timed
from primuspp.algorithms.v.blocks import HALF, MIN, ZB, ZB_TIGHT, Block, estimated_peak
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import v_shape

#: with effort="auto", up to this many compute nodes both squeezes, the widest blocks and the greedy
#: policies are tried; beyond, only the block's preferred squeeze (keeps p=64, m=512 near a second)
FULL_SEARCH_LIMIT = 12_000
GREEDY_POLICIES = tuple(p for p in greedy.POLICIES if p.name in ("alt-fit", "b-eager-deep", "b-eager-old"))
AUTO_BLOCKS = (
    MIN,
    Block("min-b0", 1, 1, 1, 2),
    Block("half-f1", 1, 2, 1, 1),
    HALF,
    Block("half-b1", 1, 1, 2, 1),
    Block("half-f13", 1, 3, 1, 1),
    Block("half-f2b2", 1, 2, 2, 1),
    Block("wide-b1", 1, 1, 3, 1),
    Block("wide-b13", 1, 1, 3, 3),
    ZB_TIGHT,
    ZB,
)


def v_orders(
    p: int,
    m: int,
    cap: float,
    blocks: tuple[Block, ...],
    costs,
    report: dict,
    widest: int = 1,
    effort: str = "auto",
    given: str | None = None,
    space: bool = False,
) -> ComputeOrder:
    """Best V order within `cap` (microbatch units per rank): the `widest` blocks of `blocks` that fit,
    squeezed; with a full search (`effort`) both squeezes of each and the greedy policies too."""
    placement = v_shape(p)
    stage_costs = costs.for_placement(placement)
    cap = greedy.fit_cap(placement, stage_costs, cap, given, report)
    # live whole chunks the blocks may hold: a chunk is half a microbatch, or up to `growth` times that
    # when B keeps more than F saved (then the blocks plan under the cap divided by it)
    growth = max(1.0, *(1.0 - f for f in stage_costs.fractions()))
    chunks = math.floor(cap * 2 / growth + 1e-9)
    if growth > 1.0:  # the algorithm's own blocks may not fit that: let the narrower ones compete
        blocks = tuple(dict.fromkeys((*blocks, *AUTO_BLOCKS)))
    small = full_search(effort, 6 * p * m, FULL_SEARCH_LIMIT, report)
    widest = widest if small else 1
    # The blocks count whole chunks live from F to the end of W: within the cap whenever B frees part of
    # the activation (b_free >= 0) and the chunks are halves. Otherwise the shared memory model checks
    # every candidate, and the capped greedy, which counts B's growth, is among them.
    units = memory_units(placement, stage_costs.activation)
    grows = min(stage_costs.fractions()) < 0
    exact = all(abs(u - 0.5) < 1e-12 for u in units) and not grows
    limit = None if exact else cap
    # with a full search, a candidate no order can beat (`bounds.Proof`) is what the pick below takes (or an
    # earlier one that ties it): the candidates after it are not built
    proof = Proof(placement, m, stage_costs, limit)
    at = None
    ranked = sorted(((estimated_peak(p, b), i) for i, b in enumerate(blocks)), key=lambda x: (-x[0], x[1]))
    candidates: list[tuple[str, ComputeOrder]] = []
    found = 0
    squeezes: list[str] = []  # how each block built was squeezed: in full, or from its period (`v_period`)
    for estimate, i in ranked:  # the widest blocks that fit: by estimate first, then by building them
        if found == widest or at is not None:
            break
        if estimate > chunks + 1:
            continue
        how: dict = {}
        peak, orders = v_block_orders.squeezed_orders(p, m, blocks[i], chunks, both=small, report=how)
        squeezes.append(f"{blocks[i].name}: {how['squeeze']}")
        if not orders:
            continue
        found += 1
        if small and peak < chunks:  # the same block within its own memory: no worse if the rest is unused
            orders.extend(v_block_orders.squeezed_orders(p, m, blocks[i], peak)[1])
        for order in orders:
            candidates.append(order)
            if small and proof.unbeatable(order[1], score_memo.score(placement, m, order[1], stage_costs)):
                at = len(candidates) - 1
                break
    if squeezes:
        report["squeeze"] = "; ".join(squeezes)
    if at is None and small:  # more spacings of the block family, for the cost model to choose from
        candidates.extend(v_block_orders.candidates(p, m, chunks))
        if space:  # v-auto: the whole two-regime block space, ranked by the cost model
            candidates.extend(
                v_auto_blocks.candidates(p, m, chunks, stage_costs, effort=effort, report=report)
            )
    if at is None and (small or not candidates or grows):
        for policy in GREEDY_POLICIES if small else GREEDY_POLICIES[:1]:
            plan = greedy.schedule(placement, m, stage_costs, cap, policy)
            candidates.append((f"greedy/{policy.name}", plan.order))
    if space and small:  # v-auto: no worse than the controllable-memory construction in span and step

        def floor():
            return v_auto_grid.floor_order(p, m, chunks, stage_costs, cap, effort, report)

        name, order = v_auto_grid.floor_pick(placement, m, candidates, stage_costs, limit, floor, report)
        report["candidate"] = name
        return order
    choose = pick_refined if small else pick  # the W post-pass only with a full search
    name, order, _ = choose(placement, m, candidates, stage_costs, limit, "span")
    report["candidate"] = name
    return order


def with_offload(order: ComputeOrder, p: int) -> ComputeOrder:
    """OFFLOAD each chunk-0 activation (stages < p) after its F; RELOAD it just before its B."""
    out = []
    for seq in order:
        new: list[Node] = []
        for node in seq:
            if node.stage < p and node.kind is NodeKind.B:
                new.append(Node(NodeKind.RELOAD, node.microbatch, node.stage))
            new.append(node)
            if node.stage < p and node.kind is NodeKind.F:
                new.append(Node(NodeKind.OFFLOAD, node.microbatch, node.stage))
        out.append(new)
    return out


def _generator(budget, blocks: tuple[Block, ...], widest: int = 1, space: bool = False):
    def generate(req: GenerationRequest) -> ComputeOrder:
        p, m = req.pp, req.micro_batches
        cap = budget(p, req.params)
        effort = req.params.get("effort", "auto")
        given = "max_mem" if req.params.get("max_mem") is not None else None  # a cap the user set
        order = v_orders(p, m, cap, blocks, req.costs, req.report, widest, effort, given, space)
        return with_offload(order, p) if req.params.get("offload") else order

    return generate


def _auto_budget(p: int, params: dict) -> float:
    value = params.get("max_mem")
    return float(p) if value is None else float(value)


#: the fixed-budget V algorithms' activation budgets, microbatches per rank, as functions of p
BUDGETS = {"zbv": lambda p: p, "v-half": lambda p: (p + 2) // 2, "v-min": lambda p: (p + 4) // 3}


def _fixed(name: str):
    return lambda p, params: float(BUDGETS[name](p))


#: the registered generators (`registry` holds their records): each V algorithm's budget and blocks
generate_zbv = zbv_timed.floored(_generator(_fixed("zbv"), (ZB, ZB_TIGHT)))
generate_v_half = _generator(_fixed("v-half"), (HALF,))
generate_v_min = _generator(_fixed("v-min"), (MIN,))
generate_v_auto = _generator(_auto_budget, AUTO_BLOCKS, widest=3, space=True)
