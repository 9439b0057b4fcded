"""`portfolio.score` without timing the same order twice.

A cost-aware search meets the same order again and again: a W post-pass variant that moves nothing, a
local-search swap undone by a later one, zero-bubble-heuristic rescoring zero-bubble's table, the floor
rescoring the generator's result. Timing an order costs far more than hashing it, so the figures of the
orders timed lately are kept, keyed by everything they depend on (placement, m, costs, the order). The
order is keyed by its nodes' identities (hashing a node hashes its kind, an Enum: as slow as the timing);
searches build variants from the same node objects, and the kept orders hold their nodes, so an identity
cannot be reused while its key is kept. Equal orders of other node objects are timed again, never confused.
An `ArrayOrder` is keyed by its columns' bytes instead (reading its nodes would build them). The figures are
the timing's own (or, `note_timing`, a greedy pass's planned figures where they are proven to be exactly
those), so a hit returns exactly what a new timing would; `score` keeps the order's peak as well
(a generator's own order is counted for its cap, scored, then scored again by the floor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search.portfolio import Score, memory_units, order_peak, timed_score
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.placement import Placement
from primuspp.schedule.rows import memo_of


class BlockMemo:
    """Results kept within `with memo.block():` only (a nested block shares the outer one's), dropped on
    exit; outside a block `once` computes every time."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[dict | None] = ContextVar(name, default=None)

    @contextmanager
    def block(self) -> Iterator[None]:
        token = self._var.set({} if self._var.get() is None else self._var.get())
        try:
            yield
        finally:
            self._var.reset(token)

    def once(self, key: tuple, make: Callable[[], object]) -> object:
        """`make()`, or within a block its first result for `key`."""
        kept = self._var.get()
        if kept is None:
            return make()
        if key not in kept:
            kept[key] = make()
        return kept[key]


#: compute nodes of the orders kept, all together (the oldest go first)
MAX_NODES = 400_000

#: an ArrayOrder's columns as bytes, in its rows' memo (`rows.Rows`): the same order scored again builds and
#: hashes no new bytes
_COLUMNS = ("score_memo.columns",)

#: key -> [makespan, longest span, what keeps the identities in the key unused, compute nodes, peak or None]
_kept: dict[tuple, list] = {}
_nodes = [0]


def forget() -> None:
    """Drop every kept figure, the kept lower bounds too (benchmarks time generation, not lookups)."""
    from primuspp.algorithms.search import bounds

    _kept.clear()
    _nodes[0] = 0
    bounds.forget()


def score(placement: Placement, m: int, order: ComputeOrder, costs: StageCosts) -> Score:
    """`portfolio.score(placement, m, order, costs, costs.fractions())`, the timing and the peak looked up if
    done (the peak, `order_peak`'s, depends on nothing the key leaves out either)."""
    key, keep = _key(placement, m, order, costs)
    hit = _kept.get(key)
    if hit is not None and hit[4] is not None:
        return Score(hit[0], hit[1], hit[4])
    peak = order_peak(order, memory_units(placement, costs.activation), costs.fractions())
    sc = _timed(key, keep, placement, m, order, costs, peak)
    entry = _kept.get(key)
    if entry is not None:
        entry[4] = peak
    return sc


def peaked(placement: Placement, m: int, order: ComputeOrder, costs: StageCosts, peak: float) -> Score:
    """`portfolio.timed_score` (the peak known), the timing looked up if done."""
    key, keep = _key(placement, m, order, costs)
    return _timed(key, keep, placement, m, order, costs, peak)


def note_timing(
    placement: Placement,
    m: int,
    order: ArrayOrder,
    costs: StageCosts,
    makespan: float,
    max_span: float,
    peak: float | None = None,
) -> None:
    """Keep an order's step time and longest span (and its peak, unless None) known without timing it: a
    greedy pass whose planned times are exactly the simulator's (`greedy.asap_exact`, `greedy.peak_exact`).
    A later `score` then counts its peak only where it is None. An order too large to keep is let be (its
    key alone would cost as much as a timing's share)."""
    if order.num_nodes() > MAX_NODES:
        return
    key, keep = _key(placement, m, order, costs)
    if key not in _kept:
        _keep(key, keep, order, makespan, max_span)
        entry = _kept.get(key)
        if entry is not None:
            entry[4] = peak


def _key(placement: Placement, m: int, order: ComputeOrder, costs: StageCosts) -> tuple[tuple, object]:
    """The memo key of an order (see the module docstring) and what keeps its node identities unused."""
    if isinstance(order, ArrayOrder):  # by content: equal columns, equal timing
        rows = order.rows
        memo = memo_of(rows)
        cols = memo.get(_COLUMNS)
        if cols is None:  # kept with the columns (up to MAX_NODES): hashed once, then compared by identity
            names = ("node_kind", "kind", "mb", "stage", "part")
            cols = (order.first.tobytes(), *(rows[k].tobytes() for k in names))
            if order.num_nodes() <= MAX_NODES:
                memo[_COLUMNS] = cols
        return (placement, m, costs, *cols), None
    return (placement, m, costs, tuple(tuple(map(id, seq)) for seq in order)), tuple(map(tuple, order))


def _timed(
    key: tuple,
    keep: object,
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    peak: float,
) -> Score:
    hit = _kept.get(key)
    if hit is not None:
        return Score(hit[0], hit[1], peak)
    sc = timed_score(placement, m, order, costs, peak)
    _keep(key, keep, order, sc.makespan, sc.max_span)
    return sc


def _keep(key: tuple, keep: object, order: ComputeOrder, makespan: float, max_span: float) -> None:
    size = order.num_nodes() if isinstance(order, ArrayOrder) else sum(map(len, order))
    while _kept and _nodes[0] + size > MAX_NODES:
        old = next(iter(_kept))
        _nodes[0] -= _kept.pop(old)[3]
    if size <= MAX_NODES:
        _kept[key] = [makespan, max_span, keep, size, None]
        _nodes[0] += size
