"""A timed construction of linear zero-bubble orders: every decision on the clock of the cost model.

Nodes are placed one by one, each at the time its rank is free and its input has arrived (the producer's
end, plus `comm` across ranks: the clock's rule, `timing.input_delays`; the construction decides as it
goes, so it keeps its own loop), in rounds of one microbatch:

- round 0: every rank runs the first forward; then, from the last rank back, each rank counts how many
  more forwards fit (within memory) before the first backward reaches it, i.e. before the backward chain
  that started on the last rank arrives (or, in the `fill-late` variant, which still end before it); the
  counts are made non-increasing along the pipeline where they would exceed the previous rank's, then the
  forwards and the first backward of every rank are placed;
- each later round: every rank that still has forwards runs one (in the `b-first` variant a rank that is
  two or more forwards ahead of the next one skips it when it would delay the backward coming back, unless
  the delay is within the idle time it may still take), W's going into the wait for the forward's input
  while they fit, a W also into a shorter wait when the rank may idle no more (`strict`: always), and W's
  first where memory needs them; then one backward per rank from the last rank back, with the same W
  filling;
- the remaining W's close each rank.

A rank may idle as long as the rank that idled most so far. The eight variants (three switches) are
returned; the one with the shortest longest span on the construction's own clock is the floor.

A variant is built as one int per node ((microbatch * p + stage) * 3 + kind, greedy's; rank r runs stage
r) and returned as an `ArrayOrder`; tests hold it equal to the same order as Node lists
(`tests/oracles/constructions.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.search.floor import with_floor
from primuspp.algorithms.search.greedy import decision_order
from primuspp.algorithms.search.score_memo import BlockMemo
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.placement import linear
from primuspp.schedule.semantics import kind_durations
from primuspp.schedule.timing import input_delays

Generator = Callable[[GenerationRequest], ComputeOrder]
_F, _B, _W = 0, 1, 2
_KINDS = (NodeKind.F, NodeKind.B, NodeKind.W)


class _Stuck(Exception):
    """A node's input was not placed, or memory has no room and no W is pending: no order."""


class _Build:
    def __init__(self, p: int, m: int, costs: StageCosts, max_mem: int) -> None:
        self.p, self.m, self.max_mem = p, m, max_mem
        self.hops = input_delays(linear(p), costs.comm)  # the clock's input rule: F's, B's
        self.dur = tuple(kind_durations(costs)[k] for k in _KINDS)  # the semantics table's durations
        self.count = [[0] * p for _ in range(3)]
        self.end = [[[-1.0] * m for _ in range(p)] for _ in range(3)]
        self.clock = [0.0] * p
        self.idle = [0.0] * p
        self.mem = [0] * p
        self.first = [0.0] * p
        self.order: list[list[int]] = [[] for _ in range(p)]  # per rank: (mb * p + r) * 3 + kind

    def arrival(self, kind: int, r: int, mb: int) -> float:
        """When the input of node (kind, r, mb) from the neighbouring rank is on rank r (0 without one)."""
        src = r - 1 if kind == _F else r + 1 if kind == _B else -1
        if not 0 <= src < self.p or kind == _W:
            return 0.0
        end = self.end[kind][src][mb]
        if end < 0:
            raise _Stuck
        return end + self.hops[kind][r]

    def put(self, r: int, kind: int) -> None:
        mb = self.count[kind][r]
        if mb >= self.m or (kind == _W and mb >= self.count[_B][r]):
            raise _Stuck
        if kind == _B and self.end[_F][r][mb] < 0:  # its own forward not run yet
            raise _Stuck
        start = max(self.clock[r], self.arrival(kind, r, mb))
        if self.count[_F][r] > 0:
            self.idle[r] += start - self.clock[r]
        else:
            self.first[r] = start
        self.clock[r] = self.end[kind][r][mb] = start + self.dur[kind][r]
        self.count[kind][r] += 1
        self.mem[r] += 1 if kind == _F else -1 if kind == _W else 0
        self.order[r].append((mb * self.p + r) * 3 + kind)

    def pending(self, r: int) -> bool:
        return self.count[_W][r] < self.count[_B][r]

    def may_idle(self, r: int) -> float:
        return max(self.idle) - self.idle[r]

    def before(self, r: int, kind: int, strict: bool) -> None:
        """W's on rank r before its next `kind`: for memory, into the wait for the input while they fit,
        and one into a shorter wait (when the rank may idle no more than that wait, or `strict`)."""
        while kind == _F and self.mem[r] + 1 > self.max_mem:
            if not self.pending(r):
                raise _Stuck
            self.put(r, _W)
        if (kind == _F and r == 0) or (kind == _B and r == self.p - 1):
            return
        due = self.arrival(kind, r, self.count[kind][r])
        while self.pending(r) and self.clock[r] + self.dur[_W][r] <= due:
            self.put(r, _W)
        if self.pending(r) and self.clock[r] < due and (strict or due - self.clock[r] > self.may_idle(r)):
            self.put(r, _W)

    def first_round(self, fill_late: bool) -> None:
        p, f = self.p, self.dur[_F]
        for r in range(p):
            self.put(r, _F)
        extra = [0] * p
        back = self.end[_F][p - 1][0] + self.dur[_B][p - 1]  # the first B's end on the last rank
        for r in range(p - 2, -1, -1):
            mem, clock = self.mem[r], self.clock[r]
            while self.count[_F][r] + extra[r] < self.m and mem + 1 <= self.max_mem:
                due = back + self.hops[_B][r]  # the first B's grad on rank r
                if (clock + f[r] > due) if fill_late else (clock >= due):
                    break
                mem, clock, extra[r] = mem + 1, clock + f[r], extra[r] + 1
            back = max(clock, back + self.hops[_B][r]) + self.dur[_B][r]
        for r in range(1, p):
            while extra[r] > 0 and extra[r] >= extra[r - 1] and self.count[_F][r] + extra[r] < self.m:
                extra[r] -= 1
        for r in range(p):
            for _ in range(extra[r]):
                self.put(r, _F)
        for r in range(p - 1, -1, -1):
            self.put(r, _B)

    def wants_f(self, r: int, b_first: bool) -> bool:
        if self.count[_F][r] >= self.m:
            return False
        if not b_first or r + 1 >= self.p or self.count[_F][r] < self.count[_F][r + 1] + 2:
            return True
        nxt = r + 1
        # the B from r + 1, soonest
        back = self.clock[nxt] + self.dur[_F][nxt] + self.dur[_B][nxt] + self.hops[_B][r]
        if self.clock[r] >= back:
            return False
        need, w = self.mem[r] + 1, 0.0
        k = self.count[_W][r]
        while need > self.max_mem and k < self.count[_B][r]:
            w, need, k = w + self.dur[_W][r], need - 1, k + 1
        if self.clock[r] + self.dur[_F][r] + w <= back:
            return True
        return back - self.clock[r] > self.may_idle(r)

    def later_round(self, b_first: bool, strict: bool) -> None:
        p = self.p
        take = [self.wants_f(r, b_first) for r in range(p)]
        for r in range(p - 2, -1, -1):
            take[r] = take[r] and take[r + 1]
        for r in range(p):
            if take[r]:
                self.before(r, _F, strict)
                self.put(r, _F)
        for r in range(p - 1, -1, -1):
            self.before(r, _B, strict)
            if r == 0 and self.count[_F][0] == self.m:
                while self.pending(0):
                    self.put(0, _W)
            self.put(r, _B)

    def span(self) -> float:
        return max(self.clock[r] - self.first[r] for r in range(self.p))


def _columns(decisions: list[list[int]]) -> ArrayOrder:
    """Per-rank decisions ((mb * p + r) * 3 + kind, rank r on stage r) as an ArrayOrder."""
    import numpy as np

    lengths = [len(seq) for seq in decisions]
    flat = np.fromiter(chain.from_iterable(decisions), dtype=np.int64, count=sum(lengths))
    return decision_order(flat, lengths, len(lengths))


def _decisions(
    p: int, m: int, costs: StageCosts, max_mem: int, fill_late: bool, b_first: bool, strict: bool
) -> tuple[list[list[int]], float] | None:
    """One variant's per-rank decisions ((mb * p + r) * 3 + kind) and its span; None if it gets stuck."""
    state = _Build(p, m, costs, max_mem)
    try:
        state.first_round(fill_late)
        for _ in range(1, m):
            state.later_round(b_first, strict)
        for r in range(p):
            while state.pending(r):
                state.put(r, _W)
    except _Stuck:
        return None
    return state.order, state.span()


#: within one floored generator's call: (p, m, costs, cap) -> the variants' names and decisions, the floor;
#: zero-bubble-heuristic floors its result with them and runs zero-bubble, which floors its own with the same
_VARIANTS = BlockMemo("zb_timed_shared")


def orders(p: int, m: int, costs: StageCosts, cap: float) -> tuple[list[tuple[str, ComputeOrder]], int]:
    """The timed linear orders within `cap` microbatches per rank, named `timed/...`, and the index of the
    floor (the least span on the construction's clock; -1 when every variant got stuck). Each call returns
    new ArrayOrders (the floor tells orders apart by identity)."""
    named, floor = _VARIANTS.once((p, m, costs, cap), lambda: _variants(p, m, costs, cap))
    return [(name, _columns(raw)) for name, raw in named], floor


def _variants(p: int, m: int, costs: StageCosts, cap: float) -> tuple[list[tuple[str, list[list[int]]]], int]:
    """`orders` as each variant's name and per-rank decisions."""
    max_mem = int(cap + 1e-9)
    out: list[tuple[str, list[list[int]]]] = []
    raw: list[list[list[int]]] = []  # each kept variant's decisions: equal decisions, equal orders
    floor, least = -1, float("inf")
    for fill_late in (True, False):
        for b_first in (True, False):
            for strict in (True, False):
                found = _decisions(p, m, costs, max_mem, fill_late, b_first, strict)
                if found is None:
                    continue
                same = next((i for i, o in enumerate(raw) if o == found[0]), None)
                if found[1] < least:
                    floor, least = len(out) if same is None else same, found[1]
                if same is not None:  # equal variants are timed once
                    continue
                tags = [t for t, on in (("late", fill_late), ("bfirst", b_first), ("strict", strict)) if on]
                raw.append(found[0])
                out.append(("timed/" + "-".join(tags or ["plain"]), found[0]))
    return out, floor


def floored(
    inner: Generator, budget: Callable[[int, dict], float], objective: str = "span", **extra
) -> Generator:
    """A linear zero-bubble generator with the timed orders' floor (`floor.with_floor`) at `budget`;
    `extra`: with_floor's `planning` and `guards`. The variants are built once per call (a floored generator
    that runs another shares them with it)."""
    floored_inner = with_floor(inner, linear, orders, budget, objective, **extra)

    def generate(req: GenerationRequest) -> ComputeOrder:
        with _VARIANTS.block():
            return floored_inner(req)

    return generate
