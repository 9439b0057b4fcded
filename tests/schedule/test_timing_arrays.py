"""The array form of the timing (`timing_arrays.solve`): identical to the loop, bit for bit, on any costs; it
steps aside (None) only where the order cannot run or is not one it reads (or a host transfer takes time:
the loop's host link), and the loop words why."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError, ValidationError
from primuspp.schedule import array_order, timing_arrays
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import make_placement
from primuspp.schedule.timing import node_times
from tests.schedule.random_orders import random_order

PLACEMENTS = (("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2))
NAMES = [n for n in ALGORITHMS if n != "zb-optimal"]
PER_RANK = CostModel((900.0, 937.25, 974.5, 1011.75), 1500.0, (700.0, 713.0, 726.0, 700.0), comm=55.0)


def _flat(rows):
    return np.array([t for row in rows for t in row], dtype=np.float64)


def _same(placement, m, order, stage_costs, got) -> None:
    loop = node_times(placement, m, order, stage_costs)
    assert np.array_equal(got.starts, _flat(loop.starts))
    assert np.array_equal(got.ends, _flat(loop.ends))
    for arr, ref in ((got.forward_end, loop.forward_end), (got.grad_end, loop.grad_end)):
        assert [None if t != t else t for t in arr.tolist()] == ref


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(NAMES),
    pp=st.integers(2, 5),
    m=st.integers(1, 13),
    fwd=st.floats(0.05, 5.0),
    bwd=st.floats(0.05, 5.0),
    wgrad=st.floats(0.05, 3.0),
    comm=st.sampled_from([0.0, 0.13, 2.0]),
    overlap=st.sampled_from([1.0, 0.83]),
)
def test_arrays_are_the_loop_on_every_algorithm(name, pp, m, fwd, bwd, wgrad, comm, overlap):
    """Users' float costs (and equal ones) on every algorithm's tables: the arrays answer, the loop's bits."""
    costs = CostModel(fwd, bwd, wgrad, comm=comm, fb_overlap=overlap)
    try:
        table = build_schedule(name, pp, None, m, costs)
    except ScheduleError:
        return  # refused at this size
    sc = costs.for_placement(table.placement)
    order = table.compute_order()
    got = timing_arrays.solve(table.placement, m, order, sc, table.ranks.rows)
    assert got is not None
    _same(table.placement, m, order, sc, got)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(PLACEMENTS),
    m=st.integers(1, 7),
    fwd=st.lists(st.floats(0.0, 5.0), min_size=8, max_size=8),
    bwd=st.floats(0.0, 5.0),
    wgrad=st.floats(0.0, 3.0),
    comm=st.sampled_from([0.0, 0.13, 2.0]),
    overlap=st.sampled_from([1.0, 0.83]),
    seed=st.integers(0, 10**6),
)
def test_arrays_are_the_loop_on_any_costs(kind, m, fwd, bwd, wgrad, comm, overlap, seed):
    """Random orders (FB nodes, OFFLOAD/RELOAD, B/W splits) under random float costs, zero durations
    included: wherever the arrays answer, the loop's bits; where they do not, the loop refuses too or the
    order is one they do not read (an input made later on its own rank)."""
    placement = make_placement(*kind)
    n = placement.num_stages
    costs = CostModel(tuple(fwd[:n]), bwd, wgrad, comm=comm, fb_overlap=overlap).for_placement(placement)
    order = random_order(placement, m, random.Random(seed))
    got = timing_arrays.solve(placement, m, order, costs)
    if got is not None:
        _same(placement, m, order, costs, got)


def test_a_host_transfer_that_takes_time_is_left_to_the_loop():
    table = build_schedule("v-half", 4, 2, 8, CostModel(offload=0.5), offload=True)
    order, pl = table.compute_order(), table.placement
    assert timing_arrays.solve(pl, 8, order, CostModel(offload=0.5).for_placement(pl)) is None
    sc = CostModel().for_placement(pl)  # free transfers: the arrays time them, as the loop
    _same(pl, 8, order, sc, timing_arrays.solve(pl, 8, order, sc))


def test_a_deadlock_is_left_to_the_loop_which_names_it():
    placement = make_placement("linear", 2, 1)
    f = lambda mb, s: Node(NodeKind.F, mb, s)  # noqa: E731
    b = lambda mb, s: Node(NodeKind.BW, mb, s)  # noqa: E731
    # rank 0 runs B0.0 before F1.0, but rank 1 runs F1.1 (needs F1.0) before B0.1 (which B0.0 needs)
    order = [[f(0, 0), b(0, 0), f(1, 0), b(1, 0)], [f(0, 1), f(1, 1), b(0, 1), b(1, 1)]]
    sc = CostModel().for_placement(placement)
    assert timing_arrays.solve(placement, 2, order, sc) is None
    with pytest.raises(ValidationError, match="dependency cycle"):
        node_times(placement, 2, order, sc)


def test_an_input_made_later_on_the_same_rank_is_left_to_the_loop():
    placement = make_placement("linear", 1, 1)
    order = [[Node(NodeKind.BW, 0, 0), Node(NodeKind.F, 0, 0)]]
    sc = CostModel().for_placement(placement)
    assert timing_arrays.solve(placement, 1, order, sc) is None
    with pytest.raises(ValidationError):
        node_times(placement, 1, order, sc)


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipe-v"])
def test_the_compact_forms_of_large_orders_time_the_same(monkeypatch, name):
    """Above `NATIVE_MAX` nodes the graph's indices are int32 and the kind-stage index is made again: the
    lowering's and the simulation's times are the plain ones."""
    from primuspp.schedule.costs import unit_costs
    from primuspp.schedule.rows import Rows

    costs = CostModel(1000, 1000, 1000)
    table = build_schedule(name, 4, None, 12, costs)
    pl, order = table.placement, table.compute_order()
    sc = costs.for_placement(pl)
    want_unit = timing_arrays.solve(pl, 12, order, unit_costs(pl), dict(table.ranks.rows))
    want = timing_arrays.solve(pl, 12, order, sc, dict(table.ranks.rows))
    monkeypatch.setattr(timing_arrays, "NATIVE_MAX", 0)
    monkeypatch.setattr(array_order, "NATIVE_MAX", 0)
    rows = Rows(table.ranks.rows)
    got_unit = timing_arrays.solve(pl, 12, order, unit_costs(pl), rows)
    graphs = [v[1] for k, v in rows.memo.items() if k[0] == "timing"]
    got = timing_arrays.solve(pl, 12, order, sc, rows)
    assert graphs and graphs[0].src.dtype == np.int32
    for a, b in ((got_unit, want_unit), (got, want)):
        assert np.array_equal(a.ends, b.ends) and np.array_equal(a.starts, b.starts)
        assert np.array_equal(a.forward_end, b.forward_end, equal_nan=True)
        assert np.array_equal(a.grad_end, b.grad_end, equal_nan=True)
