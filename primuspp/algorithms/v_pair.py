"""The period extension's two short squeezes with their common prefix squeezed once.

`v_period.extended` squeezes the repeated block for a short m0 and for m1 = m0 + d, which differ only
from the slot where the longer one's extra microbatches start (the first grid column where the two
differ, T). Both squeezes visit their ops in slot order, so they begin with the same ops; what a move
decides depends on the state it reads, and while that lies before T it is the same in both:

- the explicit squeeze (`v_squeeze.ExplicitRun`) reads and writes only slots before the op's own (its
  inputs' slots, the free-slot flags and the headroom on [e, cur], the headroom being a count over the
  slots up to each one), so every op visited before T decides the same in both;
- the derived squeeze (`v_squeeze.DerivedRun`) walks past the op's slot until the new walk rejoins the
  stored one, so a move may read beyond T; `DerivedRun.run` returns the furthest slot its walks read, and
  the prefix is shared only where that stayed before T (else the short squeeze runs whole, as before).

So the longer squeeze runs its prefix (the ops before T), the shorter one takes that state for the slots
before T (`adopt`) and its own beyond, and both run the rest. The orders are those of two separate
squeezes (`vshape._squeezed`, which stays the reference; tests/algorithms/test_v_pair.py holds them
equal over blocks, p and caps). At zbv's m0 = 2p + 2 the prefix is about 45 % of the shorter squeeze's
moves.
"""

from __future__ import annotations

import numpy as np

from primuspp.algorithms import v_rows, v_squeeze
from primuspp.algorithms.vshape import SlotSchedule

_F, _B, _W = 0, 1, 2

Named = list[tuple[str, object]]

#: the derived squeeze shares the ops up to this many slots before the first slot where the two differ
#: (half's and min's blocks: the last ops' walks read 2 to 5 slots past it; zb's none)
MARGIN = 12


def first_difference(a: np.ndarray, b: np.ndarray) -> int:
    """The first column where two grids (ranks x slots) differ, or the narrower width."""
    width = min(a.shape[1], b.shape[1])
    differ = np.flatnonzero((a[:, :width] != b[:, :width]).any(axis=0))
    return int(differ[0]) if differ.size else width


def _prefix(short: np.ndarray, long: np.ndarray, slots: np.ndarray, upto: int) -> int:
    """How many of the visit lists' first ops both share and visit before slot `upto` (`slots`: the longer
    list's ops' slots, in visit order, so non-decreasing)."""
    i = int(np.searchsorted(slots, upto))
    return i if i <= len(short) and np.array_equal(short[:i], long[:i]) else 0


def explicit(short: SlotSchedule, long: SlotSchedule, cap: int) -> None:
    """`squeeze_explicit(cap)` on both, the common prefix once."""
    a = v_squeeze.ExplicitRun.start(short, cap, short._arrays())
    b = v_squeeze.ExplicitRun.start(long, cap, long._arrays())
    if a is None or b is None or (a.highs is None) != (b.highs is None):
        short.squeeze_explicit(cap)
        long.squeeze_explicit(cap)
        return
    upto = first_difference(a.grid, b.grid)
    ops = b.columns[0]
    i = _prefix(a.columns[0], ops, b.ext[ops], upto)
    b.run(0, i)
    a.adopt(b, upto, ops[:i])
    a.run(i, a.size)
    b.run(i, b.size)
    a.finish(short)
    b.finish(long)


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


def _derived_finish(sched: SlotSchedule, ext: np.ndarray) -> None:
    """The moved F's and B's, W's re-placed (`SlotSchedule.squeeze_derived`'s end)."""
    slot = ext[:-1]
    occ = v_rows.grid(slot, np.asarray(sched.rank, dtype=np.int64), sched.n, sched.p, sched.width)
    v_rows.fill_ws(occ, slot)
    sched._set_arrays(slot, occ)


def derived(short: SlotSchedule, long: SlotSchedule, cap: int) -> None:
    """`squeeze_derived(cap)` on both, the common prefix once where the prefix's walks stayed before the
    first slot where the two differ."""
    sa, sb = _derived_start(short, cap), _derived_start(long, cap)
    if sa is None or sb is None:
        short.squeeze_derived(cap)
        long.squeeze_derived(cap)
        return
    (a, ext_a, occ_a), (b, ext_b, occ_b) = sa, sb
    upto = first_difference(occ_a, occ_b)
    ops = b.columns[0]
    # the ops up to a little before that slot: the walks of the last ones may read a few slots on
    i = _prefix(a.columns[0], ops, ext_b[ops], upto - MARGIN)
    if b.run(0, i) < upto:
        a.adopt(b, upto, ops[:i])
        a.run(i, a.size)
    else:  # a walk read past the common part: the shorter one runs whole
        a.run(0, a.size)
    b.run(i, b.size)
    _derived_finish(short, ext_a)
    _derived_finish(long, ext_b)


def squeezed(
    p: int,
    m0: int,
    m1: int,
    name: str,
    offs: tuple[list[int], list[int]],
    cap: int,
    variants: tuple[str, ...],
) -> tuple[Named, Named]:
    """`vshape._squeezed(p, m, ...)[1]` for m = m0 and m1 (m0 < m1): the named squeezed orders, empty where
    the block needs more than `cap`."""
    from primuspp.algorithms.vshape import _squeezed

    bases = SlotSchedule(p, m0, *offs), SlotSchedule(p, m1, *offs)
    if any(base.peak() > cap for base in bases):
        return _squeezed(p, m0, name, offs, cap, variants)[1], _squeezed(p, m1, name, offs, cap, variants)[1]
    out: tuple[Named, Named] = ([], [])
    for i, variant in enumerate(variants):
        last = i == len(variants) - 1
        short, long = (base if last else base.copy() for base in bases)
        if variant == "explicit":
            explicit(short, long, cap)
        derived(short, long, cap)
        out[0].append((f"{name}/{variant}", short.order()))
        out[1].append((f"{name}/{variant}", long.order()))
    return out
