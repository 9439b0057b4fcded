"""`greedy.shared_plans`: a pass run twice inside the block is computed once; its order, an ArrayOrder that
nobody can change, is shared."""

import pytest

from primuspp.algorithms.search import greedy
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import make_placement


def test_shared_plans_equal_fresh_and_counted(monkeypatch):
    placement = make_placement("linear", 4, 1)
    costs = CostModel(1000, 1200, 700, comm=30).for_placement(placement)
    policy = greedy.POLICIES[3]
    alone = greedy.schedule(placement, 12, costs, 4.0, policy)
    calls = []
    real = greedy._schedule
    monkeypatch.setattr(greedy, "_schedule", lambda *args: calls.append(args) or real(*args))
    with greedy.shared_plans():
        first = greedy.schedule(placement, 12, costs, 4.0, policy)
        assert isinstance(first.order, ArrayOrder)
        with pytest.raises(AttributeError):  # a caller cannot change what the next one gets
            first.order[0].clear()
        again = greedy.schedule(placement, 12, costs, 4.0, policy)
        other = greedy.schedule(placement, 12, costs, 3.0, policy)
    assert len(calls) == 2  # the repeat came from the shared plans; another cap is another pass
    assert again == alone and again.order is first.order
    assert other != alone
    greedy.schedule(placement, 12, costs, 4.0, policy)  # outside the block: computed again
    assert len(calls) == 3
