"""A timed V construction for zbv: each decision is made on the clock of the cost model, comm included.

The block-based V orders (`vshape`) repeat a pattern built for F = B = W and no latency; under unequal costs
and a p2p latency their rhythm leaves gaps the W post-pass cannot always close. This construction places
nodes one by one, each at the time its rank is free and its input has arrived (producer's end + `comm`
across ranks), and decides by those times:

- warm-up: rank r starts its chunk-1 forwards when the chunk-1 activation from rank r + 1 arrives; until
  then it (and every rank before it, to keep the chunk-0 pipeline fed) runs further chunk-0 forwards, as
  many as end before that arrival and as memory leaves room for (rank r reserves 2r + 2 chunks for later);
  then the ranks are balanced so that each has started as many forwards as the one before it;
- steady state: rounds of one B per rank (the chunk whose gradient is ready, the earlier chunk of the
  backward pass first) and one F per rank, W's filling every wait for an input that they fit into, and a
  W is also put in a wait longer than this rank may idle: the largest idle time any rank has had so far
  (a rank that has idled more may idle less);
- the construction is repeated with each rank allowed the idle time the previous attempt gave it, as long
  as the largest one shrinks.

Four variants (whether a long wait before a B / before an F takes a W) are returned; built with the
per-stage costs and, when the stages differ, with their means too. The caller times them with the
simulator's model and keeps the best.

An attempt records one int per node ((mb * 2p + stage) * 3 + kind) and a variant is returned as an
`ArrayOrder`; tests hold it equal to the same order as Node lists
(`tests/oracles/constructions.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import chain

from primuspp.algorithms.base import ComputeOrder, GenerationRequest
from primuspp.algorithms.search.floor import with_floor
from primuspp.schedule.array_order import KINDS, ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.placement import v_shape
from primuspp.schedule.semantics import kind_durations

_F, _B, _W = 0, 1, 2
_KINDS = (NodeKind.F, NodeKind.B, NodeKind.W)
_CODES = tuple(KINDS.index(k) for k in _KINDS)  # ArrayOrder kind codes of _F, _B, _W
#: the idle-time rounds stop after this many attempts even if the largest idle time still shrinks
MAX_ROUNDS = 12


class _Stuck(Exception):
    """The construction reached a node whose input is not placed (or memory has no room): no order."""


class _Build:
    """One attempt: the per-rank clocks, counts, pending W's and memory (in chunks) of a V order."""

    def __init__(
        self,
        p: int,
        m: int,
        dur: Sequence[Sequence[float]],
        comm: float,
        max_chunks: int,
        allowed: Sequence[float] | None,
    ) -> None:
        self.p, self.m, self.dur, self.comm, self.max_chunks = p, m, dur, comm, max_chunks
        n = 2 * p
        self.count = [[0] * n for _ in range(3)]
        self.end: list[list[list[float]]] = [[[-1.0] * m for _ in range(n)] for _ in range(3)]
        self.clock = [0.0] * p
        self.idle = [0.0] * p
        self.chunks = [0] * p
        self.pending: list[deque[tuple[int, int]]] = [deque() for _ in range(p)]
        self.order: list[list[int]] = [[] for _ in range(p)]  # per rank: (mb * 2p + stage) * 3 + kind
        top = max(allowed) if allowed else 0.0
        self.extra = [top - a for a in allowed] if allowed else [0.0] * p

    # stages of rank r: chunk 0 is stage r (`low`), chunk 1 is stage 2p - 1 - r (`high`)
    def rank(self, s: int) -> int:
        return s if s < self.p else 2 * self.p - 1 - s

    def high(self, r: int) -> int:
        return 2 * self.p - 1 - r

    def source(self, kind: int, s: int) -> int | None:
        """The stage whose output this node waits for on the V route (None: only its own rank's work)."""
        if kind == _F:
            return s - 1 if s > 0 else None
        if kind == _B:
            return s + 1 if s < 2 * self.p - 1 else None
        return None

    def arrival(self, kind: int, s: int, mb: int) -> float | None:
        """When the input of node (kind, s, mb) is on its rank; 0 without one, None if not produced yet."""
        src = self.source(kind, s)
        if src is None:
            return 0.0
        end = self.end[kind][src][mb]
        if end < 0:
            return None
        return end + (self.comm if self.rank(src) != self.rank(s) else 0.0)

    def put(self, kind: int, s: int, mb: int | None = None) -> None:
        r = self.rank(s)
        if mb is None:
            mb = self.count[kind][s]
            if mb >= self.m:
                raise _Stuck
        ready = self.arrival(kind, s, mb)
        if ready is None:
            raise _Stuck
        if kind == _B and self.end[_F][s][mb] < 0:
            raise _Stuck
        if kind == _F:
            if self.chunks[r] + 1 > self.max_chunks:
                raise _Stuck
            self.chunks[r] += 1
        start = max(self.clock[r], ready)
        if self.count[_F][r] > 0:
            self.idle[r] += start - self.clock[r]
        self.clock[r] = self.end[kind][s][mb] = start + self.dur[kind][s]
        self.count[kind][s] += 1
        self.order[r].append((mb * 2 * self.p + s) * 3 + kind)
        if kind == _B:
            self.pending[r].append((s, mb))
        elif kind == _W:
            self.chunks[r] -= 1

    def put_w(self, r: int) -> None:
        if not self.pending[r]:
            raise _Stuck
        s, mb = self.pending[r].popleft()
        self.put(_W, s, mb)

    def may_idle(self, r: int) -> float:
        return max(max(self.idle), self.extra[r]) - self.idle[r]

    def fill(self, r: int, kind: int, s: int, long_wait: bool) -> None:
        """Before node (kind, s) on rank r: W's into the wait for its input while they fit, and one more if
        the wait is longer than rank r may idle and `long_wait` allows it."""
        if self.source(kind, s) is None:
            return
        mb = self.count[kind][s]
        ready = self.arrival(kind, s, mb) if mb < self.m else None
        if ready is None:
            return
        queue = self.pending[r]
        while queue and ready >= self.clock[r] + self.dur[_W][queue[0][0]]:
            self.put_w(r)
        if queue and long_wait and ready - self.clock[r] > self.may_idle(r):
            self.put_w(r)

    def warm_up(self) -> None:
        p = self.p
        for r in range(p):
            self.put(_F, r)
        for r in range(p - 1, -1, -1):
            if r < p - 1:
                due = self.arrival(_F, self.high(r), 0)
                assert due is not None  # rank r + 1 has put its first chunk-1 forward
                while (
                    self.chunks[r] + 2 * r + 2 <= self.max_chunks
                    and self.clock[r] + self.dur[_F][r] <= due
                    and self.count[_F][r] < self.m
                ):
                    for j in range(r + 1):
                        self.put(_F, j)
            self.put(_F, self.high(r))
        chunk = 0
        for r in range(1, p):
            idle_turns = 0
            while (
                self.started(r) < self.started(r - 1)
                or self.count[_F][self.high(r)] <= self.count[_F][self.high(r - 1)] < self.m
            ):
                placed = False
                for j in range(p - 1, r - 1, -1):
                    s = j if chunk == 0 else self.high(j)
                    if self.count[_F][s] < self.m:
                        self.put(_F, s)
                        placed = True
                chunk = 1 - chunk
                idle_turns = 0 if placed else idle_turns + 1
                if idle_turns == 2:
                    raise _Stuck

    def started(self, r: int) -> int:
        return self.count[_F][r] + self.count[_F][self.high(r)]

    def steady(self, fill_b: bool, fill_f: bool) -> None:
        p, m = self.p, self.m
        for _ in range(2 * m):
            low_ranks, high_ranks = [], []
            for r in range(p):
                lo, hi = r, self.high(r)
                if self.count[_B][lo] >= self.count[_B][hi]:
                    high_ranks.append(r)
                elif r == p - 1 or self.count[_B][hi] >= m or self.end[_B][r + 1][self.count[_B][lo]] >= 0:
                    low_ranks.append(r)
                else:
                    high_ranks.append(r)
            for r, s in [(r, r) for r in reversed(low_ranks)] + [(r, self.high(r)) for r in high_ranks]:
                self.fill(r, _B, s, long_wait=fill_b or s < p)
                self.put(_B, s)
            for r in range(p):
                lo, hi = r, self.high(r)
                if self.count[_F][hi] >= m:
                    continue
                if self.count[_F][hi] >= self.count[_F][lo]:
                    s = lo
                elif r == p - 1 or self.end[_F][self.high(r + 1)][self.count[_F][hi]] >= 0:
                    s = hi
                elif self.count[_F][lo] < m and (r == 0 or self.end[_F][r - 1][self.count[_F][lo]] >= 0):
                    s = lo
                else:
                    continue
                while self.chunks[r] + 1 > self.max_chunks:
                    self.put_w(r)
                self.fill(r, _F, s, long_wait=fill_f)
                self.put(_F, s)
        for r in range(p):
            while self.pending[r]:
                self.put_w(r)


def build(
    p: int, m: int, dur: Sequence[Sequence[float]], comm: float, max_chunks: int, fill_b: bool, fill_f: bool
) -> tuple[ComputeOrder, float] | None:
    """The construction with the idle-time rounds: the order (an ArrayOrder) and its largest idle time on
    the construction's clock; None when it gets stuck (too little memory)."""
    found = _decisions(p, m, dur, comm, max_chunks, fill_b, fill_f)
    return None if found is None else (_columns(p, found[0]), found[1])


def _columns(p: int, decisions: list[list[int]]) -> ArrayOrder:
    """Per-rank decisions ((mb * 2p + stage) * 3 + kind) as an ArrayOrder."""
    import numpy as np

    lengths = [len(seq) for seq in decisions]
    flat = np.fromiter(chain.from_iterable(decisions), dtype=np.int64, count=sum(lengths))
    key, kind = np.divmod(flat, 3)
    mb, stage = np.divmod(key, 2 * p)
    return ArrayOrder.from_flat(np.array(_CODES, dtype=np.int8)[kind], mb, stage, lengths)


def _decisions(
    p: int, m: int, dur: Sequence[Sequence[float]], comm: float, max_chunks: int, fill_b: bool, fill_f: bool
) -> tuple[list[list[int]], float] | None:
    """The idle-time rounds of one variant: the best attempt's per-rank decisions and largest idle time."""
    best: tuple[list[list[int]], float] | None = None
    allowed: list[float] | None = None
    for _ in range(MAX_ROUNDS):
        attempt = _Build(p, m, dur, comm, max_chunks, allowed)
        try:
            attempt.warm_up()
            attempt.steady(fill_b, fill_f)
        except _Stuck:
            break
        worst = max(attempt.idle)
        if best is not None and worst >= best[1]:
            break
        best = (attempt.order, worst)
        allowed = attempt.idle
    return best


def orders(p: int, m: int, costs: StageCosts, cap: float) -> tuple[list[tuple[str, ComputeOrder]], int]:
    """The timed V orders within `cap` microbatch units per rank (2 * cap chunks), named `timed/...`, and
    the index of the floor among them: the one with the least idle time by the construction's own clock,
    planned with each kind's mean cost (one F, B, W for every stage, as a profile of the whole model gives
    them); -1 when there is none."""
    max_chunks = int(2 * cap + 1e-9)
    if max_chunks < 2 * p:  # the warm-up reserves up to 2p chunks on rank p - 1
        return [], -1
    per_stage = [kind_durations(costs)[k] for k in _KINDS]  # the semantics table's durations
    means = [[sum(x) / len(x)] * len(x) for x in per_stage]
    versions = [("mean-", means)]
    if any(len(set(x)) > 1 for x in per_stage):
        versions.insert(0, ("", per_stage))
    else:
        versions = [("", per_stage)]
    out: list[tuple[str, ComputeOrder]] = []
    raw: list[list[list[int]]] = []  # each kept variant's decisions: equal decisions, equal orders
    floor, least = -1, float("inf")
    for tag, dur in versions:
        for fill_b in (True, False):
            for fill_f in (True, False):
                found = _decisions(p, m, dur, costs.comm, max_chunks, fill_b, fill_f)
                if found is None:
                    continue
                same = next((i for i, o in enumerate(raw) if o == found[0]), None)
                if dur is versions[-1][1] and found[1] < least:
                    floor, least = len(out) if same is None else same, found[1]
                if same is None:  # equal variants are timed once
                    raw.append(found[0])
                    name = f"timed/{tag}{'b' if fill_b else ''}{'f' if fill_f else ''}"
                    out.append((name, _columns(p, found[0])))
    return out, floor


Generator = Callable[[GenerationRequest], ComputeOrder]


def floored(inner: Generator) -> Generator:
    """A zbv generator (budget p) with the timed orders' floor (`floor.with_floor`)."""
    return with_floor(inner, v_shape, orders, lambda p, params: float(p))
