"""`greedy.shared_plans`: a pass run twice inside the block is computed once and returned as a fresh copy."""

from primuspp.algorithms import greedy
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
        first.order[0].clear()  # a caller changing its copy changes nothing for the next
        again = greedy.schedule(placement, 12, costs, 4.0, policy)
        other = greedy.schedule(placement, 12, costs, 3.0, policy)
    assert len(calls) == 2  # the repeat came from the shared plans; another cap is another pass
    assert again == alone and again.order is not alone.order
    assert other != alone
    greedy.schedule(placement, 12, costs, 4.0, policy)  # outside the block: computed again
    assert len(calls) == 3
