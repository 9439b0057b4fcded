"""Lower bounds that prove a candidate order unbeatable, so a search can stop before trying more.

A cost-aware search (`cost_aware`, `refine`, `floor`) keeps the candidate with the smallest key
(`portfolio.Score.key`: longest rank span, step time, peak, in the objective's order) among orders of the
same nodes within a memory cap. When a candidate sits at a lower bound of the first two figures that no
order within the cap can go below, and no order with a lower peak can reach those figures, nothing the
search could still build wins, and the search may stop: the result is the one the full search picks.

The bounds, per rank r (one microbatch's nodes: F, then B, then W, on the stages of its route):

- busy: the rank's compute time (every order runs the same nodes);
- start: the rank starts no earlier than the first forward's activation can reach it (`earliest`);
- head: before its first B the rank can run only F's (a W needs its own B, on the same rank). That B
  waits for its microbatch's forwards from where its route enters the rank to the route's end and the
  B's back (`path`, comm per rank crossed). Each F before it keeps its activation (B frees the first part),
  so a peak of P lets at most P / unit of them run: the rest of `path` is idle.

span >= busy + head idle, step >= start + busy + head idle. With the cap's F count the bounds hold for every
candidate within the cap; with one F fewer, for every candidate of a lower peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from primuspp.algorithms.search.portfolio import Score, memory_units
from primuspp.schedule.array_order import KINDS, ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.placement import Placement

#: relative tolerance of "at the bound" (the timing sums durations in another order than the bounds)
TOL = 1e-9


@dataclass(frozen=True)
class RankBounds:
    """Per-rank figures of the head bound (see the module docstring); ranks without nodes hold zeros."""

    busy: tuple[float, ...]
    earliest: tuple[float, ...]
    path: tuple[float, ...]  # from the rank's first F to its first B, at least (inf: no B on the rank)
    longest_f: tuple[float, ...]
    unit: tuple[float, ...]  # smallest activation one F on the rank keeps (0: memory does not limit)
    forwards: tuple[int, ...]
    #: figures already worked out, by (peak, below): a search and its floor ask for the same ones
    _figures: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def figures(self, peak: float, below: bool = False) -> tuple[float, float]:
        """(longest span, step time) no order whose peak is at most `peak` (`below`: under `peak`) goes
        below."""
        got = self._figures.get((peak, below))
        if got is None:
            got = self._figures[peak, below] = self._work_out(peak, below)
        return got

    def _work_out(self, peak: float, below: bool) -> tuple[float, float]:
        span = step = 0.0
        for r, busy in enumerate(self.busy):
            if busy <= 0.0:
                continue
            f, u = self.forwards[r], self.unit[r]
            if u > 0.0 and math.isfinite(peak):
                most = math.ceil(peak / u - 1e-9) - 1 if below else math.floor(peak / u + 1e-9)
                f = min(f, max(0, most))
            idle = max(0.0, self.path[r] - f * self.longest_f[r]) if math.isfinite(self.path[r]) else 0.0
            span = max(span, busy + idle)
            step = max(step, self.earliest[r] + busy + idle)
        return span, step


#: rank_bounds' results lately asked for (a build asks again: the generator's search, then its floor)
_KEPT: dict[tuple, RankBounds] = {}
KEEP = 16


def forget() -> None:
    """Drop the kept bounds (`score_memo.forget`, which benchmarks call before each timed run)."""
    _KEPT.clear()


def rank_bounds(placement: Placement, m: int, costs: StageCosts) -> RankBounds:
    """The head-bound figures of every order of `m` microbatches' F, B and W nodes on `placement`
    (`rank_bounds_uncached`'s, kept for the next call with the same arguments)."""
    key = (placement, m, costs)
    found = _KEPT.get(key)
    if found is None:
        if len(_KEPT) >= KEEP:
            _KEPT.pop(next(iter(_KEPT)))
        found = _KEPT[key] = rank_bounds_uncached(placement, m, costs)
    return found


def kept(placement: Placement, m: int, costs: StageCosts) -> bool:
    """Whether `rank_bounds` of these arguments is at hand (kept from an earlier call): asking a `Proof`
    costs only its comparisons then."""
    return (placement, m, costs) in _KEPT


def rank_bounds_uncached(placement: Placement, m: int, costs: StageCosts) -> RankBounds:
    """`rank_bounds` computed anew."""
    p, routes = placement.pp, placement.routes
    srank, fwd, bwd, wgr, comm = placement.stage_rank, costs.forward, costs.backward, costs.wgrad, costs.comm
    units = memory_units(placement, costs.activation)
    count = [m // len(routes) + (1 if i < m % len(routes) else 0) for i in range(len(routes))]
    busy, forwards = [0.0] * p, [0] * p
    earliest, path = [math.inf] * p, [math.inf] * p
    longest_f, unit = [0.0] * p, [math.inf] * p
    for i, route in enumerate(routes):
        if count[i] == 0:
            continue
        t = 0.0
        for k, s in enumerate(route):
            r = srank[s]
            if k and srank[route[k - 1]] != r:
                t += comm
            earliest[r] = min(earliest[r], t)
            t += fwd[s]
            busy[r] += count[i] * (fwd[s] + bwd[s] + wgr[s])
            forwards[r] += count[i]
            longest_f[r] = max(longest_f[r], fwd[s])
            unit[r] = min(unit[r], units[s])
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for k, s in enumerate(route):
            first.setdefault(srank[s], k)
            last[srank[s]] = k
        # the route's forward and backward times and its rank crossings (step j to j + 1), as lists: each
        # sum below adds a slice of them left to right, as a sum over the stages does
        f_route, b_route = [fwd[q] for q in route], [bwd[q] for q in route]
        crosses = [srank[a] != srank[b] for a, b in pairwise(route)]
        for r, k in first.items():
            # the first B of this route on r is at its deepest stage there, after every forward from the
            # route's first stage on r to its end and the B's back
            d = last[r]
            t = sum(f_route[k:]) + sum(b_route[d + 1 :])
            hops = sum(crosses[k:]) + sum(crosses[d:])
            path[r] = min(path[r], t + hops * comm)
    return RankBounds(
        tuple(busy),
        tuple(0.0 if math.isinf(e) else e for e in earliest),
        tuple(path),
        tuple(longest_f),
        tuple(0.0 if math.isinf(u) else u for u in unit),
        tuple(forwards),
    )


def unbeatable(bounds: RankBounds, sc: Score, cap: float) -> bool:
    """Whether no order of the same F/B/W nodes with peak <= `cap` has a smaller key than `sc` (whichever
    the objective):
    both figures at the cap's bounds, and a lower peak cannot reach them (see the module docstring)."""
    span, step = bounds.figures(cap + 1e-9)
    if not (_at(sc.max_span, span) and _at(sc.makespan, step)):
        return False
    if sc.peak <= 0.0:
        return True
    span, step = bounds.figures(sc.peak, below=True)
    return span > sc.max_span + _tol(sc.max_span) or step > sc.makespan + _tol(sc.makespan)


def _tol(x: float) -> float:
    return TOL * max(1.0, abs(x))


def _at(value: float, bound: float) -> bool:
    return value <= bound + _tol(bound)


def all_simple(order: Sequence[Sequence]) -> bool:
    """Whether the order holds only F, B, W and BW nodes (the bounds hold for orders of those)."""
    f, b, w, bw = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW
    if isinstance(order, ArrayOrder):  # from the kind column, without building a Node
        return kinds_within(order, (f, b, w, bw))
    return all(n.kind is f or n.kind is b or n.kind is w or n.kind is bw for seq in order for n in seq)


def kinds_within(order: ArrayOrder, kinds: Sequence[NodeKind]) -> bool:
    """Whether every node of the ArrayOrder is of one of `kinds` (the kinds its node-kind column holds,
    counted once per order: `array_order.kinds_present`)."""
    from primuspp.schedule.array_order import kinds_present

    return all(KINDS[code] in kinds for code in kinds_present(order.rows, "node_kind"))


class Proof:
    """`unbeatable` for the candidates of one search (`cap` None: no cap), the bounds computed once and
    only when a candidate is asked about."""

    def __init__(self, placement: Placement, m: int, costs: StageCosts, cap: float | None):
        self.placement, self.m, self.costs = placement, m, costs
        self.cap = math.inf if cap is None else cap
        self._bounds: RankBounds | None = None

    def unbeatable(self, order: Sequence[Sequence], sc: Score) -> bool:
        """Whether no order of the search's nodes within its cap has a smaller key than `order`'s `sc`."""
        if sc.peak > self.cap + 1e-9:
            return False
        if self._bounds is None:
            self._bounds = rank_bounds(self.placement, self.m, self.costs)
        return unbeatable(self._bounds, sc, self.cap) and all_simple(order)  # the order's kinds last: slow

    def scored(self, candidates: list, name: str, order: Sequence[Sequence], sc: Score) -> bool:
        """Append (name, order, sc) to a search's `candidates`; whether it is the result already (the first
        candidate proven unbeatable is also the one the full search would pick: nothing after it can win)."""
        candidates.append((name, order, sc))
        return self.unbeatable(order, sc)
