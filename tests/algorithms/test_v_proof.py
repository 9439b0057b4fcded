"""The longer short squeeze copied from the shorter one where the check proves it (`v_proof`) equals the
squeeze itself; where the check fails (the window does not fit, a state differs, a stop is missing) the
longer one is squeezed and the result is the same."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from primuspp.algorithms import v_period, v_proof, v_squeeze, vshape
from primuspp.schedule.timing_arrays import UNIT_STARTS
from tests.algorithms.v_orders import BLOCKS
from tests.algorithms.v_orders import same as _same


def _separate(p, m0, m1, block, cap, variants):
    offs = vshape.offsets(p, block)
    return tuple(vshape._squeezed(p, m, block.name, offs, cap, variants)[1] for m in (m0, m1))


@pytest.fixture
def proofs(monkeypatch) -> list[bool]:
    """Whether each `v_proof.explicit` / `v_proof.derived` call copied the longer squeeze."""
    said: list[bool] = []
    for name in ("explicit", "derived"):
        real = getattr(v_proof, name)
        monkeypatch.setattr(v_proof, name, lambda *a, real=real: said.append(real(*a)) or said[-1])
    return said


def _check(p, block, cap, m0, variants) -> None:
    m1 = m0 + v_period.gap(m0)
    got = v_proof.squeezed(p, m0, m1, block.name, vshape.offsets(p, block), cap, variants)
    want = _separate(p, m0, m1, block, cap, variants)
    assert _same(got[0], want[0]) and _same(got[1], want[1]), (block.name, p, cap, m0, variants)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
@pytest.mark.parametrize("p", [2, 3, 5, 8, 11])
def test_copied_equals_squeezed(block, p, proofs):
    own = vshape.estimated_peak(p, block)
    for cap in sorted({2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3), own, own + 3}):
        for variants in (("derived", "explicit"), (block.squeeze,)):
            for m0 in {v_period.starts(cap)[0], v_period.starts(cap)[0] + v_proof.lead(p, block.name)}:
                _check(p, block, cap, m0, variants)


def test_both_sides_of_the_proof(proofs):
    # zbv's block at p = 12, cap 24: from the first start the explicit squeeze's repeating stretch is too
    # short for the check's window (the longer one is squeezed; the derived one is copied), from the first
    # start plus the lead both are copied
    p, block, cap = 12, vshape.ZB, 24
    start = v_period.starts(cap)[0]
    _check(p, block, cap, start, ("explicit",))
    assert proofs == [False, True]
    proofs.clear()
    _check(p, block, cap, start + v_proof.lead(p, block.name, both=False), ("explicit",))
    assert proofs == [True, True]


@pytest.mark.parametrize("p", [6, 12, 13, 17, 18])
def test_the_own_squeezes_lead_is_the_least(p, proofs):
    # zb's block alone (explicit, then derived) at zbv's cap 2p: `OWN_LEADS`' p // 6 is proven, one fewer
    # is not (the longer explicit squeeze then runs too, with the same orders)
    block, cap = vshape.ZB, 2 * p
    lead = v_proof.lead(p, block.name, both=False)
    assert lead == p // 6
    _check(p, block, cap, v_period.starts(cap)[0] + lead, ("explicit",))
    assert proofs == [True, True]
    proofs.clear()
    _check(p, block, cap, v_period.starts(cap)[0] + lead - 1, ("explicit",))
    assert proofs[0] is False


@pytest.mark.parametrize(
    ("block", "p", "cap"), [(vshape.ZB, 24, 48), (vshape.HALF, 20, 22), (vshape.MIN, 19, 14)]
)
def test_the_v_familys_blocks_are_copied(block, p, cap, proofs):
    # zbv, v-half and v-min at their caps (2p, 2 ((p + 2) // 2), 2 ((p + 4) // 3) live chunks)
    _check(p, block, cap, v_period.starts(cap)[0] + v_proof.lead(p, block.name, both=False), (block.squeeze,))
    assert proofs and all(proofs)


@pytest.mark.parametrize("part", ["counts", "stops"])
def test_a_failed_check_squeezes_the_longer_one(part, proofs, monkeypatch):
    # a state or a stop that does not match: nothing is copied, and the orders are still the squeezes'
    if part == "counts":  # one more count row, its value the number of states noted so far
        for name in ("explicit_counts", "derived_counts"):
            real = getattr(v_proof, name)

            def counts(*a, real=real):
                counts_at, stop_at = real(*a)
                calls = iter(range(1, 256))

                def more_rows():
                    return [*counts_at(), bytearray([next(calls)]) * 100_000]

                return more_rows, stop_at

            monkeypatch.setattr(v_proof, name, counts)
    else:  # no rank ever holds a stop
        for name in ("explicit_counts", "derived_counts"):
            real = getattr(v_proof, name)

            def no_stops(*a, real=real):
                return real(*a)[0], lambda r, x, y: lambda lo, c: False

            monkeypatch.setattr(v_proof, name, no_stops)
    p, block, cap = 10, vshape.ZB, 20
    _check(p, block, cap, v_period.starts(cap)[0] + v_proof.lead(p, block.name), ("explicit",))
    assert proofs == [False, False]


def test_inserted_grids():
    p, block = 6, vshape.ZB
    offs = vshape.offsets(p, block)
    short = vshape.SlotSchedule(p, 20, *offs)._arrays()[1]
    long = vshape.SlotSchedule(p, 25, *offs)._arrays()[1]
    t = v_proof.inserted(short, long, 2 * p, 5)
    assert t is not None and (short[:, :t] == long[:, :t]).all()
    assert v_proof.inserted(short, long, 2 * p, 4) is None  # the wrong number of periods
    tampered = long.copy()
    j = t + 6 * 5 + int(np.flatnonzero(long[0, t + 6 * 5 :] >= 0)[0])  # an op of rank 0 in the tail
    tampered[0, j] = -1
    assert v_proof.inserted(short, tampered, 2 * p, 5) is None
    assert v_proof.inserted(short, short, 2 * p, 1) is None  # nothing inserted


def test_squeezed_orders_copies_for_the_v_family(proofs):
    # the whole entry point at m = 8p: the orders are the full squeeze's, the longer short one copied
    for p, block, cap in ((16, vshape.ZB, 32), (12, vshape.HALF, 14)):
        report: dict = {}
        fast = vshape.squeezed_orders(p, 8 * p, block, cap, both=False, report=report)
        full = vshape.squeezed_orders(p, 8 * p, block, cap, both=False, period=False)
        assert report["squeeze"].startswith("period") and fast[0] == full[0] and _same(fast[1], full[1])
    assert proofs and all(proofs)


def _cuts(size: int) -> list[int]:
    return sorted({0, size // 7, size // 3, size // 2, 2 * size // 3, size})


@pytest.mark.parametrize(("block", "p", "m", "cap"), [(vshape.ZB, 7, 30, 14), (vshape.HALF, 9, 33, 12)])
def test_the_runs_state_is_a_function_of_the_slots(block, p, m, cap):
    # the proof's premise: at any point of a run, the free slots and headroom (explicit) and the rows, walk
    # counts and idle flags (derived) are those of the grid of the current slots
    from primuspp.algorithms import v_rows, v_squeeze

    sched = vshape.SlotSchedule(p, m, *vshape.offsets(p, block))
    run = v_squeeze.ExplicitRun.start(sched, cap, sched._arrays())
    ranks = run.ranks
    for lo, hi in pairwise(_cuts(run.size)):
        run.run(lo, hi)
        grid = v_rows.grid(run.ext[:-1], ranks, sched.n, p, sched.width)
        assert [bytes(x) for x in run.frees] == [row.tobytes() for row in (grid < 0).view(np.uint8)]
        room = cap - v_rows.profiles(grid)
        assert [bytes(x) for x in run.lows] == [row.tobytes() for row in room.astype(np.uint8)]
    run.finish(sched)
    derived, ext, _ = v_proof._derived_start(sched, cap)
    for lo, hi in pairwise(_cuts(derived.size)):
        derived.run(lo, hi)
        grid = v_rows.grid(ext[:-1], ranks, sched.n, p, sched.width)
        pend, live = v_rows.walks(grid)
        assert [list(x) for x in derived.counts.pends] == pend.tolist()
        assert [list(x) for x in derived.counts.lives] == live.tolist()
        code = np.where(grid < 0, v_squeeze._FREE, grid % 3 + 1)
        assert [list(x) for x in derived.rows] == code.tolist()
        free = np.concatenate((grid < 0, np.ones((p, 1), dtype=bool)), axis=1)
        assert [list(x) for x in derived.idles] == (free & (pend == 0)).astype(int).tolist()


@pytest.mark.parametrize("wide", [False, True])
def test_a_stop_is_found_in_the_noted_stretch_only(wide):
    # `stop_at` on made-up states (headroom in one or two digits; live counts in bytes or int32) against the
    # plain definition, for every query stretch in and around the noted one
    rng = np.random.default_rng(7)
    cap, width, a, b = (300 if wide else 5), 40, 9, 31
    room = rng.integers(0, 3, width) * (0 if wide else 1) + rng.integers(0, 3, width) * (255 if wide else 1)
    kinds = rng.choice([v_squeeze._FREE, v_squeeze._FK, v_squeeze._BK], width, p=[0.3, 0.4, 0.3])
    live = np.where(rng.random(width) < 0.3, cap, rng.integers(0, cap, width))
    lows, highs = (room % 255, room // 255) if wide else (room, None)

    class Counts:
        lives = (
            [memoryview(bytearray(live.astype(np.int32).tobytes())).cast("i")]
            if wide
            else [bytearray(live.astype(np.uint8).tobytes())]
        )

    class Run:
        pass

    run = Run()
    run.lows = [bytearray(np.asarray(lows, dtype=np.uint8).tobytes())]
    run.highs = None if highs is None else [bytearray(np.asarray(highs, dtype=np.uint8).tobytes())]
    run.rows = [bytearray(kinds.astype(np.uint8).tobytes())]
    run.counts = Counts()
    no_room = v_proof.explicit_counts(run)[1](0, a, b)
    full_after_free = v_proof.derived_counts(run, cap)[1](0, a, b)
    run.lows[0][:] = bytes(width)  # later writes do not reach the noted stretch
    run.rows[0][:] = bytes(width)
    if not wide:
        run.counts.lives[0][:] = bytes(width)
    hits = 0
    for lo in range(a - 2, b + 2):
        for c in range(a - 2, b + 3):
            zero = [t for t in range(max(lo, a), min(c, b)) if room[t] == 0]
            assert no_room(lo, c) == bool(zero), (lo, c)
            free = [t for t in range(max(lo, a), b) if kinds[t] == v_squeeze._FREE]
            full = [t for t in range(free[0], min(c, b)) if live[t] == cap] if free else []
            assert full_after_free(lo, c) == bool(full), (lo, c)
            hits += bool(zero) + bool(full)
    assert hits


def _unit_slots(order):
    return np.asarray(order.rows.memo[UNIT_STARTS]).tolist()


@pytest.mark.parametrize(
    ("block", "p", "cap", "variants"),
    [
        (vshape.ZB, 16, 32, ("explicit",)),
        (vshape.ZB, 9, 18, ("derived", "explicit")),
        (vshape.HALF, 12, 14, ("derived",)),
        (vshape.MIN, 19, 14, ("derived",)),
    ],
)
def test_an_unbuilt_longer_order_is_the_built_one(block, p, cap, variants):
    # `build` False: the longer final order proven the shorter one with d periods inserted, not built; its
    # grid with d periods inserted is the order built (and the full squeeze's), with k periods the extension
    # from the built pair
    m0 = v_period.starts(cap)[0] + v_proof.lead(p, block.name, len(variants) > 1)
    m1 = m0 + v_period.gap(m0)
    offs = vshape.offsets(p, block)
    built = v_proof.squeezed(p, m0, m1, block.name, offs, cap, variants)
    short, longer = v_proof.squeezed(p, m0, m1, block.name, offs, cap, variants, False)
    assert [n for n, _ in short] == [n for n, _ in built[0]] and all(a is None for _, a in short)
    assert _same(built[1], _separate(p, m0, m1, block, cap, variants)[1])
    d = m1 - m0
    for (_, a), (_, b), (_, want) in zip(built[0], longer, built[1], strict=True):
        assert isinstance(b, v_period.Inserted)
        assert _same([("x", b.extended(0))], [("x", a)])  # its grid is the shorter order
        at = v_period.insertion(a, want, d)
        assert at is not None  # the check it stands for holds
        for k in (d, 1, 2, 3 * d + 1):  # the longer order itself, and the extension to any m from the pair
            got, expected = b.extended(k), v_period.extend(a, want, at, m0, m0 + k)
            assert _same([("x", got)], [("x", expected)]) and _unit_slots(got) == _unit_slots(expected)


def _derived_grids(p, block, cap, m0, m1):
    """(the shorter F and B grid before the W placement, its final slots and grid, the longer F and B grid,
    n, d) of zb's block, explicit squeeze then derived, the longer one copied."""
    offs = vshape.offsets(p, block)
    short = vshape.SlotSchedule(p, m0, *offs, keep_raw=True)
    long = vshape.SlotSchedule(p, m1, *offs, like=short.tightened_from())
    v_proof.explicit(short, long, cap, m1 - m0)
    built = long.copy()
    assert v_proof.derived(short, built, cap, m1 - m0)  # the longer one copied and finished
    grid = built._arrays()[1]
    fb = np.where(grid % 3 == 2, -1, grid)  # its F's and B's (W's removed; a free cell stays -1)
    final = short._arrays()
    short_fb = np.where(final[1] % 3 == 2, -1, final[1])
    return short_fb, final, fb, 2 * p, m1 - m0


def test_final_insertion_checks_the_grid_and_the_w_queue():
    p, block, cap = 10, vshape.ZB, 20
    m0 = v_period.starts(cap)[0] + v_proof.lead(p, block.name, False)
    short_fb, (slot, grid), long_fb, n, d = _derived_grids(p, block, cap, m0, m0 + v_period.gap(m0))
    c = v_proof.final_insertion(short_fb, (slot, grid), long_fb, n, d)
    assert c is not None and c == v_proof.inserted(short_fb, long_fb, n, d)
    assert v_proof.final_insertion(short_fb, (slot, grid), long_fb, n, d - 1) is None  # periods miscounted
    # a W queue that differs at c: one B before c whose W ran at c - 6 or later now waits past c (its W
    # moved to a free column far to the right, the grid left as it was): the check no longer holds
    b, w = slot[1::3], slot[2::3]
    late = np.flatnonzero((b < c - 6) & (w >= c - 6) & (w < c))  # pending at c - 6, run by c
    assert late.size
    moved = slot.copy()
    moved[3 * int(late[0]) + 2] = grid.shape[1] + 5
    assert v_proof.final_insertion(short_fb, (moved, grid), long_fb, n, d) is None
    # a column before c that is not full: the inserted periods would not be six ops a rank
    holed = grid.copy()
    holed[0, c - 1] = -1
    assert v_proof.final_insertion(short_fb, (slot, holed), long_fb, n, d) is None
