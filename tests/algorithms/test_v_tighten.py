"""`v_rows.tighten` by rank sweeps (`by_ranks`) and by slots from where they stop (`by_slots`) gives the
slots of the per-slot loop (`tighten_by_slots`) and of the readable reference
(`SlotSchedule._tighten_reference`)."""

from __future__ import annotations

import numpy as np
import pytest

from primuspp.algorithms import v_family, v_rows, vshape

BLOCKS = tuple(dict.fromkeys((*vshape.CATALOG, *v_family.AUTO_BLOCKS)))


def _raw(p: int, m: int, block: vshape.Block) -> tuple[np.ndarray, np.ndarray]:
    return vshape.SlotSchedule(p, m, *vshape.offsets(p, block), tighten=False)._arrays()


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13, 16])
@pytest.mark.parametrize("m", [0, 1, 2, 7, 30])
def test_tighten_equals_the_slot_loop_and_the_reference(p, m):
    for block in BLOCKS:
        slot, occ = _raw(p, m, block)
        by_slots = v_rows.tighten_by_slots(occ, slot, 2 * p)
        assert by_slots is not None
        assert np.array_equal(v_rows.tighten(occ, slot, 2 * p), by_slots), (p, m, block.name)
        ref = vshape.SlotSchedule(p, m, *vshape.offsets(p, block), tighten=False)
        ref._tighten_reference()
        assert by_slots.tolist() == ref.slot, (p, m, block.name)


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("sweeps", [0, 1, 3, 1000])
def test_any_sweep_budget_gives_the_same_slots(p, sweeps):
    # 0: the slot loop from the first wrong raw slot (all of it where the sweeps start up from 0); 1000:
    # the sweeps alone, to the end
    for block in BLOCKS:
        for m in (2, 2 * p + 2):
            slot, occ = _raw(p, m, block)
            for unit_slots in (True, False):
                report: dict = {}
                new = v_rows.by_ranks(occ, slot, 2 * p, sweeps, report, unit_slots)
                assert np.array_equal(new, v_rows.tighten_by_slots(occ, slot, 2 * p)), (p, m, block.name)
                assert report["sweeps"] <= sweeps
                if sweeps == 1000 and not unit_slots:
                    assert report["resumed"] is None  # settled by sweeps


@pytest.mark.parametrize("p", [4, 8, 16, 32])
def test_min_and_zb_settle_within_the_sweeps(p):
    # the measured counts `v_rows.SWEEPS` is set by: "min" down from the raw repetition in 1 sweep, zb's
    # block up from 0 in 2; no slot loop
    m = 2 * p + 2
    for block, down, sweeps in ((vshape.MIN, True, 1), (vshape.ZB, False, 2)):
        slot, occ = _raw(p, m, block)
        report: dict = {}
        v_rows.by_ranks(occ, slot, 2 * p, report=report)
        assert report == {"sweeps": sweeps, "down": down, "resumed": None}, (p, block.name)


@pytest.mark.parametrize("p", [8, 16])
def test_a_zigzag_block_goes_by_slots(p):
    # half's block needs about p / 2 sweeps: it has a chain of spacing 1 and is not nearly tight, so the
    # slot loop runs at once; made to sweep, after `SWEEPS` the check finds ops left wrong and the slot
    # loop runs from the first of them; the same result either way
    slot, occ = _raw(p, 2 * p + 2, vshape.HALF)
    ref = v_rows.tighten_by_slots(occ, slot, 2 * p)
    report: dict = {}
    assert np.array_equal(v_rows.by_ranks(occ, slot, 2 * p, report=report), ref)
    assert report == {"sweeps": 0, "down": False, "resumed": 0}
    assert np.array_equal(v_rows.by_ranks(occ, slot, 2 * p, report=report, unit_slots=False), ref)
    assert report["sweeps"] == v_rows.SWEEPS and report["resumed"] > 0  # the ops before it kept theirs


@pytest.mark.parametrize("p", [3, 8, 16, 32])
def test_the_blocks_that_sweep_settle_within_the_sweeps(p):
    # the measured rule of `by_ranks`: a block that sweeps (nearly tight, or no chain of spacing 1)
    # settles within `SWEEPS`; the others go by slots at once
    for block in BLOCKS:
        slot, occ = _raw(p, 2 * p + 2, block)
        report: dict = {}
        v_rows.by_ranks(occ, slot, 2 * p, report=report)
        assert report["resumed"] in (None, 0), (p, block.name, report)
        assert (report["resumed"] == 0) == (report["sweeps"] == 0), (p, block.name, report)


def test_an_input_in_a_later_slot_gives_none():
    p, m = 4, 6
    slot, occ = _raw(p, m, vshape.ZB)
    bad = slot.copy()
    op = (2 * 2 * p + 3) * 3 + 1  # microbatch 2, stage 3: its B before its F
    bad[op] = bad[op - 1] - 1
    assert v_rows.tighten(occ, bad, 2 * p) is None
    assert v_rows.tighten_by_slots(occ, bad, 2 * p) is None


@pytest.mark.parametrize("p", [2, 3, 5, 8, 16])
def test_a_longer_repetition_tightened_from_a_shorter_one_is_the_tightened_one(p):
    # `tighten_from`'s guess (here built op by op) is `tighten`'s slots where it solves the system; where it
    # does not (a short repetition not yet settled), `tighten_from` says None
    solved = unsolved = 0
    for block in BLOCKS:
        for m0 in (1, p, 2 * p + 2):
            slot0, occ0 = _raw(p, m0, block)
            new0 = v_rows.tighten(occ0, slot0, 2 * p)
            for d in (1, 2, 7):
                slot, occ = _raw(p, m0 + d, block)
                got = v_rows.tighten_from(new0, occ0, occ, slot, 2 * p)
                guess = _inserted(new0, occ0, occ, slot, 2 * p)
                if got is None:
                    unsolved += 1
                    assert not v_rows.solves(occ, slot, guess, 2 * p), (p, block.name, m0, d)
                else:
                    solved += 1
                    assert np.array_equal(got, guess), (p, block.name, m0, d)
                    assert np.array_equal(got, v_rows.tighten(occ, slot, 2 * p)), (p, block.name, m0, d)
    assert solved and unsolved  # both sides taken over the blocks


@pytest.mark.parametrize("p", [3, 8])
def test_a_slot_off_by_one_does_not_solve_the_system(p):
    slot, occ = _raw(p, 2 * p + 2, vshape.ZB)
    new = v_rows.tighten(occ, slot, 2 * p)
    assert v_rows.solves(occ, slot, new, 2 * p)
    for op in range(0, slot.size, 7):
        for step in (-1, 1):
            wrong = new.copy()
            wrong[op] += step
            assert not v_rows.solves(occ, slot, wrong, 2 * p), (op, step)


def _inserted(new0: np.ndarray, occ0: np.ndarray, occ: np.ndarray, slot: np.ndarray, n: int) -> np.ndarray:
    """`tighten_from`'s guess the plain way: t the first column where the raw grids differ, then each op
    the slot of its copy k microbatches earlier plus 6 k (k: its periods from t, 0 before t, at most d)."""
    cells = 3 * n
    d = (slot.size - new0.size) // cells
    width = occ0.shape[1]
    t = next((c for c in range(width) if occ0[:, c].tolist() != occ[:, c].tolist()), width)
    out = []
    for op, raw in enumerate(slot.tolist()):
        k = min(max((raw - t) // 6 + 1, 0), d)
        out.append(int(new0[op - cells * k]) + 6 * k if op - cells * k >= 0 else -1)
    return np.array(out, dtype=v_rows.INT)
