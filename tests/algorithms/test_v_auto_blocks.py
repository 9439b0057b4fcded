"""v-auto's block space: two spacing regimes and free turns, the front-loaded warm-up, the rebuilt
cool-down, and what the cost-ranked search buys under comm."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search.portfolio import score
from primuspp.algorithms.v import auto_blocks as v_auto_blocks
from primuspp.algorithms.v import blocks as v_blocks
from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.placement import v_shape
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate


def _valid(p: int, m: int, order) -> None:
    placement = v_shape(p)
    validate(ScheduleTable(placement, m, lower_comms(placement, m, order), "test", {}))


def _nodes(order) -> Counter:
    return Counter(n for seq in order for n in seq)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_every_block_of_the_space_is_collision_free_and_distinct(p):
    blocks = list(v_auto_blocks.space(p))
    sigs = {(*fo, *bo) for _, fo, bo in blocks}
    assert len(sigs) == len(blocks)
    for _, fo, bo in blocks:
        for r in range(p):
            slots = {fo[r] % 6, fo[2 * p - 1 - r] % 6, bo[r] % 6, bo[2 * p - 1 - r] % 6}
            assert len(slots) == 4


def test_the_space_has_two_regimes_and_the_tight_uniform_block():
    p = 8
    names = {name for name, _, _ in v_auto_blocks.space(p)}
    assert any(name.startswith("k31x3") for name in names)  # spacing 3 over 3 rank steps, then 1
    fo, _ = v_auto_blocks.chains(p, 3, 1, 3, (1, 1, 1))
    assert [fo[i + 1] - fo[i] for i in range(p - 1)] == [3, 3, 3, 1, 1, 1, 1]
    # the uniform tight chain of v-min (spacing 1 everywhere) is in the space
    assert v_auto_blocks.chains(p, 1, 1, p - 1, (1, 5, 1)) is not None
    assert len(names) > len(v_blocks.family())


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 6), extra=st.integers(0, 6), pick=st.integers(0, 10_000))
def test_warm_and_tail_orders_are_valid_and_keep_every_node(p, extra, pick):
    m = p + extra
    blocks = list(v_auto_blocks.space(p))
    name, fo, bo = blocks[pick % len(blocks)]
    ref = SlotSchedule(p, m, fo, bo).order()
    for _, order in v_auto_blocks.warm_candidates(p, m, 2 * p, [(name, fo, bo)]):
        assert _nodes(order) == _nodes(ref)
        _valid(p, m, order)
        tail = v_auto_blocks.tight_tail(order, p, m)
        if tail is not None:
            assert _nodes(tail) == _nodes(ref)
            _valid(p, m, tail)


def test_front_load_fills_the_first_rank_before_its_first_chunk0_backward():
    p, m = 4, 8
    fo, bo = v_auto_blocks.chains(p, 1, 1, p - 1, (1, 1, 1))
    occ = SlotSchedule(p, m, fo, bo).occ
    ops, lens = occ[occ >= 0], (occ >= 0).sum(axis=1)
    new = v_auto_blocks.front_load(ops, lens, p, 2 * p, m)
    assert new is not None
    old_row, new_row = ops[: lens[0]].tolist(), new[: lens[0]].tolist()  # rank 0's op ids
    f0, b0 = 0, 1  # rank 0's chunk-0 forward and backward of any microbatch, op id modulo 6p

    def lead(row) -> int:  # chunk-0 forwards before anything else
        i = 0
        while row[i] % (6 * p) == f0:
            i += 1
        return i

    before = 0  # chunk-0 forwards rank 0 runs before its first chunk-0 backward
    for op in old_row:
        if op % (6 * p) == b0:
            break
        before += op % (6 * p) == f0
    assert lead(old_row) < min(2 * p - 1, before)  # the block interleaves them with chunk-1 work
    assert lead(new_row) == min(2 * p - 1, before)  # front-loaded: all of them first (2(p-1) + 1 at most)
    assert sorted(new.tolist()) == sorted(ops.tolist())


COMM = CostModel(forward=1000.0, backward=1000.0, wgrad=300.0, comm=200.0)


def _span(p, m, order, costs) -> float:
    placement = v_shape(p)
    sc = costs.for_placement(placement)
    return score(placement, m, order, sc, sc.fractions()).max_span


@pytest.mark.parametrize(("p", "m", "cap"), [(8, 8, 4.0), (4, 8, 2.0)])
def test_the_block_space_never_loses_and_wins_under_comm(p, m, cap):
    spans = {}
    for space in (False, True):
        report: dict = {}
        order = v_family.v_orders(
            p, m, cap, v_family.AUTO_BLOCKS, COMM, report, widest=3, effort="full", space=space
        )
        _valid(p, m, order)
        spans[space] = _span(p, m, order, COMM)
    assert spans[True] <= spans[False]
    if (p, m) == (8, 8):  # the uniform blocks leave the pipeline half empty at this budget
        assert spans[True] < spans[False]


def test_fast_effort_skips_the_space():
    report: dict = {}
    v_family.v_orders(8, 8, 4.0, v_family.AUTO_BLOCKS, COMM, report, widest=3, effort="fast", space=True)
    assert report["effort"] == "fast"
    assert not report["candidate"].startswith("warm/")
