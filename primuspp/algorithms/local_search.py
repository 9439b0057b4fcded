"""Critical-path local search: swap two neighbouring nodes of a rank where the rank, not the data, holds
the later one back, and keep the swap when the order gets better.

The simulator's timing (`schedule.timing.node_times`) says for every node why it starts when it does: its
rank was busy with the node before it, or an input arrived then. Walking back from the node that ends last
on the measured rank (the longest span, or the latest end) along those reasons gives the chain that sets
the figure; only a change on it can shorten it. Where the chain passes from a node to the one before it on
the same rank, and that one is not an input of it, running the two the other way round may let the later
one start earlier. Each such swap is timed; the first that improves the objective (`portfolio.Score.key`)
without taking any rank above `cap` is kept and the walk starts again. A fixed number of timings bounds
the work, so the result depends on the order and the costs only.

Every order it returns has the same nodes, each after its inputs (a swap never puts a node before its own
input on its rank, and the timing checks the rest), so it lowers and validates like the input.
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.portfolio import Score, memory_units, score
from primuspp.errors import ValidationError
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import order_memory
from primuspp.schedule.timing import node_times

_F, _B, _W = NodeKind.F, NodeKind.B, NodeKind.W

#: timings one search may spend, whatever the size (a p=8, m=32 V order times in a few milliseconds)
MAX_EVALS = 400
#: and at most this many compute nodes times this budget (larger orders get fewer timings)
WORK = 600_000


def _is_input(y: Node, x: Node, placement: Placement) -> bool:
    """Whether `y` produces something `x` consumes (same rank: x's own F for B, own B for W, the V turn)."""
    if y.microbatch != x.microbatch:
        return False
    if x.kind is _B:
        return (y.kind is _F and y.stage == x.stage) or (
            y.kind is _B and y.stage == placement.next_stage[x.stage]
        )
    if x.kind is _W:
        return y.kind is _B and y.stage == x.stage
    return y.kind is _F and y.stage == placement.prev_stage[x.stage]


def _chain_swaps(
    placement: Placement, order: Sequence[Sequence[Node]], timing, costs: StageCosts, objective: str
) -> list[tuple[int, int]]:
    """(rank, i): swap order[rank][i-1] and order[rank][i], for the rank-bound steps of the critical
    chain, latest first."""
    comm, srank, n_stages = costs.comm, placement.stage_rank, placement.num_stages
    starts, ends = timing.starts, timing.ends
    f_end, g_end = timing.forward_end, timing.grad_end
    scale = max(max(costs.forward), max(costs.backward), max(costs.wgrad), comm, 1e-300)
    eps = 1e-9 * scale
    # the measured rank: the longest span (objective "span") or the latest end
    best_r, best_v = 0, float("-inf")
    for r, seq in enumerate(order):
        if not seq:
            continue
        v = ends[r][-1] - (starts[r][0] if objective == "span" else 0.0)
        if v > best_v:
            best_r, best_v = r, v
    # where each (kind, microbatch, stage) sits, to jump to a producer on another rank
    pos: dict[tuple[NodeKind, int, int], tuple[int, int]] = {}
    for r, seq in enumerate(order):
        for i, n in enumerate(seq):
            pos[(n.kind, n.microbatch, n.stage)] = (r, i)
    swaps: list[tuple[int, int]] = []
    r, i = best_r, len(order[best_r]) - 1
    seen = 0
    limit = sum(len(s) for s in order)
    while i >= 0 and seen <= limit:
        seen += 1
        x = order[r][i]
        st = starts[r][i]
        if i > 0 and abs(st - ends[r][i - 1]) <= eps:
            y = order[r][i - 1]
            if not _is_input(y, x, placement) and (y.kind, y.stage) != (x.kind, x.stage):
                swaps.append((r, i))
            i -= 1
            continue
        # data-bound: the input that arrived at `st`
        s, key = x.stage, x.microbatch * n_stages + x.stage
        nxt_pos = None
        cands = []
        if x.kind is _F:
            q = placement.prev_stage[s]
            if q >= 0:
                cands.append((_F, q, f_end[key - s + q] + (comm if srank[q] != r else 0.0)))
        elif x.kind is _B:
            cands.append((_F, s, f_end[key]))
            q = placement.next_stage[s]
            if q >= 0:
                cands.append((_B, q, g_end[key - s + q] + (comm if srank[q] != r else 0.0)))
        else:
            cands.append((_B, s, g_end[key]))
        for kind, stage, t in cands:
            if t is not None and abs(t - st) <= eps:
                nxt_pos = pos[(kind, x.microbatch, stage)]
                break
        if nxt_pos is None:
            break
        r, i = nxt_pos
    return swaps


def improve(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
    start: Score | None = None,
) -> tuple[ComputeOrder, Score] | None:
    """A better order by critical-chain swaps (see the module docstring), or None if none was found."""
    if not {n.kind for seq in order for n in seq} <= {_F, _B, _W}:
        return None
    n_nodes = sum(len(s) for s in order)
    budget = min(MAX_EVALS, WORK // max(n_nodes, 1))
    units = memory_units(placement, costs.activation)
    fractions = costs.fractions()
    current = [list(seq) for seq in order]
    cur = start or score(placement, m, current, costs, fractions)
    limit = cap if cap is not None else cur.peak
    improved = False
    tried: set[tuple[int, int, Node]] = set()
    while budget > 0:
        timing = node_times(placement, m, current, costs)
        moved = False
        for r, i in _chain_swaps(placement, current, timing, costs, objective):
            if budget <= 0:
                break
            seq = current[r]
            sig = (r, i, seq[i])
            if sig in tried:
                continue
            tried.add(sig)
            new_seq = [*seq[: i - 1], seq[i], seq[i - 1], *seq[i + 1 :]]
            grows = seq[i].kind is _F or (seq[i].kind is _B and fractions[seq[i].stage] < 0)
            if grows and order_memory(new_seq, units, fractions, keep_curve=False)[1] > limit + 1e-9:
                continue
            budget -= 1
            trial = [*current[:r], new_seq, *current[r + 1 :]]
            try:
                sc = score(placement, m, trial, costs, fractions)
            except ValidationError:  # cannot happen for a swap of a non-input; be safe
                continue
            if sc.key(objective) < cur.key(objective):
                current, cur, improved, moved = trial, sc, True, True
                tried.clear()
                break
        if not moved:
            break
    return (current, cur) if improved else None
