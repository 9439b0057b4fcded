"""`memory_levels` keeps an order's levels in its rows' memo: a second call (another timing of the same
order, as the simulator's after a generator counted the peak) gives the levels and peaks of a fresh count,
with its own times; other memory figures are counted anew; the kept levels are read-only."""

import numpy as np
import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.schedule.memory_levels import memory_levels


@pytest.mark.parametrize("b_free", [0.0, 0.5, (1.0, 0.25, 0.0, 0.5)])
def test_second_count_is_a_fresh_one(b_free):
    table = build_schedule("zero-bubble", 4, None, 12)
    order = table.compute_order()
    rows, first = order.rows, order.first
    amount = (1.0, 1.0, 1.0, 1.0)
    fractions = CostModel(b_free_fraction=b_free).for_placement(table.placement).fractions()
    n = int(first[-1])
    zeros, starts = np.zeros(n), np.arange(n, dtype=np.float64)
    ends = starts + 0.5
    fresh = memory_levels(dict(rows), first, starts, ends, amount, fractions)  # a plain dict: no memo
    memory_levels(rows, first, zeros, zeros, amount, fractions)  # counts and keeps the levels
    again = memory_levels(rows, first, starts, ends, amount, fractions)
    for (t0, lv0, pk0), (t1, lv1, pk1) in zip(fresh, again, strict=True):
        assert t0.tobytes() == t1.tobytes() and lv0.tobytes() == lv1.tobytes() and pk0 == pk1
        assert not lv1.flags.writeable
    other = memory_levels(rows, first, starts, ends, (2.0, 2.0, 2.0, 2.0), fractions)
    assert [pk for _, _, pk in other] == [2 * pk for _, _, pk in fresh]
