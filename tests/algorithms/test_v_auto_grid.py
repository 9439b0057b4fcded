"""v-auto's floor: the controllable-memory construction on unit slots (repeat, squeeze, reorder), and the
final pick that is never worse than it in both longest span and step time."""

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.search.portfolio import memory_units, order_peak, score
from primuspp.algorithms.v import auto_grid as g
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.placement import v_shape
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate


def _valid(p: int, m: int, order) -> None:
    placement = v_shape(p)
    validate(ScheduleTable(placement, m, lower_comms(placement, m, order), "test", {}))


def test_first_rows_and_blocks_keep_six_distinct_slots():
    rows = g.first_rows()
    assert len(rows) == 60  # f, B, b in three distinct slots of 1..5
    for first in rows:
        assert first[0] == 0 and len(set(first)) == 6
        blk = g.block(first, 3, 1, 2, 5)
        if blk is None:
            continue
        for row in blk:
            assert sorted(row) == list(range(6))


def test_block_shifts_the_outgoing_chains_by_two_spacings():
    first = g.with_wgrads([0, 1, 3, 2, -1, -1])  # F0, F1, B1, B0 in slots 0..3
    blk = g.block(first, 3, 1, 2, 5)
    assert blk is not None
    f_slots = [row[0] for row in blk]
    assert [(b - a) % 6 for a, b in itertools.pairwise(f_slots)] == [3, 3, 1, 1]
    ff_slots = [row[1] for row in blk]
    assert all((b - a) % 6 == 5 for a, b in itertools.pairwise(ff_slots))


def test_a_weight_gradient_takes_the_first_free_slot_after_its_backward_chunk_1_first():
    row = g.with_wgrads([0, 1, 2, 3, -1, -1])  # F0, F1, B0, B1 in slots 0..3
    assert row[g.W1] == 4 and row[g.W0] == 5
    row = g.with_wgrads([0, 4, 5, 1, -1, -1])  # B1 in slot 1: W1 in 2; B0 in 5: W0 wraps to 3
    assert row[g.W1] == 2 and row[g.W0] == 3


def test_tile_lays_each_op_big_times_every_six_slots_in_chain_order():
    p, big = 3, 6
    rows = next(b for first in g.first_rows() if (b := g.block(first, 2, 1, 1, p)) is not None)
    grid = g.tile(rows, p, big)
    starts = {}
    for r, row in enumerate(grid):
        for code in range(6):
            slots = [j for j, c in enumerate(row) if c == code]
            assert len(slots) == big and all(b - a == 6 for a, b in itertools.pairwise(slots))
            assert slots[0] % 6 == rows[r][code]
            starts[(r, code)] = slots[0]
    chain = [(r, g.F0) for r in range(p)] + [(r, g.F1) for r in reversed(range(p))]
    chain += [(r, g.B1) for r in range(p)] + [(r, g.B0) for r in reversed(range(p))]
    assert all(starts[a] < starts[b] for a, b in itertools.pairwise(chain))
    assert all(starts[(r, g.B1)] < starts[(r, g.W1)] <= starts[(r, g.B1)] + 6 for r in range(p))


def test_squeeze_moves_each_op_right_after_its_input_keeping_the_rank_order():
    E, F0, F1 = g.EMPTY, g.F0, g.F1
    grid = [[F0, E, E, E, E, F1], [E, E, E, F0, F1, E]]  # p=2, one microbatch of forwards
    assert g.squeeze(grid, 1) == [[F0, E, E, F1], [E, F0, F1, E]]
    with pytest.raises(g._Invalid):  # rank 1's F0 before its input on rank 0
        g.squeeze([[E, F0], [F0, E]], 1)


def test_pair_wgrads_gives_each_weight_gradient_the_oldest_waiting_backward():
    E, B0, B1, W0, W1 = g.EMPTY, g.B0, g.B1, g.W0, g.W1
    assert g.pair_wgrads([[B1, B0, W0, E, W0]]) == [[B1, B0, W1, E, W0]]
    with pytest.raises(g._Invalid):
        g.pair_wgrads([[W1, B1]])


@settings(max_examples=20, deadline=None)
@given(p=st.integers(2, 5), extra=st.integers(-1, 4), pick=st.integers(0, 10_000), k=st.integers(0, 14))
def test_every_built_grid_is_a_valid_order_within_its_budget(p, extra, pick, k):
    m = max(1, p + extra)
    first = g.first_rows()[pick % 60]
    k0, k1 = [(a, b) for a in g.SPACINGS for b in g.SPACINGS if b <= a][k]
    rows = g.block(first, k0, k1, 1 + pick % max(1, p - 1), p)
    if rows is None:
        return
    budget = 2 * p
    try:
        grid, held, _ = g.build(p, m, rows, budget)
    except (g._Invalid, IndexError):
        return
    if grid is None:
        return
    assert held <= budget and g.peak(grid) == held
    order = g.to_order(grid)
    assert Counter(n.kind for seq in order for n in seq) == Counter(
        {NodeKind.F: 2 * p * m, NodeKind.B: 2 * p * m, NodeKind.W: 2 * p * m}
    )
    _valid(p, m, order)


@pytest.mark.parametrize(("p", "m", "chunks"), [(4, 4, 4), (4, 8, 6), (4, 8, 8), (6, 12, 6)])
def test_best_fits_the_budget_and_a_smaller_budget_derived_in_the_same_walk_is_the_same(p, m, chunks):
    cost = (1.0, 1.1, 0.5, 0.1)
    both = g.best(p, m, [chunks - 1, chunks], cost)
    alone = g.best(p, m, [chunks - 1], cost)
    assert both[0] == alone[0]
    assert both[1] is not None
    for budget, grid in zip((chunks - 1, chunks), both, strict=True):
        if grid is None:  # an odd budget below p chunks may fit no block
            continue
        assert g.peak(grid) <= budget
        _valid(p, m, g.to_order(grid))


def test_span_is_the_longest_rank_span_under_uniform_costs():
    p, m = 4, 8
    grid = g.best(p, m, [2 * p], (1.0, 1.0, 1.0, 0.0))[0]
    placement = v_shape(p)
    costs = CostModel(forward=2.0, backward=2.0, wgrad=2.0).for_placement(placement)  # 1 per chunk op
    sc = score(placement, m, g.to_order(grid), costs, costs.fractions())
    assert g.span(grid, 1.0, 1.0, 1.0, 0.0) == pytest.approx(sc.max_span)


@pytest.mark.parametrize(
    ("p", "m", "max_mem"),
    [(4, 4, 2.0), (4, 16, 2.0), (8, 8, 4.0), (8, 16, 6.0), (4, 8, 4.0)],
)
def test_v_auto_is_no_worse_than_the_construction_in_span_and_step(p, m, max_mem):
    costs = CostModel(forward=1000.0, backward=1000.0, wgrad=700.0, comm=100.0)
    placement = v_shape(p)
    stage = costs.for_placement(placement)
    floor = g.floor_order(p, m, int(2 * max_mem), stage, max_mem)
    assert floor is not None
    _valid(p, m, floor)
    ref = score(placement, m, floor, stage, stage.fractions())
    table = build_schedule("v-auto", p, 2, m, costs, max_mem=max_mem)
    ours = score(placement, m, table.compute_order(), stage, stage.fractions())
    assert ours.max_span <= ref.max_span + 1e-6
    assert ours.makespan <= ref.makespan + 1e-6
    assert ours.peak <= max_mem + 1e-9


def test_the_wider_budget_is_taken_only_when_its_order_fits_the_cap():
    p, m = 4, 8
    stage = CostModel(forward=1.0, backward=1.0, wgrad=0.7, comm=0.1).for_placement(v_shape(p))
    units = memory_units(v_shape(p), stage.activation)
    found = 0
    for chunks in (3, 4, 5, 6, 7):
        order = g.floor_order(p, m, chunks, stage, chunks / 2)
        if order is None:
            continue
        found += 1
        assert order_peak(order, units, stage.fractions()) <= chunks / 2 + 1e-9
    assert found >= 3


def test_effort_gates_the_construction_and_reports_it():
    stage = CostModel().for_placement(v_shape(16))
    report: dict = {}
    assert g.floor_order(16, 64, 32, stage, 16.0, "auto", report) is None  # 196,608 nodes x chunks
    assert report["grid"].startswith("skipped")
    report = {}
    assert g.floor_order(2, 4, 4, stage_of(2), 2.0, "auto", report) is not None
    assert report["grid"].startswith("built: ")


def test_between_the_two_limits_the_thinned_space_is_built_and_stated():
    p, m, chunks = 4, 300, 8  # 6 * 4 * 300 * 8 = 57,600 nodes x chunks: above GRID_WORK, within THIN_WORK
    assert g.GRID_WORK < 6 * p * m * chunks <= g.THIN_WORK
    report: dict = {}
    order = g.floor_order(p, m, chunks, stage_of(p), 4.0, "auto", report)
    assert report["grid"].startswith("built from the thinned space")
    assert order is not None
    _valid(p, m, order)


@pytest.mark.parametrize(("p", "m", "chunks"), [(4, 4, 6), (4, 8, 8), (5, 10, 7), (6, 6, 9)])
def test_the_thinned_space_is_a_part_of_the_whole_one_within_the_budget(p, m, chunks):
    cost = (1.0, 1.1, 0.5, 0.1)
    budgets = [chunks, chunks + 1]
    whole = g.best(p, m, budgets, cost)
    thinned = g.best(p, m, budgets, cost, thin=True)
    for budget, a, b in zip(budgets, whole, thinned, strict=True):
        if b is None:
            continue
        assert a is not None
        assert g.peak(b) <= budget
        _valid(p, m, g.to_order(b))
        assert g.span(a, *cost) <= g.span(b, *cost)  # the whole space holds every thinned block
    assert thinned[1] is not None  # a budget of chunks + 1 keeps the blocks that use it


def stage_of(p: int):
    return CostModel().for_placement(v_shape(p))
