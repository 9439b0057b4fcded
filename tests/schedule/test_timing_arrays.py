"""The array form of the timing (`timing_arrays.solve`): identical to the loop, bit for bit, on any costs
(the sweeps where their proof holds, equal or dyadic costs; the rounds everywhere else); it steps aside
(None) only where the order cannot run or is not one it reads, and the loop words why."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ValidationError
from primuspp.schedule import array_order, timing, timing_arrays
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import make_placement
from primuspp.schedule.timing import node_times, node_times_events
from tests.schedule.random_orders import random_order

PLACEMENTS = (("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2))
NAMES = [n for n in ALGORITHMS if n != "zb-optimal"]
#: costs the array form proves exact (multiples of 2^-20), and one it must leave to the loop (thirds)
DYADIC = {
    "equal": CostModel(1000, 1000, 1000),
    "per-rank": CostModel((900.0, 937.25, 974.5, 1011.75), 1500.0, (700.0, 713.0, 726.0, 700.0), comm=55.0),
    "fb": CostModel(2.0, 3.0, 1.0, comm=0.5, fb_overlap=0.75),
}
THIRDS = CostModel(1.0 / 3, 1.0, 1.0)


def _flat(rows):
    return np.array([t for row in rows for t in row], dtype=np.float64)


def _same(placement, m, order, stage_costs, got) -> None:
    loop = node_times_events(placement, m, order, stage_costs)
    assert np.array_equal(got.starts, _flat(loop.starts))
    assert np.array_equal(got.ends, _flat(loop.ends))
    for arr, ref in ((got.forward_end, loop.forward_end), (got.grad_end, loop.grad_end)):
        assert [None if t != t else t for t in arr.tolist()] == ref


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cname", list(DYADIC))
def test_arrays_are_the_loop_on_every_algorithm(name, cname):
    costs = DYADIC[cname]
    for pp, m in ((4, 8), (4, 13)):
        try:
            table = build_schedule(name, pp, None, m, costs)
        except Exception:
            continue
        sc = costs.for_placement(table.placement)
        order = table.compute_order()
        got = timing_arrays.solve(table.placement, m, order, sc, table.ranks.rows)
        if cname == "equal":
            assert got is not None, "equal costs: the sweeps settle and the proof holds"
        if got is not None:
            _same(table.placement, m, order, sc, got)


def test_other_costs_are_timed_in_rounds_with_the_loops_bits(monkeypatch):
    """Costs the sweeps cannot prove (thirds, users' floats) are timed in rounds, never swept, bit for bit
    the loop's; so are equal costs where the sweeps give up."""
    monkeypatch.setattr(timing_arrays, "_sweep", lambda *a: pytest.fail("swept"))
    for name in ("1f1b", "zbv", "dualpipe"):
        for costs in (THIRDS, CostModel(1.13, 2.27, 0.71, comm=0.13, fb_overlap=0.83)):
            table = build_schedule(name, 4, None, 8, costs)
            sc = costs.for_placement(table.placement)
            got = timing_arrays.solve(table.placement, 8, table.compute_order(), sc)
            assert got is not None and not got.exact
            _same(table.placement, 8, table.compute_order(), sc, got)
    monkeypatch.setattr(timing_arrays, "_sweep", lambda *a: None)
    table = build_schedule("zbv", 4, None, 8, DYADIC["equal"])
    sc = DYADIC["equal"].for_placement(table.placement)
    got = timing_arrays.solve(table.placement, 8, table.compute_order(), sc, dict(table.ranks.rows))
    assert got is not None and got.exact
    _same(table.placement, 8, table.compute_order(), sc, got)


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


@pytest.mark.parametrize(
    "kind,pp,vpp", [("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2)]
)
def test_arrays_are_the_loop_on_random_orders(kind, pp, vpp):
    """Random orders with FB nodes, OFFLOAD/RELOAD and B/W splits: identical wherever the arrays answer."""
    placement = make_placement(kind, pp, vpp)
    rng = random.Random(5)
    answered = 0
    for costs in DYADIC.values():
        for _ in range(6):
            order = random_order(placement, 6, rng)
            sc = costs.for_placement(placement)
            got = timing_arrays.solve(placement, 6, order, sc)
            if got is not None:
                answered += 1
                _same(placement, 6, order, sc, got)
    assert answered > 0


def test_a_deadlock_is_left_to_the_loop_which_names_it(monkeypatch):
    placement = make_placement("linear", 2, 1)
    f = lambda mb, s: Node(NodeKind.F, mb, s)  # noqa: E731
    b = lambda mb, s: Node(NodeKind.BW, mb, s)  # noqa: E731
    # rank 0 runs B0.0 before F1.0, but rank 1 runs F1.1 (needs F1.0) before B0.1 (which B0.0 needs)
    order = [[f(0, 0), b(0, 0), f(1, 0), b(1, 0)], [f(0, 1), f(1, 1), b(0, 1), b(1, 1)]]
    sc = CostModel().for_placement(placement)
    assert timing_arrays.solve(placement, 2, order, sc) is None
    monkeypatch.setattr(timing, "ARRAY_MIN_NODES", 0)
    with pytest.raises(ValidationError, match="dependency cycle"):
        node_times(placement, 2, order, sc)


def test_an_input_made_later_on_the_same_rank_is_left_to_the_loop():
    placement = make_placement("linear", 1, 1)
    order = [[Node(NodeKind.BW, 0, 0), Node(NodeKind.F, 0, 0)]]
    sc = CostModel().for_placement(placement)
    assert timing_arrays.solve(placement, 1, order, sc) is None
    with pytest.raises(ValidationError):
        node_times_events(placement, 1, order, sc)


def test_node_times_takes_the_arrays_above_the_threshold(monkeypatch):
    """`node_times` (the list form every planner reads) is the loop's result on either side of the switch."""
    table = build_schedule("zbv", 4, None, 16, DYADIC["per-rank"])
    sc = DYADIC["per-rank"].for_placement(table.placement)
    order = table.compute_order()
    below = node_times(table.placement, 16, order, sc)
    monkeypatch.setattr(timing, "ARRAY_MIN_NODES", 0)
    above = node_times(table.placement, 16, order, sc)
    assert timing_arrays.solve(table.placement, 16, order, sc) is not None
    assert above.starts == below.starts and above.ends == below.ends
    assert above.forward_end == below.forward_end and above.grad_end == below.grad_end


def test_a_rescaling_is_taken_unchecked_only_where_the_scaling_proves_it():
    """With the cost table the earlier ends came from (whole durations) and this one that table times a
    whole scale, the scaled ends are taken as they are; otherwise they are checked against the recurrence
    (and wrong ones refused)."""
    table = build_schedule("1f1b", 4, None, 8, CostModel(1000, 1000, 1000))
    pl, order, rows = table.placement, table.compute_order(), table.ranks.rows
    graph = timing_arrays.timing_graph(pl, 8, order, rows)
    unit = CostModel(1, 1, 1).for_placement(pl)
    big = CostModel(1000, 1000, 1000).for_placement(pl)
    basis, tab = timing_arrays._cost_table(unit)[0], timing_arrays._cost_table(big)[0]
    d = timing_arrays.node_durations(rows, graph.first, big)
    right = timing_arrays.solve(pl, 8, order, unit, dict(rows))
    assert right is not None
    known = (0, 1.0, 0.0, right.ends, basis)
    got = timing_arrays._rescaled(known, graph, d, 0.0, tab)
    fresh = timing_arrays.solve(pl, 8, order, big, dict(rows))
    assert np.array_equal(got[:-1], fresh.ends)
    wrong = right.ends.copy()
    wrong[len(wrong) // 2] += 1.0
    assert timing_arrays._rescaled((0, 1.0, 0.0, wrong, basis), graph, d, 0.0, tab) is not None  # trusted
    uneven = CostModel((1000.0, 2000.0, 1000.0, 1000.0), 1000, 1000).for_placement(pl)
    d2 = timing_arrays.node_durations(rows, graph.first, uneven)
    tab2 = timing_arrays._cost_table(uneven)[0]
    assert timing_arrays._rescaled((0, 1.0, 0.0, wrong, basis), graph, d2, 0.0, tab2) is None  # checked


def test_a_generators_unit_slots_are_taken_only_where_they_solve_the_recurrence(monkeypatch):
    """The V family notes each node's unit slot (`UNIT_STARTS`); under unit costs the timing takes them, no
    sweep, where they obey the recurrence, and sweeps where one is off; under other costs it ignores them.
    The times are the loop's either way."""
    from primuspp.algorithms.base import GenerationRequest
    from primuspp.algorithms.registry import get_algorithm
    from primuspp.schedule.costs import unit_costs
    from primuspp.schedule.rows import Rows

    sweeps: list[int] = []
    real_sweep = timing_arrays._sweep
    monkeypatch.setattr(timing_arrays, "_sweep", lambda *a: sweeps.append(1) or real_sweep(*a))
    p, m = 6, 40  # m long enough for the period extension: its order's slots are extended too
    for name in ("zbv", "v-half"):
        algo = get_algorithm(name)
        order = algo.generate(GenerationRequest(p, 2, m, CostModel(1, 1, 1), {}))
        rows = order.rows
        slots = rows.memo[timing_arrays.UNIT_STARTS]
        pl = make_placement(algo.placement, p, 2)
        for hint, costs, swept in (
            (slots, unit_costs(pl), False),  # taken
            (np.where(np.arange(len(slots)) == len(slots) // 2, slots + 1, slots), unit_costs(pl), True),
            (slots, CostModel(1000, 1000, 1000).for_placement(pl), True),  # not unit: ignored
        ):
            fresh = Rows(dict(rows))
            fresh.memo[timing_arrays.UNIT_STARTS] = hint
            sweeps.clear()
            got = timing_arrays.solve(pl, m, order, costs, fresh)
            assert got is not None and bool(sweeps) == swept, (name, swept)
            _same(pl, m, order, costs, got)


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipe-v"])
def test_the_compact_forms_of_large_orders_time_the_same(monkeypatch, name):
    """Above `NATIVE_MAX` nodes the graph's indices are int32, whole ends are kept as int32 and the
    kind-stage index is made again: the lowering's and the simulation's times are the plain ones."""
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
    kept = [v for k, v in rows.memo.items() if k[0] == "ends"]
    graphs = [v[1] for k, v in rows.memo.items() if k[0] == "timing"]
    got = timing_arrays.solve(pl, 12, order, sc, rows)
    assert graphs and graphs[0].src.dtype == np.int32
    if kept[0][4] is not None:  # whole ends of simple nodes: kept as int32
        assert kept[0][3].dtype == np.int32
    for a, b in ((got_unit, want_unit), (got, want)):
        assert np.array_equal(a.ends, b.ends) and np.array_equal(a.starts, b.starts)
        assert np.array_equal(a.forward_end, b.forward_end, equal_nan=True)
        assert np.array_equal(a.grad_end, b.grad_end, equal_nan=True)
