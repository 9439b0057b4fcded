"""The V slot grid (`v_grid`, `v_rows`, `v_squeeze`) makes exactly the moves of the readable references of
tests/oracles/v_slots.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.v import rows as v_rows
from primuspp.algorithms.v.block_orders import raw_peak
from primuspp.algorithms.v.blocks import ZB, offsets
from primuspp.algorithms.v.grid import SlotSchedule
from tests.algorithms.v_orders import BLOCKS
from tests.oracles import v_slots


def _lists(sched: SlotSchedule) -> tuple[list[int], list[list[int]]]:
    return sched.slot.tolist(), sched.occ.tolist()


def _same(sched: SlotSchedule, ref: v_slots.Lists) -> bool:
    return _lists(sched) == (ref.slot, ref.occ)


grids = st.tuples(st.integers(1, 8), st.integers(0, 14), st.sampled_from(BLOCKS))


@settings(max_examples=60, deadline=None)
@given(grid=grids)
def test_construction_places_ws_tightens_and_peaks_like_the_reference(grid):
    p, m, block = grid
    fo, bo = offsets(p, block)
    raw = SlotSchedule(p, m, fo, bo, tighten=False)
    ref = v_slots.Lists(raw)
    v_slots.strip_ws(ref)
    v_slots.place_ws(ref)
    assert _same(raw, ref)
    assert raw.peak() == max((max(v_slots.profile(row)) for row in ref.occ), default=0)
    assert raw.peak() == raw_peak(p, m, fo, bo)
    v_slots.tighten(ref)
    assert _same(SlotSchedule(p, m, fo, bo), ref)
    for sweeps in (
        (0, 1, 1000) if m else ()
    ):  # any sweep budget: the slot loop resumes where the sweeps left it wrong
        assert v_rows.by_ranks(raw.occ, raw.slot, 2 * p, sweeps).tolist() == ref.slot


@settings(max_examples=80, deadline=None)
@given(grid=grids, extra=st.sampled_from([0, 1, 3, 254, 300, 510]), explicit_first=st.booleans())
def test_squeezes_make_the_references_moves(grid, extra, explicit_first):
    p, m, block = grid
    base = SlotSchedule(p, m, *offsets(p, block))
    before = base.slot.copy()
    cap = base.peak() + extra  # over 253: the headroom's second digit, the derived walk's int32 counts
    fast, ref = base.copy(), v_slots.Lists(base)
    if explicit_first:
        fast.squeeze_explicit(cap)
        v_slots.squeeze_explicit(ref, cap)
        assert _same(fast, ref)
    fast.squeeze_derived(cap)
    v_slots.squeeze_derived(ref, cap)
    assert _same(fast, ref)
    assert np.array_equal(base.slot, before)  # the copy's passes left the base alone


@pytest.mark.parametrize("extra", [254, 255, 256, 509, 510, 511])
def test_explicit_headroom_borrows_and_carries_across_the_digit_boundary(extra):
    base = SlotSchedule(6, 20, *offsets(6, ZB), tighten=False)
    cap = base.peak() + extra
    fast, ref = base.copy(), v_slots.Lists(base)
    fast.squeeze_explicit(cap)
    v_slots.squeeze_explicit(ref, cap)
    assert _same(fast, ref)


def test_a_grid_over_the_cap_is_refused_not_squeezed():
    base = SlotSchedule(4, 8, *offsets(4, ZB))
    for squeeze in (base.copy().squeeze_explicit, base.copy().squeeze_derived):
        with pytest.raises(ValueError, match="does not fit the cap"):
            squeeze(base.peak() - 2)


def test_the_grid_is_the_slots_inverse():
    sched = SlotSchedule(5, 9, *offsets(5, ZB))
    sched.squeeze_explicit(sched.peak())
    sched.squeeze_derived(sched.peak())
    occ, slot = sched.occ, sched.slot
    rank = np.minimum(np.arange(10), 9 - np.arange(10))
    ops = np.arange(slot.size)
    assert (occ[rank[ops // 3 % 10], slot] == ops).all()
    assert np.count_nonzero(occ >= 0) == slot.size


def test_an_input_in_a_later_slot_is_refused():
    raw = SlotSchedule(3, 2, *offsets(3, ZB), tighten=False)
    slot = raw.slot.copy()
    slot[0], slot[3] = slot[3], slot[0]  # stage 1's F before stage 0's
    with pytest.raises(ValueError, match="tighten"):
        v_rows.tighten(raw.occ, slot, 6)
