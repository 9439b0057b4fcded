"""The array simulator (`engine.simulate`) is its readable reference (`tests/oracles/engine.py`)
bit for bit: intervals, transfers, memory curves, peaks and metrics, over the registry and cost models that
take every path (the array timing and the loop, the array memory curve and `order_memory`)."""

from __future__ import annotations

import pickle
import random
from dataclasses import asdict

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.sim import simulate
from primuspp.trace.columns import IntervalColumns
from tests.oracles.engine import simulate_reference
from tests.schedule.random_orders import random_order

PLACEMENTS = (("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2))
NAMES = [n for n in ALGORITHMS if n != "zb-optimal"]


def _costs(p: int) -> dict[str, CostModel]:
    return {
        "equal": CostModel(1000, 1000, 1000),
        "thirds": CostModel(1.0 / 3, 1.0, 0.7, comm=0.1, activation=1.3, b_free_fraction=1.0 / 3),
        "per-rank": CostModel(
            forward=tuple(900.0 + 37 * r for r in range(p)),
            backward=tuple(1500.0 - 21 * r for r in range(p)),
            wgrad=700.0,
            comm=55.0,
            activation=tuple(1.0 + 0.25 * (r % 2) for r in range(p)),
            b_free_fraction=tuple(-0.25 if r % 2 else 0.5 for r in range(p)),
        ),
        "zero": CostModel(0.0, 0.0, 0.0),
    }


def _same(table: ScheduleTable, costs: CostModel) -> None:
    fast, ref = simulate(table, costs), simulate_reference(table, costs)
    assert fast.metrics == ref.metrics
    assert repr(asdict(fast.metrics)) == repr(asdict(ref.metrics))
    for a, b in zip(fast.timeline.ranks, ref.timeline.ranks, strict=True):
        assert list(a.intervals) == b.intervals
        assert repr(list(a.memory)) == repr(b.memory)  # repr: -0.0 and 0.0 differ
        assert repr(a.peak_memory) == repr(b.peak_memory)
    assert list(fast.timeline.transfers) == ref.timeline.transfers
    assert fast.timeline == ref.timeline


@pytest.mark.parametrize("name", NAMES)
def test_simulate_is_the_reference_on_every_algorithm(name):
    for p, m in ((4, 8), (8, 20)):
        for costs in _costs(p).values():
            try:
                table = build_schedule(name, p, None, m, costs)
            except ScheduleError:
                continue
            _same(table, costs)


@pytest.mark.parametrize(
    "kind,pp,vpp", [("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2)]
)
def test_simulate_is_the_reference_on_random_orders(kind, pp, vpp):
    """FB nodes, OFFLOAD/RELOAD (the memory curve falls back to `order_memory`), B/W splits."""
    placement = make_placement(kind, pp, vpp)
    rng = random.Random(9)
    for costs in _costs(pp).values():
        for offload in (0.0, 0.3):
            order = random_order(placement, 5, rng, offload=offload)
            table = ScheduleTable(placement, 5, lower_comms(placement, 5, order), "random")
            _same(table, costs)


def test_a_plain_tuple_table_simulates_as_its_lowered_form():
    lowered = build_schedule("1f1b", 4, None, 8, CostModel())
    plain = ScheduleTable(lowered.placement, 8, tuple(lowered.ranks), "1f1b")
    assert simulate(plain).timeline == simulate(lowered).timeline


def test_the_timeline_views_build_nothing_until_read():
    result = simulate(build_schedule("zbv", 4, None, 8, CostModel()))
    rt = result.timeline.ranks[0]
    assert isinstance(rt.intervals, IntervalColumns)
    assert len(rt.intervals) == 3 * 8 * 2 and rt.intervals._items is None
    assert result.metrics.p2p_transfers == len(result.timeline.transfers)
    again = pickle.loads(pickle.dumps(result.timeline))
    assert again == result.timeline and isinstance(again.ranks[0].intervals, list)


@pytest.mark.parametrize("b_free", [0.0, 0.5, (0.0, 0.25, -0.25, 0.0)])
def test_memory_of_split_backwards_with_either_w_rule(b_free):
    """W's change read from the table (B frees nothing) or worked out per W (B frees a part): the
    reference's curve either way, on the split-backward schedules."""
    costs = CostModel(1000, 1000, 1000, b_free_fraction=b_free)
    for name in ("zero-bubble", "zb-h2", "zbv", "v-half"):
        try:
            table = build_schedule(name, 4, None, 12, costs)
        except (ScheduleError, KeyError):
            continue
        _same(table, costs)
