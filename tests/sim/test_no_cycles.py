"""A build and its simulation leave no cyclic garbage: the arrays of a table and its timeline are freed by
reference counting when dropped, not kept until the cyclic collector runs (which a caller may pause)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.search.floor import forget
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the block (so that no automatic collection hides a cycle)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "algo", ["1f1b", "1f1b-interleaved", "zero-bubble-heuristic", "zbv", "v-half", "dualpipe"]
)
def test_a_build_and_its_simulation_leave_no_cycles(algo, our_cyclic_garbage):
    costs = CostModel(1000.0, 1000.0, 1000.0, comm=100.0)
    simulate(build_schedule(algo, 4, None, 16, costs), costs)  # first use: lazy imports and caches
    forget()
    gc.collect()
    with gc_paused():
        result = simulate(build_schedule(algo, 4, None, 16, costs), costs)
        timeline = result.timeline
        assert timeline.ranks[0].intervals[0].end > 0  # the lazy views built too
        assert len(timeline.ranks[0].memory) > 1 and len(timeline.transfers) > 0
        forget()  # the floored generators' memos hold the last order: drop it
        del result, timeline
        assert our_cyclic_garbage() == []
