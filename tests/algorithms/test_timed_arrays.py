"""The timed constructions (`zb_timed`, `zbv_timed`) emit ArrayOrders equal to their Node references."""

import itertools

import pytest

from primuspp.algorithms.v import zbv_timed
from primuspp.algorithms.zero_bubble import zb_timed
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear, v_shape
from tests.oracles import constructions

COSTS = (
    CostModel(1.0, 1.0, 1.0),
    CostModel(1.0, 2.0, 0.5, comm=0.1),
    CostModel(forward=(0.5, 1.5, 1.0, 2.0, 0.7, 1.1, 0.9, 1.3), backward=2.2, wgrad=0.3, comm=1.0),
)


def _stage_costs(cost: CostModel, placement):
    n = placement.num_stages
    fwd = cost.forward
    if isinstance(fwd, tuple):
        cost = CostModel(fwd[:n] + (1.0,) * max(0, n - len(fwd)), cost.backward, cost.wgrad, comm=cost.comm)
    return cost.for_placement(placement)


@pytest.mark.parametrize("p,m,cost", list(itertools.product((1, 2, 4), (1, 4, 9), COSTS)))
def test_zb_timed_equals_reference(p, m, cost):
    costs = _stage_costs(cost, linear(p))
    found = 0
    for max_mem, late, bfirst, strict in itertools.product((1, p, 2 * p), *([(True, False)] * 3)):
        fast = zb_timed._decisions(p, m, costs, max_mem, late, bfirst, strict)
        fast = None if fast is None else (zb_timed._columns(fast[0]), fast[1])
        ref = constructions.zb_timed_build(p, m, costs, max_mem, late, bfirst, strict)
        assert (fast is None) == (ref is None)
        if fast is not None:
            found += 1
            assert isinstance(fast[0], ArrayOrder) and fast[0] == ref[0] and fast[1] == ref[1]
    assert found
    names = [name for name, _ in zb_timed.orders(p, m, costs, float(p))[0]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("p,m,cost", list(itertools.product((1, 2, 4), (2, 4, 9), COSTS)))
def test_zbv_timed_equals_reference(p, m, cost):
    costs = _stage_costs(cost, v_shape(p))
    dur = [costs.forward, costs.backward, costs.wgrad]
    found = 0
    for chunks, fill_b, fill_f in itertools.product((2 * p, 4 * p), (True, False), (True, False)):
        fast = zbv_timed.build(p, m, dur, costs.comm, chunks, fill_b, fill_f)
        ref = constructions.zbv_timed_build(p, m, dur, costs.comm, chunks, fill_b, fill_f)
        assert (fast is None) == (ref is None)
        if fast is not None:
            found += 1
            assert isinstance(fast[0], ArrayOrder) and fast[0] == ref[0] and fast[1] == ref[1]
    assert found


def test_variants_shared_within_one_call(monkeypatch):
    """zero-bubble-heuristic floors its result and runs zero-bubble, which floors its own: the timed
    variants are built once per call, each `orders` call still returning new (equal) ArrayOrders."""
    from primuspp.algorithms.base import GenerationRequest
    from primuspp.algorithms.search.floor import forget
    from primuspp.algorithms.zero_bubble import zero_bubble_heuristic as heuristic

    calls = []
    real = zb_timed._variants
    monkeypatch.setattr(zb_timed, "_variants", lambda *args: calls.append(args) or real(*args))
    costs = CostModel(1.0, 2.0, 0.5, comm=0.05)
    forget()
    heuristic.generate_floored(GenerationRequest(4, 1, 8, costs, {}))
    assert len(calls) == 1
    place = linear(4)
    stage_costs = costs.for_placement(place)
    with zb_timed._VARIANTS.block():
        first, floor = zb_timed.orders(4, 8, stage_costs, 4.0)
        again, floor2 = zb_timed.orders(4, 8, stage_costs, 4.0)
    assert len(calls) == 2 and floor == floor2
    assert [n for n, _ in first] == [n for n, _ in again]
    assert all(a is not b and a == b for (_, a), (_, b) in zip(first, again, strict=True))
    assert zb_timed.orders(4, 8, stage_costs, 4.0) == (first, floor)  # outside: built again, equal
    assert len(calls) == 3
