"""The longer of the period extension's two short squeezes copied from the shorter one, with a proof.

`v_period.extended` needs the squeezed orders for m0 and m1 = m0 + d microbatches. Squeezing both costs
two runs of the move loops; here only the shorter one runs, and the longer one's moves are read off it
where a check proves them.

A squeeze (`v_squeeze.ExplicitRun`, `v_squeeze.DerivedRun`) visits the ops in their starting slot order
and moves each by what it reads: its inputs' slots, and on its rank the free slots and the headroom or
the walk of pending W's and live chunks over a stretch of slots (before the op for the explicit squeeze;
for the derived one from its earliest slot up to where its walk rejoins the stored walk). Every part of
that state is a function of the current slots: the free slots and the grid, the headroom and the walk
counts as the count at the stretch's start plus what the grid holds from there.

Write sigma for "one microbatch later": op o -> o + 3n (n stages), slot t -> t + 6. The starting grid of
m1 is that of m0 with d periods inserted at the first column T where the two differ (checked, `inserted`:
before T they agree, [T, T + 6d) repeats the columns before it, and from T + 6d on it is m0's grid under
sigma^d), and m0's grid repeats under sigma over [low, T). Take a pointer s (all ops starting before s
visited) with s - 6 >= low, and a window of L slots behind it. The window need not lie where the grid
repeats: its ops are compared as they are. The check, on m0's run (the state around the two latest
pointers is noted during the run, L chosen after it: the least whole periods that hold every read below,
else the widest noted):

1. the ops starting in [s - L, s + 6) are those starting in [s - 6 - L, s) one microbatch later, and their
   slots are those when the pointer stood at s - 6, plus 6; each rank's count at s - L is the one it had
   at s - 6 - L then;
2. the period's ops (starting in [s - 6, s)) read nothing before s - 6 - L, and no walk before s read from
   T on (so m0's and m1's runs agree up to s) nor the period's past T - 6 (so each copy's reads lie where
   m1's grid repeats);
3. no op from s on reads before s - L.

An op reads from one past its inputs' slots. An input outside the window (starting before it) is followed
along its copies one, two, ... microbatches later up to the first inside the window (those before it were
placed before s, the same in both runs; from it on 1. shifts them): each, less 6 slots per microbatch, must
sit no later than the op's binding input (exactly there where it is the binding input), so every copy of
the op reads from the same slot, shifted (`outside`). An op without inputs (a first-stage F) reads back
from its slot to a stop: the last slot without headroom (explicit), or the last full slot past the first
free one (derived). Where its rank holds such a stop in the window before the earliest slot any other op
of the stretch reads and before the stretch's own slots, no op writes there (each writes from its earliest
slot on, an F without inputs past its stop), so every such op stops at or after it.

By 1. and 2., in m1's run the state the period after s reads is the one the checked period read, under
sigma, so it makes the same moves 6 slots later, and so on for d periods (by induction: what each reads
lies where m1's grid repeats). Then m1's state at s + 6d is m0's at s under sigma^d, from s - L on (the
window by the induction, the rest is the unvisited grid, equal by the insertion), and by 3. each later op
of m1 reads what its counterpart in m0 read: m1's moves are m0's before s, the checked period's moves d
times, then m0's moves from s on, d microbatches later. Where the check fails at every pointer tried, the
caller runs the longer squeeze. tests/algorithms/test_v_proof.py holds the result equal to the squeeze.

For the period extension (`squeezed` with `build` False) the longer schedule is not finished where its final
order is shown to be the shorter one's with d periods inserted (`final_insertion`: the F and B grids after
the derived squeeze, and the W queue at the insertion column; the argument is there): the extension needs
only the shorter final grid and the column where the periods go (`v_period.Inserted`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from primuspp.algorithms import v_rows, v_squeeze
from primuspp.algorithms.v_period import Inserted

if TYPE_CHECKING:
    from primuspp.algorithms.vshape import SlotSchedule

_F, _B, _W = 0, 1, 2

#: periods between two pointers the check tries (the latest that fit first)
STEP = 2
#: pointers tried before giving up
TRIES = 2
#: `outside`'s fills of slots it does not compare
_LEAST, _MOST = v_rows.INT(np.iinfo(v_rows.INT).min), v_rows.INT(np.iinfo(v_rows.INT).max)
#: `longer`'s bound where no op of a stretch has inputs
UNBOUNDED = 1 << 62
#: an extension runs where m is at least this many times m0 + 1: it squeezes one short order (m0), the
#: longer one is copied where proven
RATIO = 2


#: microbatches past `v_period.starts` the check needs to find a window before the shorter order's grid
#: stops repeating, per block: (a fraction of p, a margin, a least), where both squeezes run. Measured at
#: the V family's caps: zb's block with both squeezes (its derived-only variant needs more) needs 2-4 at
#: p = 4..17 and 23..29, 5-7 at p = 18..22 and 30, more than 7 from 31 (where the formula falls short, the
#: longer short squeeze runs too; at the default effort both squeezes take the period path only up to about
#: p = 21); half's p / 4.3 and min's p / 5.8 or less (p = 4..64), half's with up to 3 more at small p;
#: others p / 2
LEADS = {"zb": (1 / 6, 1, 4), "half": (1 / 3, 2, 0), "min": (1 / 5, 2, 0)}
#: the same where only the block's own squeeze runs (zb's: explicit, then derived), per block: (a divisor
#: of p, a margin). zb's block at its cap 2p needs exactly p // 6 there: at every p from 4 to 33, at p = 34,
#: 37, 40, 43, 47, 50, 53, 57, 61, 64, 96, 128, 160, 192, 224 and 256, p // 6 - 1 fails the check and
#: p // 6 passes it (so no margin: one too few costs the longer squeeze, not a wrong order)
OWN_LEADS = {"zb": (6, 0)}


def lead(p: int, block: str, both: bool = True) -> int:
    """Microbatches added to `v_period.starts` for `block` (a name) at p (`LEADS`; `OWN_LEADS` where only
    the block's own squeeze runs, `both=False`): too few and the check finds no window (the longer order
    is then squeezed too), each one more costs about 1 / m0 of the shorter squeeze."""
    if not both and block in OWN_LEADS:
        divisor, margin = OWN_LEADS[block]
        return p // divisor + margin
    fraction, margin, least = LEADS.get(block, (1 / 2, 2, 0))
    return max(least, math.ceil(p * fraction) + margin)


def _repeats(grid: np.ndarray, shift: int) -> np.ndarray:
    """Per column t (all but the last 6): whether column t + 6 is column t one microbatch later."""
    a, b = grid[:, :-6], grid[:, 6:]
    return np.where(a >= 0, b == a + shift, b < 0).all(axis=0)


def inserted(short: np.ndarray, long: np.ndarray, n: int, d: int) -> int | None:
    """T where grid `long` is grid `short` with d periods inserted (see the module docstring), else None."""
    shift = 3 * n
    ws, wl = short.shape[1], long.shape[1]
    width = min(ws, wl)
    differ = np.flatnonzero((short[:, :width] != long[:, :width]).any(axis=0))
    if differ.size == 0 or differ[0] < 6:
        return None
    t = int(differ[0])
    if t + 6 * d + (ws - t) > wl:
        return None
    middle = long[:, t - 6 : t + 6 * d]
    if not _repeats(middle, shift).all():
        return None
    tail = short[:, t:]
    later = long[:, t + 6 * d : t + 6 * d + ws - t]
    if not np.array_equal(later, np.where(tail >= 0, tail + shift * d, -1)):
        return None
    if (long[:, t + 6 * d + ws - t :] >= 0).any():
        return None
    return t


def longer(
    run,
    grid: np.ndarray,
    long_grid: np.ndarray,
    n: int,
    d: int,
    inputs: tuple[np.ndarray, np.ndarray],
    counts_at: Callable,
    stop_at: Callable,
    long_ops: np.ndarray,
    size: int,
) -> np.ndarray | None:
    """Run `run` (the shorter squeeze) whole; the longer one's slot array (`long_ops`: its visit list)
    where the check of the module docstring passes, else None. `counts_at()`: the count rows of every
    rank (headroom, or pending W's and live chunks per slot); `stop_at(r, a, b)`: a function of (lo, c)
    saying whether rank r now holds a stop in [lo, c) (within [a, b)); `size`: the longer slot array's
    length (its ops, then the trailing -1)."""
    ext = np.asarray(run.ext)
    initial = ext.copy()
    ops = run.columns[0]
    start = initial[ops]  # each visit position's starting slot: non-decreasing
    first, second = inputs
    earliest_start = np.maximum(initial[first], initial[second])  # the later input's
    has_input = earliest_start >= 0
    upto = inserted(grid, long_grid, n, d)
    if upto is None or not has_input.any():
        run.run(0, run.size)
        return None
    gap = int((start - earliest_start)[has_input].max())
    widest = 6 * (-(-(gap + 6) // 6))  # a window that holds every op's later input
    breaks = np.flatnonzero(~_repeats(grid[:, :upto], 3 * n))
    low = int(breaks[-1]) + 1 if breaks.size else 0  # columns [low, upto) repeat
    ranks = run.columns[-1]
    stopping = sorted(set(ranks[~has_input].tolist()))  # ranks with ops without inputs

    kind = start.dtype.type  # (a search key of the array's own type: no conversion of the array)

    def at(x: int) -> int:
        return int(start.searchsorted(kind(x)))

    cells = 3 * n  # ops per microbatch: op = mb * cells + cell
    count = (len(ext) - 1) // cells
    starts_by_mb = initial[:-1].reshape(count, cells)
    by_mb = ext[:-1].reshape(count, cells)  # (read once the run is over)

    def outside(xs: np.ndarray, binding: np.ndarray, binds: np.ndarray, window_start: int) -> bool:
        """Whether inputs `xs`, starting before `window_start` (outside the compared window), keep the
        reads of their ops' copies: each copy of x one, two, ... microbatches later up to the first that
        starts inside the window (those before it were placed before s, the same in both runs; from it on
        the induction shifts them) sits no later than the op's binding slot `binding` that many periods
        later (exactly there where x is the binding input, `binds`). Along each cell's chain of copies
        the slot less 6 per microbatch is compared through suffix maxima and minima."""
        mb = xs // cells
        cell = xs - mb * cells
        if int(mb.max()) + 1 >= count:
            return False  # a chain that ends before the window: nothing to induce from
        last = (starts_by_mb < window_start).sum(axis=0)  # each chain's first copy inside the window
        reach = last[cell]
        top = int(reach.max())
        if top >= count:
            return False
        # the copies compared, latest first: the latest first copy inside down to one after the earliest x
        rows = np.arange(top, int(mb.min()), -1, dtype=v_rows.INT)
        level = by_mb[rows]
        level -= (6 * rows)[:, None]
        keep = rows[:, None] <= last
        high = np.where(keep, level, _LEAST)
        np.maximum.accumulate(high, axis=0, out=high)  # the latest copies' maximum from each row on
        low = np.where(keep, level, _MOST)
        np.minimum.accumulate(low, axis=0, out=low)
        at_mb = top - 1 - mb  # row mb + 1
        limit = binding - 6 * mb
        if (high[at_mb, cell] > limit).any():
            return False
        return not (binds & (low[at_mb, cell] != limit)).any()

    def bound(lo: int, hi: int, window_start: int | None = None) -> int | None:
        """The earliest slot the ops of visit positions [lo, hi) read (one past their inputs' slots), or
        None where an input starting before `window_start` (if given) does not keep its op's copies'
        reads (`outside`)."""
        keep = has_input[lo:hi]
        if not keep.any():
            return UNBOUNDED
        a, b = first[lo:hi], second[lo:hi]
        binding = np.maximum(ext[a], ext[b])
        if window_start is not None:  # both inputs' far ones at once
            x = np.concatenate((a, b))
            both = np.concatenate((binding, binding))
            far = np.concatenate((keep, keep))
            far &= x < len(ext) - 1
            far &= initial[x] < window_start
            if far.any():
                x, both = x[far], both[far]
                if not outside(x, both, ext[x] == both, window_start):
                    return None
        return int(binding[keep].min()) + 1

    latest = upto - 6
    # the checked period and what follows it must lie where the grid repeats; the window behind it need
    # not (its ops are compared as they are: their identities and slots)
    candidates = sorted(x for x in range(latest, latest - 6 * STEP * TRIES, -6 * STEP) if x - 6 >= low)
    done, reach, seen = 0, -1, []
    for s in candidates:  # run to each candidate pointer, noting the state around it
        before, now = at(s - 6), at(s)
        top = min(widest, s - 6)  # the widest window noted
        if now == before or before < done:
            continue
        reach = max(reach, _read(run.run(done, before)))
        then = _State(ext, ops, at(s - 6 - top), now, counts_at, stop_at, stopping, s - 6 - top, s - 6, s)
        period_reach = _read(run.run(before, now))
        done, reach = now, max(reach, period_reach)
        if reach >= upto or period_reach + 6 >= upto:
            break  # a walk read where the two grids differ: later pointers read further
        after = _State(ext, ops, at(s - top), at(s + 6), counts_at, stop_at, stopping, s - top, s, s + 6)
        seen.append((s, top, before, now, then, after))
    run.run(done, run.size)
    for s, top, before, now, then, after in reversed(seen):  # the latest first: the most settled
        check = (at, then, after, before, now, run.size, ops, n, bound, has_input, ranks)
        for window in _windows(s, top, bound(before, now), bound(now, run.size)):
            if _holds(s, window, check):
                return _slots(ext, ops, start, before, now, d, n, long_ops, size)
    return None


class _State:
    """What the check compares of a run at one pointer: the slots of the ops of visit positions [lo, hi)
    (those starting from slot a on), each rank's counts at the slots [a, b] and, for `ranks`, its stops
    in [a, c) (`stop_at`: a function of (lo, c') saying whether one lies in [lo, c'))."""

    def __init__(self, ext, ops, lo, hi, counts_at, stop_at, ranks, a, b, c) -> None:
        self.lo, self.slots, self.a = lo, ext[ops[lo:hi]].copy(), a
        self.counts = [_copied(row, a, b + 1) for row in counts_at()]
        self.stops = {r: stop_at(r, a, c) for r in ranks}  # the ranks of ops without inputs

    def counts_at(self, x: int) -> tuple:
        return tuple(row[x - self.a] for row in self.counts)


def _copied(row, a: int, b: int):
    """row[a:b] as a sequence of ints that no later write changes (a bytearray's slice is a copy; an int
    memoryview's is not)."""
    part = row[a:b]
    return part.tolist() if isinstance(part, memoryview) else part


def _windows(s: int, top: int, period_from: int, rest_from: int) -> list[int]:
    """Windows to check at pointer s: the least that holds what the period and the rest read (whole
    periods, at least one), then the widest noted."""
    need = max(s - 6 - period_from, s - rest_from, 6)
    least = 6 * (-(-need // 6))
    return [w for w in dict.fromkeys((least, top)) if w <= top]


def _holds(s: int, window: int, check) -> bool:
    """The check of the module docstring at pointer s with a window of `window` slots. `check`: (at, the
    state at s - 6, the state at s, the checked period's visit positions, the run's size, its ops, n,
    `bound`, which ops have inputs, their ranks)."""
    at, then, after, before, now, size, ops, n, bound, has_input, ranks = check
    w0, w1, nxt = at(s - 6 - window), at(s - window), at(s + 6)
    if nxt - w1 != now - w0 or not np.array_equal(ops[w1:nxt], ops[w0:now] + 3 * n):
        return False
    if not np.array_equal(after.slots[w1 - after.lo :], then.slots[w0 - then.lo :] + 6):
        return False
    if after.counts_at(s - window) != then.counts_at(s - 6 - window):
        return False
    for lo, hi, start, state, last in (
        (before, now, s - 6 - window, then, s - 6),
        (now, size, s - window, after, s),
    ):
        reads = bound(lo, hi, start)
        if reads is None or reads < start:
            return False
        free = ~has_input[lo:hi]  # ops without inputs: their ranks must hold a stop in the window
        if any(not state.stops[r](start, min(reads, last)) for r in set(ranks[lo:hi][free].tolist())):
            return False
    return True


def _read(reach) -> int:
    return -1 if reach is None else reach


def _slots(
    ext: np.ndarray,
    ops: np.ndarray,
    start: np.ndarray,
    before: int,
    now: int,
    d: int,
    n: int,
    long_ops: np.ndarray,
    size: int,
) -> np.ndarray | None:
    """The longer squeeze's slot array (with its trailing -1): the shorter one's moves before visit
    position `now`, the checked period's [before, now) d more times, then the shorter one's moves from
    `now` on, d microbatches later. None where the visit lists do not line up so (they do where the grids
    do: a guard)."""
    shift = 3 * n
    head, rest = ops[:now], ops[now:]
    copies = ops[before:now][None, :] + shift * np.arange(1, d + 1)[:, None]
    expected = np.concatenate((head, copies.ravel(), rest + shift * d))
    if not np.array_equal(long_ops, expected):
        return None
    out = np.full(size, -1, dtype=v_rows.INT)
    out[head] = ext[head]
    moved = ext[ops[before:now]] - start[before:now]
    out[copies.ravel()] = (start[before:now][None, :] + 6 * np.arange(1, d + 1)[:, None] + moved).ravel()
    out[rest + shift * d] = ext[rest] + 6 * d
    return out


def explicit_counts(run) -> tuple[Callable, Callable]:
    """`counts_at` and `stop_at` of an `ExplicitRun` (headroom; a stop: a slot without headroom)."""

    def counts_at() -> list:
        return [*run.lows, *(run.highs or ())]

    def stop_at(r: int, a: int, b: int) -> Callable[[int, int], bool]:
        low = bytes(run.lows[r][a:b])  # copies: the run goes on
        high = None if run.highs is None else bytes(run.highs[r][a:b])

        def any_in(lo: int, c: int) -> bool:  # a slot without headroom (low and high digit 0) in [lo, c)
            end = c - a
            j = low.find(0, max(lo - a, 0), end) if end > 0 else -1
            while j >= 0 and high is not None and high[j]:
                j = low.find(0, j + 1, end)
            return j >= 0

        return any_in

    return counts_at, stop_at


def derived_counts(run, cap: int) -> tuple[Callable, Callable]:
    """`counts_at` and `stop_at` of a `DerivedRun` (pending W's and live chunks; a stop: a full slot past
    a free one)."""

    def counts_at() -> list:
        return [*run.counts.pends, *run.counts.lives]

    def stop_at(r: int, a: int, b: int) -> Callable[[int, int], bool]:
        kinds = bytes(run.rows[r][a:b])  # copies: the run goes on
        lives = run.counts.lives[r][a:b]
        if isinstance(lives, bytearray):  # counts in bytes: the cap is a byte to find
            full = None
        else:  # int32 counts
            lives, full = None, np.flatnonzero(np.asarray(lives) == cap)

        def any_in(lo: int, c: int) -> bool:  # a free slot from lo on, then a full one before c
            f = kinds.find(v_squeeze._FREE, max(lo - a, 0))
            end = c - a
            if f < 0 or f >= end:
                return False
            if lives is not None:
                return lives.find(cap, f, end) >= 0
            j = int(full.searchsorted(f))
            return j < full.size and full[j] < end

        return any_in

    return counts_at, stop_at


def _derived_start(sched: SlotSchedule, cap: int):
    """(the derived squeeze's run, its slot array, the stripped grid) as `SlotSchedule.squeeze_derived`
    sets them up (W's stripped; counts in bytes up to cap 253, int32 above), or None where the stored walk
    already breaks the cap."""
    ranks = np.asarray(sched.rank, dtype=np.int64)
    slot = sched._arrays()[0].copy()
    slot[_W::3] = -1
    occ = v_rows.grid(slot, ranks, sched.n, sched.p, sched.width)
    ops, kind, stage, rank = v_rows.columns(occ, ranks, sched.n, (_F, _B))
    first, second = v_rows.inputs(ops, kind, stage, sched.n, len(slot))
    ext = np.append(slot, v_rows.INT(-1))
    storage = v_squeeze._ByteCounts if cap <= 253 else v_squeeze._IntCounts
    run = v_squeeze.DerivedRun.start(memoryview(ext), cap, (ops, first, second, rank), occ, storage)
    return None if run is None else (run, ext, occ)


def _derived_finish(sched: SlotSchedule, ext: np.ndarray, occ: np.ndarray | None = None) -> None:
    """The moved F's and B's, W's re-placed (`SlotSchedule.squeeze_derived`'s end); `occ`: their grid, if
    at hand (the W's are placed in it)."""
    slot = ext[:-1]
    if occ is None:
        occ = _grid(sched, slot)
    v_rows.fill_ws(occ, slot)
    sched._set_arrays(slot, occ)


def _grid(sched: SlotSchedule, slot: np.ndarray) -> np.ndarray:
    return v_rows.grid(slot, np.asarray(sched.rank, dtype=np.int64), sched.n, sched.p, sched.width)


def final_insertion(
    short_fb: np.ndarray, short_final: tuple[np.ndarray, np.ndarray], long_fb: np.ndarray, n: int, d: int
) -> int | None:
    """The column c where the longer schedule's final grid (W's placed) is the shorter one's with d periods
    inserted (`inserted`'s sense: the same before c, then [c - 6, c) d times, one, two, ... microbatches
    later, then the rest d microbatches later); None where this is not shown. `short_fb`, `long_fb`: the
    two F and B grids after the derived squeeze, before the W placement; `short_final`: the shorter one's
    slots and grid after it.

    Shown by two checks: the longer F and B grid is the shorter one with d periods inserted at column c
    (`inserted`: the same before c, then d copies of [c - 6, c) each one microbatch later, then the rest d
    microbatches later), and on every rank the W queue before slot c (the B's before c whose W runs from c
    on) is the queue before c - 6, one microbatch later. Why that suffices: the W placement
    (`v_rows.fill_ws`) walks each rank's slots in order, each free slot running the W of the oldest pending
    B; its state before a slot is that queue. Before c the two grids agree, so the longer walk meets c with
    the shorter one's queue there, which is the queue of c - 6 one microbatch later; the first inserted
    period is [c - 6, c) one microbatch later, so the walk places its W's one microbatch and 6 slots later
    than the shorter walk did there and leaves the queue of c one microbatch later, which the next period
    meets in turn; after d periods the rest (the shorter grid from c on, d microbatches later) meets the
    queue of c d microbatches later and is walked as the shorter one was, shifted. So the final grid is the
    shorter final grid with d periods inserted at c, and each rank's order (its ops by slot) is the shorter
    order with its ops of [c - 6, c) inserted d times before its first op from c on (six of them: the
    columns are full, checked)."""
    c = inserted(short_fb, long_fb, n, d)
    slot, grid = short_final
    if c is None or not (grid[:, c - 6 : c] >= 0).all():
        return None
    b, w = slot[_B::3], slot[_W::3]  # each (microbatch, stage)'s B and W slots
    now = ((b < c) & (w >= c)).reshape(-1, n)
    then = ((b < c - 6) & (w >= c - 6)).reshape(-1, n)
    if now[0].any() or then[-1].any() or not np.array_equal(now[1:], then[:-1]):
        return None
    return c


def explicit(short: SlotSchedule, long: SlotSchedule, cap: int, d: int) -> bool:
    """`squeeze_explicit(cap)` on both schedules (`long` d microbatches longer), the longer one's moves
    copied where the check proves them; whether they were."""
    run = v_squeeze.ExplicitRun.start(short, cap, short._arrays())
    if run is None:
        short.squeeze_explicit(cap)
        long.squeeze_explicit(cap)
        return False
    ranks = run.ranks
    long_grid = long._arrays()[1]
    long_ops = v_rows.columns(long_grid, ranks, long.n, (_F, _B, _W))[0]
    counts_at, stop_at = explicit_counts(run)
    columns = run.columns
    size = len(long._arrays()[0]) + 1
    slots = longer(
        run,
        run.grid,
        long_grid,
        short.n,
        d,
        (columns[2], columns[3]),
        counts_at,
        stop_at,
        long_ops,
        size,
    )
    run.finish(short)
    if slots is None:
        long.squeeze_explicit(cap)
        return False
    slot = slots[:-1]
    long._set_arrays(slot, v_rows.grid(slot, ranks, long.n, long.p, long.width))
    return True


def derived(short: SlotSchedule, long: SlotSchedule, cap: int, d: int, build: bool = True) -> bool:
    """`squeeze_derived(cap)` on both schedules, the longer one's moves copied where the check proves
    them; whether they were. `build` False: where `final_insertion` also proves the longer final order the
    shorter one with d periods inserted, the longer schedule is left unfinished (no W's placed) and
    `long.inserted` says where (`v_period.Inserted`)."""
    started = _derived_start(short, cap)
    if started is None:
        short.squeeze_derived(cap)
        long.squeeze_derived(cap)
        return False
    run, ext, occ = started
    ranks = np.asarray(long.rank, dtype=np.int64)
    stripped = long._arrays()[0].copy()
    stripped[_W::3] = -1
    long_grid = v_rows.grid(stripped, ranks, long.n, long.p, long.width)
    long_ops = v_rows.columns(long_grid, ranks, long.n, (_F, _B))[0]
    counts_at, stop_at = derived_counts(run, cap)
    columns = run.columns
    slots = longer(
        run,
        occ,
        long_grid,
        short.n,
        d,
        (columns[1], columns[2]),
        counts_at,
        stop_at,
        long_ops,
        len(stripped) + 1,
    )
    short_fb = _grid(short, ext[:-1])  # the moved F's and B's (W's stripped), before the W placement
    _derived_finish(short, ext, short_fb if build or slots is None else short_fb.copy())
    if slots is None:
        long.squeeze_derived(cap)
        return False
    long_fb = _grid(long, slots[:-1])
    if not build:
        c = final_insertion(short_fb, short._arrays(), long_fb, short.n, d)
        if c is not None:
            long.inserted = Inserted(short._arrays()[1], c, short.n)
            return True
    _derived_finish(long, slots, long_fb)
    return True


def squeezed(
    p: int, m0: int, m1: int, name: str, offs, cap: int, variants: tuple[str, ...], build: bool = True
):
    """`vshape._squeezed(p, m, ...)[1]` for m = m0 and m1 (m0 < m1): the named squeezed orders, empty where
    the block needs more than `cap`; the longer one's moves copied from the shorter one's where proven.
    `build` False: a longer order proven the shorter one with periods inserted is not built but given as
    `v_period.Inserted` (`derived`), as `v_period.extended` takes it, and the shorter one beside it is not
    built either (None: the `Inserted` holds its grid)."""
    from primuspp.algorithms.vshape import SlotSchedule, _squeezed

    short = SlotSchedule(p, m0, *offs, keep_raw=True)  # the longer one tightened from it where it can
    bases = short, SlotSchedule(p, m1, *offs, like=short.tightened_from())
    short.raw = None
    if any(base.peak() > cap for base in bases):
        return _squeezed(p, m0, name, offs, cap, variants)[1], _squeezed(p, m1, name, offs, cap, variants)[1]
    out: tuple[list, list] = ([], [])
    for i, variant in enumerate(variants):
        last = i == len(variants) - 1
        short, long = (base if last else base.copy() for base in bases)
        if variant == "explicit":
            explicit(short, long, cap, m1 - m0)
        derived(short, long, cap, m1 - m0, build)
        if long.inserted is None:
            out[0].append((f"{name}/{variant}", short.order()))
            out[1].append((f"{name}/{variant}", long.order()))
        else:
            out[0].append((f"{name}/{variant}", None))
            out[1].append((f"{name}/{variant}", long.inserted))
    return out
