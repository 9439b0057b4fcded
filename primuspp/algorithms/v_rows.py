"""Whole-schedule array passes of `vshape.SlotSchedule`: the per-rank numpy helpers there, run for every
rank at once.

Why: the per-rank helpers (`_ws_slots`, `_profile`, `_walk`, `_place_ws`) cost a dozen numpy calls and a
list round trip each, p times per pass; at p = 64 that was a third of a V generation outside its move
loops. Here each is a handful of 2-D calls over the (ranks x slots) grid `occ`. The grid is rebuilt from
`slot` (one scatter) rather than from the nested lists, which numpy converts slowly.

tests/algorithms/test_v_squeeze.py holds each equal to its per-rank reference.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from primuspp.schedule.array_order import ArrayOrder

_F, _B, _W = 0, 1, 2


#: op ids, slots and counts fit 32 bits (3.1 M ops at p = 256, m = 2048); half the bytes of int64
INT = np.int32

#: `by_ranks` reads its inputs through an intp index below this many ops (12 % quicker at p = 64), through
#: the int32 one from there (a large build's memory)
WIDE_UNTIL = 1 << 21


def grid(slot: np.ndarray, rank_of_stage: np.ndarray, n: int, p: int, width: int) -> np.ndarray:
    """(p, width) grid of op ids (-1: free) from each op's slot (-1: not placed)."""
    occ = np.full((p, width), -1, dtype=INT)
    if slot.size % (3 * n):  # (not whole microbatches)
        ops = np.flatnonzero(slot >= 0)
        cell = rank_of_stage[_stage(ops, n)] * width  # one flat index per op: a 1-D scatter
        cell += slot[ops]
        occ.reshape(-1)[cell] = ops
        return occ
    # op (mb * n + stage) * 3 + kind goes to cell rank(stage) * width + its slot: by broadcasting
    cell = (slot.reshape(-1, n, 3) + (rank_of_stage * width)[None, :, None]).reshape(-1)
    placed = slot >= 0
    if placed.all():
        occ.reshape(-1)[cell] = np.arange(slot.size, dtype=INT)
    else:
        ops = np.flatnonzero(placed)
        occ.reshape(-1)[cell[ops]] = ops
    return occ


def _kind(ops: np.ndarray) -> np.ndarray:
    """op % 3 as op - 3 (op // 3): numpy divides by a constant quickly (libdivide), its remainder is a
    real division per element (3x slower); for op = -1 it gives 2."""
    q = ops // 3
    q *= 3
    return np.subtract(ops, q, out=q)


def _stage(ops: np.ndarray, n: int) -> np.ndarray:
    """op // 3 % n (each op's stage) by divisions only (`_kind`)."""
    key = ops // 3
    q = key // n
    q *= n
    return np.subtract(key, q, out=q)


def _codes(occ: np.ndarray) -> np.ndarray:
    """Each slot's kind (F 0, B 1, W 2) or 3 where free, as int8."""
    code = _kind(occ).astype(np.int8)  # (2 for a free slot, -1)
    code += occ < 0  # (an add, not a masked store: those branch on each element of a ragged mask)
    return code


def _before(mask: np.ndarray) -> np.ndarray:
    """Count of True in each row before each slot: (p, width + 1), a leading 0 column."""
    out = np.zeros((mask.shape[0], mask.shape[1] + 1), dtype=INT)
    np.cumsum(mask, axis=1, dtype=INT, out=out[:, 1:])
    return out


def _sum_before(step: np.ndarray) -> np.ndarray:
    """Sum of each row's int8 `step`s before each slot: (p, width + 1), a leading 0 column (one
    accumulate for what two `_before` counts and a difference would take)."""
    out = np.zeros((step.shape[0], step.shape[1] + 1), dtype=INT)
    out[:, 1:] = step
    np.cumsum(out[:, 1:], axis=1, out=out[:, 1:])
    return out


def _run(before_b: np.ndarray, free: np.ndarray) -> np.ndarray:
    """W's run before each slot when each free slot runs a pending one (a B makes one pending): free
    slots so far + the running minimum of (B's - free slots) so far (a queueing identity). The readable
    form of `_pending`, which the passes below use."""
    before_free = _before(free)
    lag = before_b - before_free
    np.minimum.accumulate(lag, axis=1, out=lag)
    lag += before_free
    return lag


def _pending(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pending W's before each slot, the running minimum m of (B's - free slots) so far), each (p, width
    + 1), when each free slot runs a pending W: by `_run`'s identity the W's run before slot t are
    free(t) + m(t), so the pending ones are B's(t) - free(t) - m(t); a free slot runs one where one is
    pending before it."""
    lag = _sum_before((code == _B).view(np.int8) - (code == 3).view(np.int8))
    low = np.minimum.accumulate(lag, axis=1)
    np.subtract(lag, low, out=lag)
    return lag, low


def fill_ws(occ: np.ndarray, slot: np.ndarray) -> None:
    """`vshape._ws_slots` on every row, applied: each free slot runs the W of the oldest completed B whose
    W has not run (rows are independent; the queueing identity is computed along axis 1)."""
    p = occ.shape[0]
    code = _codes(occ)
    pend = _pending(code)[0]
    takes = code == 3
    takes &= pend[:, :-1] > 0  # a free slot with a W pending before it
    del pend
    tr, tt = _cells(takes)  # row-major: by row, then slot
    br, bt = _cells(code == _B)
    count = np.bincount(tr, minlength=p)  # W's placed per row (never more than its B's)
    start = np.concatenate(([0], np.cumsum(np.bincount(br, minlength=p))[:-1]))
    keep = (np.arange(br.size) - start[br]) < count[br]  # each row's first `count` B's, oldest first
    ws = occ[br[keep], bt[keep]] + 1
    occ[tr, tt] = ws
    slot[ws] = tt


def _cells(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.nonzero(mask)` of a 2-D mask (rows, columns of its True cells, row-major), from the flat
    indices: a quarter of the time of the 2-D form."""
    cell = np.flatnonzero(mask)
    row = cell // mask.shape[1]
    cell -= row * mask.shape[1]
    return row, cell


def order_of(occ: np.ndarray, n: int) -> ArrayOrder:
    """Each rank's occupied slots of the grid `occ` (n stages) in slot order, as an `ArrayOrder`: columns
    straight from the op ids (op = 3 * (mb * n + stage) + kind), each node's slot kept as the timing's guess
    of its unit-cost start (`timing_arrays.UNIT_STARTS`, checked there)."""
    from primuspp.schedule.array_order import KINDS, ArrayOrder
    from primuspp.schedule.nodes import NodeKind
    from primuspp.schedule.timing_arrays import UNIT_STARTS

    codes = np.array([KINDS.index(k) for k in (NodeKind.F, NodeKind.B, NodeKind.W)], dtype=np.int8)
    placed = occ >= 0
    flat = occ[placed].astype(np.int64)  # row-major: rank by rank, each in slot order
    key = flat // 3
    flat -= 3 * key  # the kind: flat % 3 by divisions alone (numpy's remainder is a slow division)
    mb = key // n
    key -= n * mb  # the stage
    lengths = np.count_nonzero(placed, axis=1).tolist()
    order = ArrayOrder.from_flat(codes[flat], mb, key, lengths)
    order.rows.memo[UNIT_STARTS] = np.nonzero(placed)[1]
    return order


def profiles(occ: np.ndarray) -> np.ndarray:
    """`SlotSchedule._profile` of every row: (p, width + 1) live chunk activations during each slot (F
    counts from its slot, W until the end of its slot), then the level after the last slot."""
    code = _codes(occ)
    is_w = (code == _W).view(np.int8)
    # (F's - W's) up to and including each slot, then the W of the slot added back: one accumulate
    prof = _sum_before((code == _F).view(np.int8) - is_w)
    prof[:, :-1] = prof[:, 1:]
    prof[:, :-1] += is_w
    return prof


def walks(occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`SlotSchedule._walk` of every row (W's stripped): (pending B's, live chunks) before each slot, each
    (p, width + 1). Live chunks: F's - W's run = F's - free slots - the running minimum (`_pending`)."""
    code = _codes(occ)
    pend, low = _pending(code)
    live = _sum_before((code == _F).view(np.int8) - (code == 3).view(np.int8))
    live -= low
    return pend, live


def chunked(*arrays: np.ndarray):
    """The arrays as memoryviews, one chunk, for `for op, ... in zip(*chunk)`: iterating a memoryview makes
    each Python int as it is read, so no list of them is built (`tolist` cost ~20 ns an element, about a
    tenth of a V squeeze at p = 32-64, and at p = 256 hundreds of MB) and none is held."""
    yield [memoryview(np.ascontiguousarray(a)) for a in arrays]


def columns(occ: np.ndarray, rank_of_stage: np.ndarray, n: int, kinds: tuple[int, ...]):
    """The ops of the given kinds ordered by slot, then rank (`SlotSchedule._ops_by_slot`), with their
    kinds, stages and ranks: four arrays."""
    ops = occ.T.ravel()
    ops = ops[ops >= 0]
    kind = _kind(ops)
    if len(set(kinds)) < 3:  # one comparison (np.isin sorts)
        left = {_F, _B, _W}.difference(kinds)
        keep = kind != left.pop() if len(left) == 1 else np.isin(kind, kinds)
        ops, kind = ops[keep], kind[keep]
    stage = _stage(ops, n)
    return ops, kind, stage, rank_of_stage[stage]


def inputs(ops: np.ndarray, kind: np.ndarray, stage: np.ndarray, n: int, none: int):
    """(first, second) input op ids of each op: the ops whose slots bound its start (the previous stage's
    F for an F, the same cell's F or B for a B or W; the next stage's B for a B), `none` where there is
    none (the move loops append a slot -1 at that index, so an op's earliest slot is one past the larger
    of its inputs' slots)."""
    first = np.where(kind == _F, np.where(stage > 0, ops - 3, none), ops - 1)
    second = np.where((kind == _B) & (stage < n - 1), ops + 3, none)
    return first, second


#: rank sweeps `by_ranks` runs before it checks the ends and goes on a slot at a time from the first
#: wrong one: "min" settles in 1, zb's block in 2 (tests/algorithms/test_v_tighten.py); most others
#: would take about p / 2 or more and go by slots at once
SWEEPS = 2

#: `by_ranks` sweeps down from the raw repetition when at most this share of its ops could start earlier
#: given their inputs' and rank's raw slots ("min": 10 of 12672 at p = 32, under 1 % from p = 2 on;
#: "min-b0" and "half-f1" about 4 %, zb's block a third), else up from 0 (a loose op delays the ops after
#: it, which then all move)
LOOSE_SHARE = 0.01


def tighten(occ: np.ndarray, slot: np.ndarray, n: int, sweeps: int = SWEEPS) -> np.ndarray | None:
    """`SlotSchedule._tighten_reference` on a grid whose row index is the rank: each op, ranks keeping
    their slot order, starts at the first slot after its inputs and its rank's previous op. The new slots;
    None (nothing done) if some input does not sit in an earlier slot.

    This is a longest path with unit durations. An op's input on its own rank sits in an earlier slot, so
    the rank order already binds it; of a V op's inputs one at most is on another rank (`_links`).
    `by_ranks` solves it a rank at a time (then a slot at a time from where `sweeps` sweeps left it
    wrong), or a slot at a time at once for a block whose sweeps would not settle. Equal to
    `tighten_by_slots`, the loop it replaces (which runs where some op is not placed)."""
    if not slot.size:  # no microbatch: nothing to move
        return slot.copy()
    if slot.size % (3 * n) or (slot < 0).any():
        return tighten_by_slots(occ, slot, n)
    if not _inputs_before(slot, n):
        return None
    return by_ranks(occ, slot, n, sweeps)


def _inputs_before(slot: np.ndarray, n: int) -> bool:
    """Whether each op's inputs (`inputs`) sit in earlier slots: the previous stage's F, the cell's F or
    B, the next stage's B (whole microbatches, every op placed)."""
    f, b, w = (slot.reshape(-1, n, 3)[:, :, k] for k in range(3))  # by microbatch and stage
    return bool(
        (f[:, 1:] > f[:, :-1]).all() and (b > f).all() and (w > b).all() and (b[:, :-1] > b[:, 1:]).all()
    )


def tighten_from(
    short_new: np.ndarray, short_occ: np.ndarray, occ: np.ndarray, slot: np.ndarray, n: int
) -> np.ndarray | None:
    """`tighten(occ, slot, n)` for a raw repetition d microbatches longer than one already tightened
    (`short_new`, the new slots of the raw repetition `short_occ`), without solving it again; None where
    the guess below is wrong (the caller then runs `tighten`).

    The guess: the short one with d periods inserted where the two raw grids first differ (column t). An
    op before t keeps its slot (its inputs and rank predecessors all sit before it: the same ops in both);
    from t on each op takes the slot of its copy k microbatches earlier plus 6 k, k = 1 for the first
    period from t, 2 for the next, up to d. It is kept only if it solves `by_ranks`' system (every op ends
    one slot after the later of its input on another rank and its rank predecessor), whose solution is
    unique: then it is the tightened repetition. It holds where the short one repeats (one microbatch
    later, 6 slots later) around t, as the steady state does once settled."""
    cells = 3 * n
    d, left = divmod(slot.size - short_new.size, cells)
    if d <= 0 or left or slot.size % cells or (slot < 0).any() or not _inputs_before(slot, n):
        return None
    width = short_occ.shape[1]
    differ = np.flatnonzero((short_occ != occ[:, :width]).any(axis=0))
    t = int(differ[0]) if differ.size else width
    k = slot - t  # each op's periods past t: 0 before t, 1 in [t, t + 6), ..., d from t + 6 (d - 1) on
    k //= 6
    k += 1
    np.clip(k, 0, d, out=k)
    source = np.arange(slot.size, dtype=np.int64) - cells * k
    if source.min() < 0 or source.max() >= short_new.size:
        return None
    guess = short_new[source]
    guess += 6 * k
    return guess if solves(occ, slot, guess, n) else None


def solves(occ: np.ndarray, slot: np.ndarray, new: np.ndarray, n: int) -> bool:
    """Whether `new` solves `by_ranks`' system for the raw repetition (`occ`, `slot`: every op placed, its
    inputs in earlier slots): each op, its rank's ops in raw slot order, ends one slot after the later of
    its input on another rank and its rank predecessor (the equations `by_ranks` checks before it
    resumes)."""
    mask = occ >= 0
    ops = occ[mask]  # rank-major, each rank's ops in slot order
    total, none = ops.size, slot.size
    count = np.count_nonzero(mask, axis=1)
    inp = _links(ops, n, none)[0]
    pos = np.empty(none + 1, dtype=np.intp)  # each op's index in `ops`; a missing input: the 0 at the end
    pos[ops] = np.arange(total)
    pos[none] = total
    end = np.empty(total + 1, dtype=INT)
    np.add(new[ops], 1, out=end[:-1])
    end[total] = 0
    after = np.empty(total, dtype=INT)  # each op's rank predecessor's end (0 for a rank's first op)
    after[1:] = end[:-2]
    firsts = np.cumsum(count) - count
    after[firsts[count > 0]] = 0
    need = np.maximum(end[pos[inp]], after)
    need += 1
    return bool(np.array_equal(need, end[:-1]))


def _links(ops: np.ndarray, n: int, none: int) -> tuple[np.ndarray, np.ndarray]:
    """(each op's input on another rank, `none` if it has none; the rank that reads the op's end as
    such an input, -1 if none). Stage s runs on rank min(s, 2p - 1 - s): an F's input is the previous
    stage's F (on the same rank at the turn, s = p), a B's the next stage's B (the same rank at s = p - 1);
    the cell's F or B, a B's and a W's other input, is on the op's own rank."""
    p = n // 2
    stage = np.arange(n)
    rank = np.minimum(stage, n - 1 - stage)
    delta = np.zeros((n, 3), dtype=INT)  # input's op id - op id, 0: none
    delta[1:, 0] = -3
    delta[p, 0] = 0
    delta[:-1, 1] = 3
    delta[p - 1, 1] = 0
    reader = np.full((n, 3), -1, dtype=INT)
    reader[:-1, 0] = rank[1:]
    reader[p - 1, 0] = -1
    reader[1:, 1] = rank[:-1]
    reader[p, 1] = -1
    q = ops // (3 * n)
    q *= 3 * n
    key = np.subtract(ops, q, out=q)  # stage * 3 + kind: ops % (3 n) by a division (`_kind`)
    key = key.astype(np.intp)  # (an index used twice: converted once)
    step = delta.ravel()[key]
    inp = np.where(step == 0, none, ops + step)  # (a select: a masked store branches on each element)
    return inp, reader.ravel()[key]


def by_ranks(
    occ: np.ndarray,
    slot: np.ndarray,
    n: int,
    sweeps: int = SWEEPS,
    report: dict | None = None,
    unit_slots: bool = True,
) -> np.ndarray:
    """`tighten`'s new slots (inputs checked there) by at most `sweeps` rank sweeps, then a slot at a
    time from the first raw slot whose ops the sweeps left wrong, if any; with `unit_slots`, by slots
    alone where the sweeps would start up from 0 and some input sits one raw slot before its op on
    another rank (`_unit_step`). `report`, if given, gets
    "sweeps" (how many ran), "down" (whether they started from the raw repetition) and "resumed" (the raw
    slot the slot loop started at; None if it did not run).

    On one rank, its ops in slot order, D = 1..k and ready = the end (new slot + 1) of each op's input on
    another rank (0 if none), the ends are D + maximum.accumulate(ready - (D - 1)) (the max-plus scan of
    `schedule/timing_arrays.py`). The ranks are swept 0..p-1, then p-1..0, and so on, each scanned from
    the ends the others have so far; a rank is scanned again only when an end it reads has changed since
    its last scan, and the sweeps stop when none is left to scan.

    Why that is the longest path. The solution is its own scan, and a scan is monotone in its inputs.
    Started from ends at or below the solution (all 0: "up"), each scan leaves a rank's ends at or below
    the solution and at or above what it had (its inputs only grew); started from ends at or above it
    (the raw repetition, a valid schedule: "down"), at or above the solution and at or below what it
    had. Either way the ends move one way and are bounded integers, so the sweeps would stop; when they
    stop, every op ends at 1 + max(its input's end, its rank's previous op's end). Inputs and rank
    predecessors sit in earlier raw slots (a DAG), so by induction in raw slot order that system has one
    solution: the longest path, which the slot loop computes. The same induction gives the resumption:
    if every op before raw slot t satisfies its equation, the ops before t are right, and the slot loop
    goes on from t with them.

    Sweeps run down where few raw ops are loose (`LOOSE_SHARE`): "min" then settles in 1 sweep (7 up),
    zb's block in 2 up (24 to 96 down; p = 8..32, m = 2 p + 2), "wide-33" in 2 up. Blocks whose chains
    zigzag between neighbouring ranks (half's, a spacing of 1 beside one of 2 or more) need about p / 2
    sweeps and more (5 to 163 at p = 8..32); the check after `sweeps` finds them wrong from a small share
    of the raw slots on. Measured over the blocks of `vshape.CATALOG` and `v_family.AUTO_BLOCKS` (p = 2..32,
    m = 2 p + 2): every block that needs more than `SWEEPS` up from 0 has a chain of spacing 1, and of those
    only "min" is nearly tight, so a block that would sweep up with such a chain goes by slots at once
    (`unit_slots`), saving the sweeps: in effect "min", zb's block and "wide-33" sweep, the rest go by
    slots ("min-b0" too, which would settle in 2 sweeps down)."""
    p = occ.shape[0]
    mask = occ >= 0
    ops = occ[mask]  # rank-major, each rank's ops in slot order
    total, none = ops.size, slot.size
    count = np.count_nonzero(mask, axis=1)
    edges = np.concatenate(([0], np.cumsum(count))).tolist()  # each rank's first op, then the end
    inp, reader = _links(ops, n, none)
    pos = np.empty(none + 1, dtype=INT)  # each op's index in `ops`; a missing input: the 0 at the end
    pos[ops] = np.arange(total, dtype=INT)
    pos[none] = total
    ready = pos[inp]
    if total < WIDE_UNTIL:  # an index read on every scan: numpy converts an int32 one each time
        ready = ready.astype(np.intp)
    end = np.empty(total + 1, dtype=INT)
    np.add(slot[ops], 1, out=end[:-1])
    end[total] = 0
    after = np.empty(total, dtype=INT)  # each op's rank predecessor's end (0 for a rank's first op)
    after[1:] = end[:-2]
    after[edges[:-1]] = 0
    loose = np.maximum(end[ready], after) + 1 < end[:-1]
    down = np.count_nonzero(loose) <= LOOSE_SHARE * total
    if not down and unit_slots and _unit_step(slot, n):
        if report is not None:
            report.update(sweeps=0, down=False, resumed=0)
        return by_slots(occ, slot, n)
    if not down:
        end[:] = 0
    d = np.arange(1, int(count.max(initial=0)) + 1, dtype=INT)
    d1 = d - 1
    rows = [(end[a:b], ready[a:b], reader[a:b], d[: b - a], d1[: b - a]) for a, b in pairwise(edges)]
    readers = [[q for q in (r - 1, r + 1) if 0 <= q < p] for r in range(p)]  # V inputs: neighbouring stages
    dirty = [a < b for a, b in pairwise(edges)]
    forward, backward = range(p), range(p - 1, -1, -1)
    done = 0
    while done < sweeps and any(dirty):
        for r in backward if done % 2 else forward:
            if dirty[r]:
                dirty[r] = False
                mine, src, read, dd, dd1 = rows[r]
                e = end[src]
                e -= dd1
                np.maximum.accumulate(e, out=e)
                e += dd
                changed = e != mine
                if changed.any():
                    mine[:] = e
                    by = read[changed]
                    for q in readers[r]:
                        if not dirty[q] and (by == q).any():
                            dirty[q] = True
        done += 1
    new = slot.copy()
    new[ops] = end[:-1] - 1
    resumed = None
    if any(dirty):
        after[1:] = end[:-2]
        after[edges[:-1]] = 0
        wrong = np.maximum(end[ready], after) + 1 != end[:-1]
        if wrong.any():
            resumed = int(slot[ops[wrong]].min())
            kept = np.count_nonzero(mask[:, :resumed], axis=1)  # each rank's ops before it
            ends = np.where(kept > 0, end[np.asarray(edges[:-1]) + kept - 1], 0).astype(INT)
            new = by_slots(occ, new, n, resumed, ends)
    if report is not None:
        report.update(sweeps=done, down=bool(down), resumed=resumed)
    return new


def _unit_step(slot: np.ndarray, n: int) -> bool:
    """Whether some op's input on another rank sits one raw slot before it (a chain of spacing 1): read
    off microbatch 0, which the repetition shifts by 6 slots per microbatch."""
    p = n // 2
    f, b = slot[0 : 3 * n : 3], slot[1 : 3 * n : 3]
    gaps = np.concatenate((np.delete(f[1:] - f[:-1], p - 1), np.delete(b[:-1] - b[1:], p - 1)))
    return bool(gaps.size) and int(gaps.min()) <= 1


def by_slots(
    occ: np.ndarray, slot: np.ndarray, n: int, start: int = 0, ready: np.ndarray | None = None
) -> np.ndarray:
    """`tighten`'s new slots a slot at a time (inputs checked there): the loop of `tighten_by_slots` with
    each op's one input on another rank (`_links`). From raw slot `start` on, `slot` then holding the
    new slots before it and `ready` each rank's first free slot after them."""
    p, width = occ.shape
    flat = occ[:, start:].T.ravel()  # slot-major, then rank
    where = np.flatnonzero(flat >= 0)
    ops = flat[where]
    inp = _links(ops, n, slot.size)[0]
    rows = (where % p).astype(INT)
    s = np.append(slot, INT(-1))  # the slot of a missing input, at index slot.size
    bounds = np.searchsorted(where, np.arange(width - start + 1) * p).tolist()
    ready = np.zeros(p, dtype=INT) if ready is None else ready.copy()
    for a, b in pairwise(bounds):
        if a < b:
            e = s[inp[a:b]]
            e += 1
            r = rows[a:b]
            np.maximum(e, ready[r], out=e)
            s[ops[a:b]] = e
            e += 1
            ready[r] = e
    return s[:-1]


def tighten_by_slots(occ: np.ndarray, slot: np.ndarray, n: int) -> np.ndarray | None:
    """`tighten`'s reference, a slot at a time with both inputs of each op: each op, in slot order,
    starts at the first slot after its inputs and its rank's previous op. An op's inputs sit in earlier
    slots, so the ops of one slot are independent (one per rank) and each slot is one vector step. The
    new slots; None (nothing done) if some input does not sit in an earlier slot."""
    p, width = occ.shape
    flat = occ.T.ravel()  # slot-major, then rank
    where = np.flatnonzero(flat >= 0)
    ops = flat[where]
    first, second = inputs(ops, ops % 3, ops // 3 % n, n, slot.size)
    s = np.append(slot, INT(-1))  # the slot of a missing input, at index slot.size
    if not (np.all(s[first] < s[ops]) and np.all(s[second] < s[ops])):
        return None
    rows = (where % p).astype(INT)
    bounds = np.searchsorted(where, np.arange(width + 1) * p).tolist()
    ready = np.zeros(p, dtype=INT)
    for a, b in pairwise(bounds):
        if a < b:
            e = np.maximum(s[first[a:b]], s[second[a:b]])
            e += 1
            r = rows[a:b]
            u = np.maximum(ready[r], e)
            s[ops[a:b]] = u
            u += 1
            ready[r] = u
    return s[:-1]


def raw_peak(p: int, m: int, fo: list[int], bo: list[int]) -> int:
    """`SlotSchedule(p, m, fo, bo, tighten=False).peak()` from the F and B slots alone, for m cut to
    `steady_microbatches(fo, bo)` where it is longer (the same peak: see there)."""
    return raw_peak_grid(p, min(m, steady_microbatches(fo, bo)), fo, bo)


def steady_microbatches(fo: list[int], bo: list[int]) -> int:
    """A microbatch count from which on the raw repetition's peak no longer changes.

    Why. On rank r the raw repetition has the four chains of its two stages (F and B of each) at offsets
    a_j + 6 k, k < m; the other slots are free, and each free slot runs the oldest pending W. From slot
    S = max a_j to min a_j + 6 (m - 1), every period of 6 slots from S holds one op of each chain: 2 F's, 2
    B's, 2 free slots, in the same pattern. Let q be the pending W's at a period's start; over the period
    the B's add 2 and the free slots run at most 2, so q never falls, and where q >= 2 both run and q
    stays; from q < 2 it rises or stays, so from the third period on it is one fixed value, and each
    such period runs the same slots from the same state: 2 F's in, 2 W's out, the same levels. A longer
    m only inserts more such periods there (the warm-up before S and the cool-down, shifted, are the
    same), so the peak is that of any m whose steady stretch holds three whole periods: 6 (m - 1) >=
    spread + 12, spread = max a_j - min a_j; taken with a margin. tests/algorithms/test_v_period.py
    holds `raw_peak` equal to `raw_peak_grid` of the whole m over a sweep of blocks, p and m."""
    n = len(fo)
    spread = max(
        max(x) - min(x) for x in ((fo[r], fo[n - 1 - r], bo[r], bo[n - 1 - r]) for r in range(n // 2))
    )
    return 2 + -(-(spread + 17) // 6)


def raw_peak_grid(p: int, m: int, fo: list[int], bo: list[int]) -> int:
    """`SlotSchedule(p, m, fo, bo, tighten=False).peak()` from the F and B slots alone: the W's that
    `fill_ws` would place before each slot are counted by the queueing identity (`_pending`), so neither
    op ids nor the W's slots are built."""
    n = 2 * p
    base = min(fo)
    width = max(bo) - base + 6 * m + 3 * m + 2
    rank = np.minimum(np.arange(n), n - 1 - np.arange(n))
    shift = 6 * np.arange(m)[:, None] - base
    code = np.full((p, width), 3, dtype=np.int8)
    rows = np.broadcast_to(rank[None, :], (m, n))
    code[rows, np.asarray(fo)[None, :] + shift] = _F
    code[rows, np.asarray(bo)[None, :] + shift] = _B
    # live chunks before each slot: F's - W's run = F's - free slots - the running minimum (`_pending`)
    low = _pending(code)[1]
    level = _sum_before((code == _F).view(np.int8) - (code == 3).view(np.int8))
    level -= low
    level[:, :-1] += code == _F  # an F counts from its own slot
    return int(level.max())
