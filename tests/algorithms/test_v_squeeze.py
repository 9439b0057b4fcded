"""The fast squeezes of `v_squeeze` make exactly the moves of the readable references in `vshape`."""

from __future__ import annotations

import random

import numpy as np
import pytest

from primuspp.algorithms import v_family, v_rows, v_squeeze, vshape

BLOCKS = tuple(dict.fromkeys((*vshape.CATALOG, *v_family.AUTO_BLOCKS)))
SIZES = ((1, 1), (1, 4), (2, 3), (3, 5), (4, 8), (5, 2), (7, 17), (8, 24), (13, 9), (16, 40))


def _same(a: vshape.SlotSchedule, b: vshape.SlotSchedule) -> bool:
    return a.slot == b.slot and a.occ == b.occ


@pytest.mark.parametrize("p,m", SIZES)
def test_explicit_squeeze_matches_reference(p, m):
    for block in BLOCKS:
        base = vshape.SlotSchedule(p, m, *vshape.offsets(p, block))
        peak = base.peak()
        for cap in (peak, peak + 1, peak + 3):
            fast, ref = base.copy(), base.copy()
            fast.squeeze_explicit(cap)
            ref.squeeze_explicit_reference(cap)
            assert _same(fast, ref), (p, m, block.name, cap)


@pytest.mark.parametrize("p,m", SIZES)
@pytest.mark.parametrize("explicit_first", [False, True])
def test_derived_squeeze_closed_form_matches_reference(p, m, explicit_first):
    for block in BLOCKS:
        base = vshape.SlotSchedule(p, m, *vshape.offsets(p, block))
        peak = base.peak()
        for cap in (peak, peak + 1, peak + 3):
            start = base.copy()
            if explicit_first:
                start.squeeze_explicit_reference(cap)
            fast, ref = start.copy(), start.copy()
            fast.squeeze_derived(cap, min_cap=0)  # the closed form at every size
            ref.squeeze_derived_reference(cap)
            assert _same(fast, ref), (p, m, block.name, cap)


@pytest.mark.parametrize("p,m", SIZES)
@pytest.mark.parametrize("explicit_first", [False, True])
@pytest.mark.parametrize("counts", ["bytes", "wide", "lists"])
def test_derived_squeeze_walk_matches_reference(p, m, explicit_first, counts):
    # below the closed form's caps the re-walk runs: `v_squeeze.derived_bytes`, `derived_wide` (its int32
    # twin, forced here at small caps) or `derived_walk`
    for block in BLOCKS:
        base = vshape.SlotSchedule(p, m, *vshape.offsets(p, block))
        peak = base.peak()
        for cap in (peak, peak + 1, peak + 3):
            start = base.copy()
            if explicit_first:
                start.squeeze_explicit_reference(cap)
            fast, ref = start.copy(), start.copy()
            fast.squeeze_derived(cap, min_cap=10**9, counts=counts)
            ref.squeeze_derived_reference(cap)
            assert _same(fast, ref), (p, m, block.name, cap)


@pytest.mark.parametrize("p,m", SIZES)
def test_construction_matches_per_rank_reference(p, m):
    # the whole-grid passes (`v_rows`) against the per-rank helpers they replace
    for block in BLOCKS:
        fo, bo = vshape.offsets(p, block)
        raw = vshape.SlotSchedule(p, m, fo, bo, tighten=False)
        ref = vshape.SlotSchedule(p, m, fo, bo, tighten=False)
        ref._strip_ws()
        for r in range(p):
            ref._place_ws(r)
        assert _same(raw, ref), (p, m, block.name)
        assert raw.peak() == raw.peak_reference()
        ref._tighten_reference()
        fast = vshape.SlotSchedule(p, m, fo, bo)
        assert _same(fast, ref), (p, m, block.name)
        # the scalar loop `SlotSchedule` falls back to where an input shares its op's slot
        assert raw._tightened(np.array(raw.slot, dtype=v_rows.INT), raw._grid()) == ref.slot
        assert fast.peak() == fast.peak_reference()
        grid = fast._grid()
        assert grid.tolist() == fast.occ
        assert v_rows.profiles(grid).tolist() == [fast._profile(r) for r in range(p)]
        fast._strip_ws()
        pend, live = v_rows.walks(fast._grid())
        walks = [fast._walk(r) for r in range(p)]
        assert pend.tolist() == [w[0] for w in walks] and live.tolist() == [w[1] for w in walks]


@pytest.mark.parametrize("p,m", SIZES[::3])
def test_grid_is_the_slots_inverse(p, m):
    # `v_rows.grid` (by broadcasting for whole microbatches, by each op's stage otherwise) against a loop
    sched = vshape.SlotSchedule(p, m, *vshape.offsets(p, vshape.HALF))
    slot = sched._arrays()[0]
    stripped = slot.copy()
    stripped[2::3] = -1
    ranks = np.asarray(sched.rank, dtype=np.int64)
    for s in (slot, stripped, slot[: len(slot) - 3]):
        want = [[-1] * sched.width for _ in range(p)]
        for op, t in enumerate(s.tolist()):
            if t >= 0:
                want[sched.rank[op // 3 % sched.n]][t] = op
        got = v_rows.grid(s, ranks, sched.n, p, sched.width)
        assert got.tolist() == want and got.dtype == v_rows.INT


def test_over_the_cap_falls_back_to_the_reference():
    # a cap below the block's own peak: the fast paths decline and the references run
    base = vshape.SlotSchedule(6, 12, *vshape.offsets(6, vshape.ZB))
    cap = base.peak() - 2
    fast, ref = base.copy(), base.copy()
    assert not v_squeeze.squeeze_explicit(fast, cap)
    fast.squeeze_explicit(cap)
    ref.squeeze_explicit_reference(cap)
    assert _same(fast, ref)
    other = fast.copy()
    fast.squeeze_derived(cap, min_cap=0)
    other.squeeze_derived(cap)  # the byte and int32 walks decline too: the walk on lists runs
    ref.squeeze_derived_reference(cap)
    assert _same(fast, ref) and _same(other, ref)


def test_wide_caps_match_reference():
    # caps over 255 live chunks: the two-digit counts carry across digits
    p, m = 128, 132
    base = vshape.SlotSchedule(p, m, *vshape.offsets(p, vshape.ZB))
    cap = base.peak()
    assert cap > 255
    fast, ref = base.copy(), base.copy()
    fast.squeeze_explicit(cap)
    ref.squeeze_explicit_reference(cap)
    assert _same(fast, ref)
    start = fast.copy()
    fast.squeeze_derived(cap, min_cap=0)
    ref.squeeze_derived_reference(cap)
    assert _same(fast, ref)
    # below the closed form's cap: `derived_bytes` declines (cap > 253) and `derived_wide` runs
    occ = start._grid()
    assert not v_squeeze.derived_bytes(memoryview(np.array(start.slot, dtype=np.int32)), cap, None, occ)
    start.squeeze_derived(cap)
    assert cap < v_squeeze.CLOSED_FORM_CAP and _same(start, ref)


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4])
def test_explicit_squeeze_on_both_sides_of_the_one_digit_switch(offset, monkeypatch):
    # zb at p = 128, m = 126 peaks at 252: caps 252 and 253 run the one-digit headroom, 254 on the two
    # digits (the low one wraps at 255, 256)
    base = vshape.SlotSchedule(128, 126, *vshape.offsets(128, vshape.ZB))
    cap = base.peak() + offset
    assert base.peak() == 252
    ran = []
    for name in ("_explicit_one_digit", "_explicit_two_digits"):
        fn = getattr(v_squeeze, name)
        monkeypatch.setattr(v_squeeze, name, lambda *a, fn=fn, name=name: ran.append(name) or fn(*a))
    fast, ref = base.copy(), base.copy()
    fast.squeeze_explicit(cap)
    ref.squeeze_explicit_reference(cap)
    assert ran == ["_explicit_one_digit" if cap <= 253 else "_explicit_two_digits"]
    assert _same(fast, ref)


@pytest.mark.parametrize("block", [vshape.ZB, vshape.CATALOG[0]])
@pytest.mark.parametrize("extra", [254, 255, 256, 300, 509, 510, 511])
def test_explicit_two_digit_headroom_borrows_and_carries_like_the_reference(block, extra):
    # caps far over the peak at a small p: every headroom has a high digit, the low digits wrap both ways
    # (a low 0 with a high 1 is headroom 255, not none)
    base = vshape.SlotSchedule(8, 300, *vshape.offsets(8, block))
    cap = base.peak() + extra
    fast, ref = base.copy(), base.copy()
    fast.squeeze_explicit(cap)
    ref.squeeze_explicit_reference(cap)
    assert _same(fast, ref)


def test_lists_are_built_from_the_arrays_when_read_and_kept_when_edited():
    base = vshape.SlotSchedule(6, 10, *vshape.offsets(6, vshape.ZB))
    assert base._slot is None and base._occ is None  # construction leaves arrays only
    slot, occ = base._arrays()
    assert base.slot == slot.tolist() and base.occ == occ.tolist()
    other = base.copy()
    other._fresh = None  # what a method editing the lists does first: the arrays go, their content stays
    assert other._fresh is None and other._slot == slot.tolist() and other._occ == occ.tolist()
    other.squeeze_explicit_reference(base.peak())
    assert base._fresh is not None and base.slot == slot.tolist() and base.occ == occ.tolist()
    assert other.slot != base.slot and other._arrays()[0].tolist() == other.slot


def test_wide_walk_shifts_long_runs_and_fails_like_the_reference():
    # zb after the explicit squeeze at p = 40: long runs between idle slots (shifted, not walked), tried
    # moves that break the cap past their old slot (repaired); caps at and above the block's peak
    p, m = 40, 30
    base = vshape.SlotSchedule(p, m, *vshape.offsets(p, vshape.ZB))
    peak = base.peak()
    for cap in (peak, peak + 2):
        start = base.copy()
        start.squeeze_explicit(cap)
        ref = start.copy()
        ref.squeeze_derived_reference(cap)
        for counts in ("bytes", "wide"):
            fast = start.copy()
            fast.squeeze_derived(cap, min_cap=10**9, counts=counts)
            assert _same(fast, ref), (cap, counts)


def test_wide_counts_shift_and_search_like_a_plain_array():
    rng = random.Random(7)
    n = 300
    values = np.array([rng.randrange(0, 1200) for _ in range(n)], dtype=np.int64)
    member = np.array([rng.random() < 0.7 for _ in range(n)])
    wide = v_squeeze._Wide(values.copy(), member)
    plain = values.copy()
    for _ in range(3000):
        a = rng.randrange(n)
        b = rng.randrange(a, n + 1)
        d = rng.choice(v_squeeze._DELTAS)
        if (plain[a:b][member[a:b]] + d).min(initial=0) < 0:
            continue
        wide.shift(a, b, d)
        plain[a:b] += d
        k = rng.randrange(4)
        hits = [j for j in range(a, b) if member[j] and plain[j] <= k]
        assert wide.first_at_most(a, b, k) == (hits[0] if hits else -1)
        assert wide.last_at_most(a, b, k) == (hits[-1] if hits else -1)
    expected = [int(v) if ok else -1 for v, ok in zip(plain, member, strict=True)]
    assert [wide.get(j) for j in range(n)] == expected
