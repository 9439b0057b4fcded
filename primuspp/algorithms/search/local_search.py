"""Critical-path local search: swap two neighbouring nodes of a rank where the rank, not the data, holds
the later one back, and keep the swap when the order gets better.

The simulator's timing (`schedule.timing.node_times`) says for every node why it starts when it does: its
rank was busy with the node before it, or an input arrived then. Walking back from the node that ends last
on the measured rank (the longest span, or the latest end) along those reasons gives the chain that sets
the figure; only a change on it can shorten it. Where the chain passes from a node to the one before it on
the same rank, and that one is not an input of it, running the two the other way round may let the later
one start earlier. Each such swap is timed; the first that improves the objective (`portfolio.Score.key`)
without taking any rank above `cap` is kept and the walk starts again. A fixed number of timings bounds
the work, so the result depends on the order and the costs only. A swap that brings an F forward past
the cap is repaired by the W pass (`w_pass.replace_w` with `keep`): W's pending on that rank move earlier
where memory needs them.

Every order it returns has the same nodes, each after its inputs (a swap never puts a node before its own
input on its rank, and the timing checks the rest), so it lowers and validates like the input.
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search import score_memo, w_pass
from primuspp.algorithms.search.bounds import Proof
from primuspp.algorithms.search.portfolio import Score, lower_bounds, memory_units
from primuspp.algorithms.search.retime import retime
from primuspp.errors import ValidationError
from primuspp.schedule.array_order import rank_lengths
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import order_memory
from primuspp.schedule.timing import Timing, input_delays, node_times

_F, _B, _W = NodeKind.F, NodeKind.B, NodeKind.W

#: timings one search may spend, whatever the size (a p=8, m=32 V order times in a few milliseconds)
MAX_EVALS = 400
#: and at most this many compute nodes times this budget (larger orders get fewer timings)
WORK = 60_000


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
) -> list[tuple[int, int, int]]:
    """(rank, i, j): move order[rank][i] to position j < i, for the rank-bound steps of the critical chain,
    latest first: just before its predecessor (a swap), and as early as its inputs and its stage allow."""
    comm, n_stages = costs.comm, placement.num_stages
    hops = input_delays(placement, comm)
    f_hop, g_hop = hops
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
    swaps: list[tuple[int, int, int]] = []
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
                swaps.append((r, i, i - 1))
                # and further: right after the later of its own-stage predecessor of the same kind and the
                # last node ending by the time its inputs are there
                t = w_pass.ready(x, placement, f_end, g_end, hops)
                j = i - 1
                while j > 0:
                    z = order[r][j - 1]
                    if (
                        ends[r][j - 1] <= t + eps
                        or (z.kind, z.stage) == (x.kind, x.stage)
                        or _is_input(z, x, placement)
                    ):
                        break
                    j -= 1
                if j < i - 1:
                    swaps.append((r, i, j))
            i -= 1
            continue
        # data-bound: the input that arrived at `st`
        s, key = x.stage, x.microbatch * n_stages + x.stage
        nxt_pos = None
        cands = []
        if x.kind is _F:
            q = placement.prev_stage[s]
            if q >= 0:
                cands.append((_F, q, f_end[key - s + q] + f_hop[s]))
        elif x.kind is _B:
            cands.append((_F, s, f_end[key]))
            q = placement.next_stage[s]
            if q >= 0:
                cands.append((_B, q, g_end[key - s + q] + g_hop[s]))
        else:
            cands.append((_B, s, g_end[key]))
        for kind, stage, t in cands:
            if t is not None and abs(t - st) <= eps:
                nxt_pos = pos[(kind, x.microbatch, stage)]
                break
        if nxt_pos is None:
            break
        r, i = nxt_pos
    return swaps + _warmup_moves(placement, order)


def _warmup_moves(placement: Placement, order: Sequence[Sequence[Node]]) -> list[tuple[int, int, int]]:
    """(rank, i, j) per rank: one more forward of its first stage before anything else runs there (a deeper
    warm-up absorbs transfer latency), when the memory cap (checked by the caller) allows it."""
    moves = []
    for r, seq in enumerate(order):
        if not seq:
            continue
        s0 = seq[0].stage
        j = 0
        while j < len(seq) and seq[j].kind is _F and seq[j].stage == s0:
            j += 1
        for i in range(j + 1, len(seq)):
            if seq[i].kind is _F and seq[i].stage == s0:
                moves.append((r, i, j))
                break
    return moves


def improve(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    cap: float | None,
    objective: str = "span",
    start: Score | None = None,
) -> tuple[ComputeOrder, Score] | None:
    """A better order by critical-chain swaps (see the module docstring), or None if none was found.

    Two rounds: the objective's key first (`Score.key`), then the other figure (step time after the span,
    the span after the step time) while the first does not grow, so the result is as good as the first
    round's in its objective and no worse in the other."""
    if not w_pass.only_fbw(order):
        return None
    cur = start or score_memo.score(placement, m, order, costs)
    span_lb, step_lb = lower_bounds(placement, order, costs)
    if cur.max_span <= span_lb + 1e-9 * max(1.0, span_lb) and cur.makespan <= step_lb + 1e-9 * max(
        1.0, step_lb
    ):
        return None  # both figures at their lower bounds (zbv at F = B = W): no swap can shorten either
    other = "step" if objective == "span" else "span"

    def first(new: Score, old: Score) -> bool:
        return new.key(objective) < old.key(objective)

    def second(new: Score, old: Score) -> bool:
        a, b = (new.max_span, new.makespan) if objective == "span" else (new.makespan, new.max_span)
        a0, b0 = (old.max_span, old.makespan) if objective == "span" else (old.makespan, old.max_span)
        return a <= a0 and (b < b0 or (b == b0 and new.peak < old.peak))

    return _rounds(placement, m, order, costs, cap, cur, ((first, objective), (second, other)))


def improve_both(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    cap: float | None,
    start: Score | None = None,
) -> tuple[ComputeOrder, Score] | None:
    """Like `improve`, but a swap is kept only when neither the longest span nor the step time grows and
    one of them shrinks: the result dominates `order` (None if no such swap was found). Walks the span's
    critical chain, then the step time's."""
    if not w_pass.only_fbw(order):
        return None

    def dominates(new: Score, old: Score) -> bool:
        if new.max_span > old.max_span or new.makespan > old.makespan:
            return False
        return new.max_span < old.max_span or new.makespan < old.makespan or new.peak < old.peak

    cur = start or score_memo.score(placement, m, order, costs)
    return _rounds(placement, m, order, costs, cap, cur, ((dominates, "span"), (dominates, "step")))


def _rounds(placement, m, order, costs, cap, cur, rounds) -> tuple[ComputeOrder, Score] | None:
    """`_search` for each (better, chain) of `rounds` in turn, from the last round's result, sharing one
    budget of timings. Every `better` asks for a smaller key (`Score.key`, either objective), so an order
    `bounds.Proof` shows unbeatable within the cap ends the search."""
    budget = min(MAX_EVALS, WORK // max(sum(rank_lengths(order)), 1))
    proof = Proof(placement, m, costs, cap if cap is not None else cur.peak)
    result = None
    current = [list(seq) for seq in order]
    for better, chain in rounds:
        found, budget = _search(placement, m, current, costs, cap, cur, better, chain, budget, proof)
        if found is not None:
            current, cur = found
            result = found
    return result


def _search(placement, m, current, costs, cap, cur, better, chain, budget, proof):
    """First-improvement swaps on `chain`'s critical chain while `better(new, current)` and budget last."""
    units = memory_units(placement, costs.activation)
    fractions = costs.fractions()
    limit = cap if cap is not None else cur.peak
    improved = False
    tried: set[tuple[int, int, Node]] = set()
    # each rank's peak in `current`: a swap changes one rank, whose peak alone is recounted
    peaks = [order_memory(seq, units, fractions, keep_curve=False)[1] for seq in current]
    timing = None  # of `current`; a kept swap hands over its own
    while budget > 0:
        if timing is None:
            timing = node_times(placement, m, current, costs)
        moved = False
        for r, i, j in _chain_swaps(placement, current, timing, costs, chain):
            if budget <= 0:
                break
            seq = current[r]
            sig = (r, j, seq[i])
            if sig in tried:
                continue
            tried.add(sig)
            new_seq = [*seq[:j], seq[i], *seq[j:i], *seq[i + 1 :]]
            trial = [*current[:r], new_seq, *current[r + 1 :]]
            rank_peak = order_memory(new_seq, units, fractions, keep_curve=False)[1]
            repaired = rank_peak > limit + 1e-9
            if repaired:
                # over the cap: run pending W's earlier where memory needs them (and into waits they fit)
                placed = w_pass.replace_w_peaks(placement, m, trial, costs, "fit", True, [limit] * len(trial))
                if placed is None:
                    continue
                trial, trial_peaks = placed
            else:
                trial_peaks = [*peaks[:r], rank_peak, *peaks[r + 1 :]]
            budget -= 1
            try:
                if repaired:  # every rank may have changed: a full timing
                    trial_timing = None
                    sc = score_memo.peaked(placement, m, trial, costs, max(trial_peaks, default=0.0))
                else:  # one rank changed from position j: only what it can move is timed again
                    trial_timing = retime(placement, trial, costs, timing, r, j)
                    sc = _score(trial_timing, max(trial_peaks, default=0.0))
            except ValidationError:  # cannot happen for a swap of a non-input; be safe
                continue
            if better(sc, cur):
                current, cur, improved, moved, peaks = trial, sc, True, True, trial_peaks
                timing = trial_timing
                tried.clear()
                if proof.unbeatable(current, cur):  # nothing within the cap has a smaller key
                    return (current, cur), 0
                break
        if not moved:
            break
    return ((current, cur) if improved else None), budget


def _score(timing: Timing, peak: float) -> Score:
    """`portfolio.timed_score` from a timing at hand (an order of compute nodes only: F, B, W)."""
    first, last = float("inf"), float("-inf")
    max_span = 0.0
    for st, en in zip(timing.starts, timing.ends, strict=True):
        if st:
            lo, hi = st[0], en[-1]
            first, last = min(first, lo), max(last, hi)
            max_span = max(max_span, hi - lo)
    return Score(last - first if last > first else 0.0, max_span, peak)
