"""zero-bubble's column generator (every rank at once, each node's place counted in closed form) equals its
Node reference at every p and m, fewer microbatches than ranks included."""

import pytest

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.zero_bubble import zero_bubble
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import CostModel
from tests.oracles import generators


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 9])
def test_columns_equal_the_reference(p):
    for m in (1, 2, p - 1, p, p + 1, 2 * p + 3, 24):
        if m < 1:
            continue
        req = GenerationRequest(p, 1, m, CostModel(), {})
        order = zero_bubble.generate(req)
        ref = generators.zero_bubble(req)
        assert isinstance(order, ArrayOrder)
        assert order.lengths() == [len(seq) for seq in ref] == [3 * m] * p
        assert [list(seq) for seq in order] == ref, (p, m)
