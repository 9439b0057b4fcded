"""The period extension (`v_period`) gives exactly the orders of the full squeeze, and falls back to it
where its check fails."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from primuspp.algorithms import v_family, v_period, v_proof, v_rows, vshape
from primuspp.schedule.array_order import ArrayOrder
from tests.algorithms.v_orders import BLOCKS
from tests.algorithms.v_orders import columns as _columns
from tests.algorithms.v_orders import same as _same

BOTH = ("derived", "explicit")


def _full(p: int, block: vshape.Block, cap: int, variants=BOTH):
    """`squeeze(k)` for `v_period.extended`: the full squeeze for k microbatches, memoised."""
    offs, memo = vshape.offsets(p, block), {}

    def squeeze(k: int):
        if k not in memo:
            memo[k] = vshape._squeezed(p, k, block.name, offs, cap, variants)[1]
        return memo[k]

    return squeeze


def _caps(p: int, block: vshape.Block) -> list[int]:
    """The V family's caps the block fits, and for p < 16 also its own peak (the tightest cap) and one
    above it."""
    peak = vshape.block_peak(p, 4 * p, block)
    family = {c for c in (2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3)) if c >= peak}  # in live chunks
    return sorted(family | {peak, peak + 1} if p < 16 else family)


# p, and how many m past each start to compare (every m for small p, a few for large ones)
GRID = ((2, 12), (3, 12), (4, 8), (5, 6), (6, 6), (7, 4), (8, 4), (10, 2), (12, 2), (16, 1), (24, 1))


@pytest.mark.parametrize("p,count", GRID)
def test_extension_equals_full_squeeze(p, count):
    extended = 0
    for block in BLOCKS:
        for cap in _caps(p, block):
            squeeze = _full(p, block, cap)
            first, second = v_period.starts(cap)
            # past the first start, past the second (where the first fails), and well past both (p <= 8)
            ms = {*range(first + 1, first + 1 + count), *range(second + 1, second + 1 + count)}
            if p <= 8:
                ms.add(2 * second + 5)
            for m in sorted(ms):
                found = v_period.extended(squeeze, m, cap, ratio=1)
                if found is None:  # the check failed at every start that applies: the caller squeezes m
                    continue
                extended += 1
                assert found[0] in (first, second)
                assert _same(found[1], squeeze(m)), (p, block.name, cap, m, found[0])
    assert extended  # the extension is taken for most blocks and caps (see test_extension_is_taken)


@pytest.mark.parametrize("p", [4, 8, 13, 24])
def test_extension_is_taken_for_the_families_own_blocks(p):
    # zbv's block at 2p live chunks and v-half's at p + 2 settle by m0 = cap + 2 (explicit and derived)
    for block, cap in ((vshape.ZB, 2 * p), (vshape.HALF, 2 * ((p + 2) // 2))):
        m0 = v_period.starts(cap)[0]
        found = v_period.extended(_full(p, block, cap), 3 * (m0 + 1), cap)
        assert found is not None and found[0] == m0, (p, block.name)


@pytest.mark.parametrize("p,m", [(1, 40), (2, 30), (3, 40), (8, 64), (8, 100), (16, 128)])
def test_squeezed_orders_same_with_and_without_period(p, m):
    # the whole entry point, as v_family calls it (default ratio): the same peak and orders either way
    paths = set()
    for block in (vshape.ZB, vshape.ZB_TIGHT, vshape.HALF, vshape.MIN):
        for cap in sorted({2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3)}):
            report: dict = {}
            fast = vshape.squeezed_orders(p, m, block, cap, both=True, report=report)
            full = vshape.squeezed_orders(p, m, block, cap, both=True, period=False)
            assert fast[0] == full[0] and _same(fast[1], full[1]), (p, m, block.name, cap, report)
            assert set(report) == {"squeeze"}
            paths.add(report["squeeze"].split()[0])
    assert "period" in paths  # m is long enough for the extension at the V family's caps


def test_squeezed_orders_reports_the_period_path():
    # the first start, 18, plus the proof's lead (`v_proof.lead`: 1 for zb's block alone at p = 8)
    report: dict = {}
    vshape.squeezed_orders(8, 64, vshape.ZB, 16, both=False, report=report)
    assert report == {"squeeze": "period (from m = 19)"}
    vshape.squeezed_orders(8, 32, vshape.ZB, 16, both=False, report=report)
    assert report == {"squeeze": "full"}


def test_fallback_where_the_order_never_settles():
    # "min-b2" at p = 6 under its own peak (9 live chunks), derived squeeze: the order for m + 1 is never the
    # order for m with one period inserted, so the check fails at both starts and the full squeeze runs
    block = next(b for b in vshape.CATALOG if b.name == "min-b2")
    p, cap, m = 6, 9, 100
    squeeze = _full(p, block, cap, ("derived",))
    for m0 in v_period.starts(cap):
        assert v_period.insertion(squeeze(m0)[0][1], squeeze(m0 + 1)[0][1]) is None
    assert v_period.extended(squeeze, m, cap) is None
    report: dict = {}
    fast = vshape.squeezed_orders(p, m, block, cap, both=False, report=report)
    assert report == {"squeeze": "full (period check failed)"}
    full = vshape.squeezed_orders(p, m, block, cap, both=False, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def _ranks(order: ArrayOrder) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    first, kind, stage, mb = (np.asarray(c) for c in _columns(order))
    return [(kind[a:b], mb[a:b], stage[a:b]) for a, b in pairwise(first.tolist())]


def test_check_rejects_hand_made_pairs():
    p, cap = 4, 8
    squeeze = _full(p, vshape.ZB, cap, ("explicit",))
    m0 = v_period.starts(cap)[0]
    a, b = squeeze(m0)[0][1], squeeze(m0 + 1)[0][1]
    at = v_period.insertion(a, b)
    assert at is not None
    assert _columns(v_period.extend(a, b, at, m0, m0 + 1)) == _columns(b)  # one period: b itself
    ranks = _ranks(b)
    # one microbatch wrong in the inserted period of rank 0
    kind, mb, stage = (c.copy() for c in ranks[0])
    mb[at[0]] += 1
    assert v_period.insertion(a, ArrayOrder.from_ranks([(kind, mb, stage), *ranks[1:]])) is None
    # two ops of rank 1 swapped in the suffix (a rank's ops are distinct)
    kind, mb, stage = (c.copy() for c in ranks[1])
    j = len(kind) - 3
    for col in (kind, mb, stage):
        col[j], col[j + 1] = col[j + 1], col[j]
    assert v_period.insertion(a, ArrayOrder.from_ranks([ranks[0], (kind, mb, stage), *ranks[2:]])) is None
    # six ops appended at the end of every rank: a match, but with no whole period of overlap (the insertion
    # is only at the very end, not inside a steady state)
    short = [(k[:-6], x[:-6], s[:-6]) for k, x, s in _ranks(a)]
    assert v_period.insertion(ArrayOrder.from_ranks(short), a) is None
    # a rank with a different length
    assert v_period.insertion(a, ArrayOrder.from_ranks([tuple(c[:-1] for c in ranks[0]), *ranks[1:]])) is None
    # a different number of ranks
    assert v_period.insertion(a, ArrayOrder.from_ranks(ranks[1:])) is None


def test_a_settling_that_looks_done_fails_the_check():
    # "min-b0" at p = 18, cap 21, explicit squeeze: the one-period check (d = 1) passes at m = 35, yet the
    # order changes otherwise than by a period between m = 38 and 39, so the extension from 35 with d = 1
    # is wrong at m = 40; the check with d = gap(35) = 11 fails there, and the extension falls back
    block = next(b for b in v_family.AUTO_BLOCKS if b.name == "min-b0")
    p, cap = 18, 21
    squeeze = _full(p, block, cap, ("explicit",))
    a, b = squeeze(35)[0][1], squeeze(36)[0][1]
    at = v_period.insertion(a, b)
    assert at is not None
    assert _columns(v_period.extend(a, b, at, 35, 40)) != _columns(squeeze(40)[0][1])
    assert v_period.gap(35) == 11 and v_period.insertion(a, squeeze(46)[0][1], 11) is None
    assert v_period.starts(cap)[1] == 35
    assert v_period.extended(squeeze, 40, cap, ratio=1) is None


def test_an_order_that_repeats_every_other_microbatch_fails_the_check():
    # "min-b2" at p = 13, cap 16, explicit squeeze: the order for m + 1 is never the order for m with one
    # period inserted (the cool-down alternates with the parity of m), but the order for m + 4 is the order
    # for m with four: an even d would pass the check, the prime gap does not, and the extension falls back
    block = next(b for b in vshape.CATALOG if b.name == "min-b2")
    p, cap = 13, 16
    squeeze = _full(p, block, cap, ("explicit",))
    m0 = v_period.starts(cap)[0]
    a = squeeze(m0)[0][1]
    assert v_period.insertion(a, squeeze(m0 + 1)[0][1]) is None
    assert v_period.insertion(a, squeeze(m0 + 4)[0][1], 4) is not None
    d = v_period.gap(m0)
    assert d % 2 and v_period.insertion(a, squeeze(m0 + d)[0][1], d) is None
    assert v_period.extended(squeeze, 60, cap, ratio=1) is None


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_insertion_equals_its_reference(p):
    # the all-ranks passes against the rank-by-rank form: real pairs (which pass or fail the check), each
    # with one op changed in the prefix, the inserted periods or the suffix
    for block in (vshape.MIN, vshape.HALF, vshape.ZB, *v_family.AUTO_BLOCKS[1:3]):
        cap = 2 * p if block is vshape.ZB else vshape.estimated_peak(p, block) + 1
        squeeze = _full(p, block, cap)
        m0 = v_period.starts(cap)[0]
        for d in (1, 2, v_period.gap(m0)):
            pairs = list(zip(squeeze(m0), squeeze(m0 + d), strict=True)) if squeeze(m0) else []
            for (_, a), (_, b) in pairs:
                ranks = _ranks(b)
                tries = [b]
                for r, where in ((0, 0), (p - 1, len(ranks[p - 1][0]) // 2), (p // 2, -1)):
                    kind, mb, stage = (c.copy() for c in ranks[r])
                    mb[where] += 1
                    tries.append(ArrayOrder.from_ranks([*ranks[:r], (kind, mb, stage), *ranks[r + 1 :]]))
                for other in tries:
                    at = v_period.insertion(a, other, d)
                    assert at == v_period.insertion_reference(a, other, d), (p, block.name, d)
                    if at is not None:  # where it passes, the extension by d is the longer order
                        assert _columns(v_period.extend(a, other, at, m0, m0 + d)) == _columns(other)


def test_gap_is_a_prime_near_a_quarter():
    assert [v_period.gap(m0) for m0 in (1, 12, 18, 35, 66, 130, 514)] == [3, 3, 5, 11, 17, 37, 131]


def test_check_with_several_periods():
    p, cap = 8, 16
    squeeze = _full(p, vshape.ZB, cap, ("explicit",))
    m0 = v_period.starts(cap)[0]
    d = v_period.gap(m0)
    a, b = squeeze(m0)[0][1], squeeze(m0 + d)[0][1]
    at = v_period.insertion(a, b, d)
    assert d > 1 and at is not None
    assert _columns(v_period.extend(a, b, at, m0, m0 + d)) == _columns(b)
    assert v_period.insertion(a, b, d - 1) is None  # the lengths do not match
    # the inserted periods not one microbatch apart: the second one's microbatches shifted by one more
    ranks = _ranks(b)
    kind, mb, stage = (c.copy() for c in ranks[0])
    mb[at[0] + 6 : at[0] + 12] += 1
    assert v_period.insertion(a, ArrayOrder.from_ranks([(kind, mb, stage), *ranks[1:]]), d) is None


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13])
def test_raw_peak_is_the_repeated_blocks_peak(p):
    # the period path's peak (from the F and B slots alone) against the constructed repetition's
    for block in BLOCKS:
        fo, bo = vshape.offsets(p, block)
        for m in (1, 2, 3, 7, 4 * p + 1):
            raw = vshape.SlotSchedule(p, m, fo, bo, tighten=False)
            assert v_rows.raw_peak(p, m, fo, bo) == raw.peak() == raw.peak_reference(), (p, m, block.name)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 9, 12, 17])
def test_raw_peak_cut_to_the_steady_state_equals_the_whole_repetition(p):
    # `raw_peak` cuts m to `steady_microbatches`: the same peak as the whole m's grid, on both sides of the
    # cut and far past it (including offsets whose backward turn was widened or slid)
    for block in (*BLOCKS, vshape.Block("odd", 2, 3, 1, 2, 2, 1), vshape.Block("far", 5, 1, 1, 5, 4, 2)):
        fo, bo = vshape.offsets(p, block)
        cut = v_rows.steady_microbatches(fo, bo)
        for m in sorted({1, 2, cut - 2, cut - 1, cut, cut + 1, cut + 5, 2 * cut + 3}):
            if m >= 1:
                want = v_rows.raw_peak_grid(p, m, fo, bo)
                assert v_rows.raw_peak(p, m, fo, bo) == want, (p, m, block.name)
        # the peak no longer changes from the cut on (what the cut rests on)
        peaks = [v_rows.raw_peak_grid(p, m, fo, bo) for m in range(1, cut + 8)]
        assert len(set(peaks[cut - 1 :])) == 1, (p, block.name)


def _late(p: int, block: vshape.Block, cap: int) -> bool:
    """`v_period.late` as `vshape.squeezed_orders` asks it."""
    peak = v_rows.raw_peak(p, 3 * (v_period.starts(cap)[0] + 1), *vshape.offsets(p, block))
    unit = block.f0 == block.f1 == block.b1 == block.b0 == 1
    return v_period.late(vshape.estimated_peak(p, block), peak, unit)


@pytest.mark.parametrize("p", [5, 8, 11, 14, 6, 7, 16])
def test_v_min_skips_the_first_start_exactly_where_it_fails(p):
    # v-min's block at its cap: the first start fails the check where the raw repetition peaks above the
    # steady state's estimate (p = 2 mod 3), and only there is it skipped; the orders are the full squeeze's
    block, cap = vshape.MIN, 2 * ((p + 4) // 3)
    first, second = v_period.starts(cap)
    squeeze = _full(p, block, cap, (block.squeeze,))
    fails = v_period._extended_from(squeeze, first, 3 * (second + 1)) is None
    assert _late(p, block, cap) == fails == (p % 3 == 2), p
    m = 3 * (second + 1)
    report: dict = {}
    fast = vshape.squeezed_orders(p, m, block, cap, both=False, report=report)
    start = (second if fails else first) + v_proof.lead(p, block.name)
    assert report == {"squeeze": f"period (from m = {start})"}
    full = vshape.squeezed_orders(p, m, block, cap, both=False, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def test_a_late_first_start_with_m_too_short_for_the_second_squeezes_in_full():
    p, block = 8, vshape.MIN
    cap = 2 * ((p + 4) // 3)
    first, second = (start + v_proof.lead(p, block.name) for start in v_period.starts(cap))
    m = v_proof.RATIO * (first + 1)  # long enough for the first start, not for the second
    assert v_period.applies(m, first, v_proof.RATIO) and not v_period.applies(m, second, v_proof.RATIO)
    report: dict = {}
    fast = vshape.squeezed_orders(p, m, block, cap, both=False, report=report)
    assert report == {"squeeze": "full (the first start would fail, m is too short for the second)"}
    full = vshape.squeezed_orders(p, m, block, cap, both=False, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


@pytest.mark.parametrize(
    "name,p,cap,fails",
    [
        ("half", 10, 20, True),  # both squeezes under a cap 8 above the estimate: the first start fails
        ("half-f13", 10, 20, False),  # the same shape passes: only a block of unit spacings is predicted
        ("min", 8, 14, True),  # v-min's block at p = 2 mod 3 under a wider cap than v-min's: predicted
        ("min", 9, 10, False),
    ],
)
def test_only_a_unit_block_above_its_estimate_skips_the_first_start(name, p, cap, fails):
    # the prediction reads the block alone (never the cap or the squeezes); where it is wrong it costs time
    block = next(b for b in BLOCKS if b.name == name)
    assert _late(p, block, cap) == (name == "min" and p % 3 == 2)
    first, second = v_period.starts(cap)
    squeeze = _full(p, block, cap)
    assert (v_period._extended_from(squeeze, first, 3 * (second + 1)) is None) == fails
    m = 3 * (second + 1)
    fast = vshape.squeezed_orders(p, m, block, cap, both=True)
    full = vshape.squeezed_orders(p, m, block, cap, both=True, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def test_offsets_are_kept_but_each_call_gets_new_lists():
    fo, bo = vshape.offsets(8, vshape.ZB)
    want = (list(fo), list(bo))
    fo[0], bo[-1] = 99, 99  # a caller changing its lists changes nobody else's
    assert vshape.offsets(8, vshape.ZB) == want == tuple(map(list, vshape._offsets.__wrapped__(8, vshape.ZB)))
    assert vshape.estimated_peak(8, vshape.ZB) == vshape.estimated_peak.__wrapped__(8, vshape.ZB)
