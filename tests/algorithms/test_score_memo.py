"""`score_memo`: a looked-up score (timing and peak) is exactly `portfolio.score`'s, for Node lists and for
ArrayOrders, and a content key never confuses two different orders."""

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.classic import one_f_one_b
from primuspp.algorithms.search import portfolio, score_memo
from primuspp.algorithms.zero_bubble import zero_bubble
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear


def test_memo_hits_equal_fresh_scores():
    p, m = 4, 9
    cost = CostModel(1.0, 2.0, 0.5, comm=0.1, b_free_fraction=0.25)
    placement, costs = linear(p), cost.for_placement(linear(p))
    req = GenerationRequest(p, 1, m, cost, {})
    zb, ofob = zero_bubble.generate(req), one_f_one_b.generate(req)
    assert isinstance(zb, ArrayOrder)
    score_memo.forget()
    for order in (zb, [list(seq) for seq in zb], ofob, ArrayOrder.from_nodes(zb)):
        fresh = portfolio.score(placement, m, order, costs, costs.fractions())
        for _ in range(2):  # the first call fills the memo, the second reads it
            assert score_memo.score(placement, m, order, costs) == fresh
        assert score_memo.peaked(placement, m, order, costs, 7.0) == portfolio.Score(
            fresh.makespan, fresh.max_span, 7.0
        )
    # a peak given to `peaked` is not kept as the order's own
    score_memo.forget()
    assert score_memo.peaked(placement, m, zb, costs, 7.0).peak == 7.0
    assert score_memo.score(placement, m, zb, costs) == portfolio.score(
        placement, m, zb, costs, costs.fractions()
    )
    assert score_memo.score(placement, m, ofob, costs) != score_memo.score(placement, m, zb, costs)


def test_array_order_key_bytes_built_once():
    """An ArrayOrder's key bytes are kept with its columns: a second key holds the same bytes objects, and an
    equal order of other columns has an equal key (a hit) but its own bytes."""
    p, m = 3, 6
    placement = linear(p)
    costs = CostModel(1.0, 1.0, 1.0).for_placement(placement)
    zb = zero_bubble.generate(GenerationRequest(p, 1, m, CostModel(1.0, 1.0, 1.0), {}))
    first, _ = score_memo._key(placement, m, zb, costs)
    again, _ = score_memo._key(placement, m, zb, costs)
    assert first == again and all(a is b for a, b in zip(first[3:], again[3:], strict=True))
    other, _ = score_memo._key(placement, m, ArrayOrder.from_nodes([list(seq) for seq in zb]), costs)
    assert other == first and not any(a is b for a, b in zip(first[3:], other[3:], strict=True))
