"""The period extension (`v_period`) gives exactly the orders of the full squeeze, and falls back to it
where its check fails."""

from __future__ import annotations

import hashlib
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.v import period as v_period
from primuspp.algorithms.v import rows as v_rows
from primuspp.algorithms.v.block_orders import raw_peak, squeezed, squeezed_orders
from primuspp.algorithms.v.blocks import (
    HALF,
    MIN,
    ZB,
    ZB_TIGHT,
    Block,
    _offsets,
    estimated_peak,
    offsets,
)
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.schedule.array_order import ArrayOrder
from tests.algorithms.v_orders import BLOCKS, CATALOG
from tests.algorithms.v_orders import columns as _columns
from tests.algorithms.v_orders import same as _same
from tests.oracles import v_insertion

BOTH = ("derived", "explicit")


def _full(p: int, block: Block, cap: int, variants=BOTH):
    """`squeeze(k)` for `v_period.extended`: the full squeeze for k microbatches, memoised."""
    offs, memo = offsets(p, block), {}

    def squeeze(k: int):
        if k not in memo:
            memo[k] = squeezed(p, k, block.name, offs, cap, variants)[1]
        return memo[k]

    return squeeze


def _caps(p: int, block: Block) -> list[int]:
    """The V family's caps the block fits, and for p < 16 also its own peak (the tightest cap) and one
    above it."""
    peak = SlotSchedule(p, 4 * p, *offsets(p, block), tighten=False).peak()
    family = {c for c in (2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3)) if c >= peak}  # in live chunks
    return sorted(family | {peak, peak + 1} if p < 16 else family)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 10), block=st.sampled_from(BLOCKS), pick=st.integers(0, 3), past=st.integers(1, 12))
def test_extension_equals_full_squeeze(p, block, pick, past):
    caps = _caps(p, block)
    cap = caps[pick % len(caps)]
    squeeze = _full(p, block, cap)
    first, second = v_period.starts(cap)
    m = (first if past % 2 else second) + past
    found = v_period.extended(squeeze, m, cap, ratio=1)
    if found is not None:  # else the check failed at every start that applies: the caller squeezes m
        assert found[0] in (first, second)
        assert _same(found[1], squeeze(m)), (p, block.name, cap, m, found[0])


@pytest.mark.parametrize("p", [4, 13])
def test_extension_is_taken_for_the_families_own_blocks(p):
    # zbv's block at 2p live chunks and v-half's at p + 2 settle by m0 = cap + 2 (explicit and derived)
    for block, cap in ((ZB, 2 * p), (HALF, 2 * ((p + 2) // 2))):
        m0 = v_period.starts(cap)[0]
        found = v_period.extended(_full(p, block, cap), 3 * (m0 + 1), cap)
        assert found is not None and found[0] == m0, (p, block.name)


@pytest.mark.parametrize("p,m", [(1, 40), (3, 40), (8, 100)])
def test_squeezed_orders_same_with_and_without_period(p, m):
    # the whole entry point, as v_family calls it (default ratio): the same peak and orders either way
    paths = set()
    for block in (ZB, ZB_TIGHT, HALF, MIN):
        for cap in sorted({2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3)}):
            report: dict = {}
            fast = squeezed_orders(p, m, block, cap, both=True, report=report)
            full = squeezed_orders(p, m, block, cap, both=True, period=False)
            assert fast[0] == full[0] and _same(fast[1], full[1]), (p, m, block.name, cap, report)
            assert set(report) == {"squeeze"}
            paths.add(report["squeeze"].split()[0])
    assert "period" in paths  # m is long enough for the extension at the V family's caps


def test_squeezed_orders_reports_the_period_path():
    report: dict = {}
    squeezed_orders(8, 64, ZB, 16, both=False, report=report)
    assert report == {"squeeze": "period (from m = 18)"}
    squeezed_orders(8, 32, ZB, 16, both=False, report=report)
    assert report == {"squeeze": "full"}


def test_fallback_where_the_order_never_settles():
    # "min-b2" at p = 6 under its own peak (9 live chunks), derived squeeze: the order for m + 1 is never the
    # order for m with one period inserted, so the check fails at both starts and the full squeeze runs
    block = next(b for b in CATALOG if b.name == "min-b2")
    p, cap, m = 6, 9, 100
    squeeze = _full(p, block, cap, ("derived",))
    for m0 in v_period.starts(cap):
        assert v_period.insertion(squeeze(m0)[0][1], squeeze(m0 + 1)[0][1]) is None
    assert v_period.extended(squeeze, m, cap) is None
    report: dict = {}
    fast = squeezed_orders(p, m, block, cap, both=False, report=report)
    assert report == {"squeeze": "full (period check failed)"}
    full = squeezed_orders(p, m, block, cap, both=False, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def _ranks(order: ArrayOrder) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    first, kind, stage, mb = (np.asarray(c) for c in _columns(order))
    return [(kind[a:b], mb[a:b], stage[a:b]) for a, b in pairwise(first.tolist())]


def test_check_rejects_hand_made_pairs():
    p, cap = 4, 8
    squeeze = _full(p, ZB, cap, ("explicit",))
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
    block = next(b for b in CATALOG if b.name == "min-b2")
    p, cap = 13, 16
    squeeze = _full(p, block, cap, ("explicit",))
    m0 = v_period.starts(cap)[0]
    a = squeeze(m0)[0][1]
    assert v_period.insertion(a, squeeze(m0 + 1)[0][1]) is None
    assert v_period.insertion(a, squeeze(m0 + 4)[0][1], 4) is not None
    d = v_period.gap(m0)
    assert d % 2 and v_period.insertion(a, squeeze(m0 + d)[0][1], d) is None
    assert v_period.extended(squeeze, 60, cap, ratio=1) is None


@pytest.mark.parametrize("p", [2, 5])
def test_insertion_equals_its_reference(p):
    # the all-ranks passes against the rank-by-rank form: real pairs (which pass or fail the check), each
    # with one op changed in the prefix, the inserted periods or the suffix
    for block in (MIN, HALF, ZB, *v_family.AUTO_BLOCKS[1:3]):
        cap = 2 * p if block is ZB else estimated_peak(p, block) + 1
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
                    assert at == v_insertion.insertion(a, other, d), (p, block.name, d)
                    if at is not None:  # where it passes, the extension by d is the longer order
                        assert _columns(v_period.extend(a, other, at, m0, m0 + d)) == _columns(other)


def test_gap_is_a_prime_near_a_quarter():
    assert [v_period.gap(m0) for m0 in (1, 12, 18, 35, 66, 130, 514)] == [3, 3, 5, 11, 17, 37, 131]


def test_check_with_several_periods():
    p, cap = 8, 16
    squeeze = _full(p, ZB, cap, ("explicit",))
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


@settings(max_examples=30, deadline=None)
@given(
    p=st.integers(1, 17),
    block=st.sampled_from((*BLOCKS, Block("odd", 2, 3, 1, 2, 2, 1), Block("far", 5, 1, 1, 5, 4, 2))),
)
def test_the_raw_peak_no_longer_changes_from_the_steady_microbatches_on(p, block):
    # `raw_peak` cuts m there (offsets whose backward turn was widened or slid included)
    fo, bo = offsets(p, block)
    cut = v_rows.steady_microbatches(fo, bo)
    peaks = {SlotSchedule(p, m, fo, bo, tighten=False).peak() for m in (cut, cut + 1, cut + 5, 2 * cut + 3)}
    assert peaks == {raw_peak(p, 2 * cut + 3, fo, bo)}, (p, block.name)


def _first_fails(squeeze, m0: int) -> bool:
    """Whether the extension from m0 fails the check (some pair of short orders is not an insertion)."""
    d = v_period.gap(m0)
    pairs = zip(squeeze(m0), squeeze(m0 + d), strict=True)
    return any(v_period.insertion(a, b, d) is None for (_, a), (_, b) in pairs)


def _late(p: int, block: Block, cap: int) -> bool:
    """`v_period.late` as `squeezed_orders` asks it."""
    peak = raw_peak(p, 3 * (v_period.starts(cap)[0] + 1), *offsets(p, block))
    unit = block.f0 == block.f1 == block.b1 == block.b0 == 1
    return v_period.late(estimated_peak(p, block), peak, unit)


@pytest.mark.parametrize("p", [5, 6, 7, 8, 14])
def test_v_min_skips_the_first_start_exactly_where_it_fails(p):
    # v-min's block at its cap: the first start fails the check where the raw repetition peaks above the
    # steady state's estimate (p = 2 mod 3), and only there is it skipped; the orders are the full squeeze's
    block, cap = MIN, 2 * ((p + 4) // 3)
    first, second = v_period.starts(cap)
    squeeze = _full(p, block, cap, (block.squeeze,))
    fails = _first_fails(squeeze, first)
    assert _late(p, block, cap) == fails == (p % 3 == 2), p
    m = 3 * (second + 1)
    report: dict = {}
    fast = squeezed_orders(p, m, block, cap, both=False, report=report)
    start = second if fails else first
    assert report == {"squeeze": f"period (from m = {start})"}
    full = squeezed_orders(p, m, block, cap, both=False, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def test_a_late_first_start_with_m_too_short_for_the_second_squeezes_in_full():
    p, block = 8, MIN
    cap = 2 * ((p + 4) // 3)
    first, second = v_period.starts(cap)
    m = v_period.MIN_RATIO * (first + 1)  # long enough for the first start, not for the second
    assert v_period.applies(m, first) and not v_period.applies(m, second)
    report: dict = {}
    fast = squeezed_orders(p, m, block, cap, both=False, report=report)
    assert report == {"squeeze": "full (the first start would fail, m is too short for the second)"}
    full = squeezed_orders(p, m, block, cap, both=False, period=False)
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
    assert (_first_fails(squeeze, first)) == fails
    m = 3 * (second + 1)
    fast = squeezed_orders(p, m, block, cap, both=True)
    full = squeezed_orders(p, m, block, cap, both=True, period=False)
    assert fast[0] == full[0] and _same(fast[1], full[1])


def test_offsets_are_kept_but_each_call_gets_new_lists():
    fo, bo = offsets(8, ZB)
    want = (list(fo), list(bo))
    fo[0], bo[-1] = 99, 99  # a caller changing its lists changes nobody else's
    assert offsets(8, ZB) == want == tuple(map(list, _offsets.__wrapped__(8, ZB)))
    assert estimated_peak(8, ZB) == estimated_peak.__wrapped__(8, ZB)


#: (p, m, block, cap, both squeezes, hash of the peak and the named orders) as the V family squeezed them
#: before its rewrite onto one grid (the period path, its fallback and the full squeeze among them)
PINNED = [
    (8, 64, "zb", 16, True, "054289433c78fdfc"),
    (8, 64, "half", 10, True, "92bb51d995d5a8cf"),
    (5, 40, "min", 6, True, "d9951e609c22f777"),
    (16, 128, "zb", 32, False, "7c7fe9b13d838b55"),
    (6, 100, "min-b2", 9, False, "911449e5f9f3144c"),
    (4, 9, "half-f13", 8, True, "e825d30e2caa8d00"),
    (2, 30, "zb-tight", 4, True, "e7f6c011776e8db7"),
    (13, 60, "min-b2", 16, False, "27a551538aad2349"),
]


@pytest.mark.parametrize("p,m,name,cap,both,want", PINNED)
def test_squeezed_orders_are_the_pinned_ones(p, m, name, cap, both, want):
    peak, orders = squeezed_orders(p, m, next(b for b in BLOCKS if b.name == name), cap, both=both)
    h = hashlib.sha256(repr(peak).encode())
    for label, order in orders:
        h.update(label.encode())
        h.update(np.asarray(order.first).tobytes())
        for k in ("kind", "stage", "mb"):
            h.update(np.asarray(order.rows[k], dtype=np.int64).tobytes())
    assert h.hexdigest()[:16] == want
