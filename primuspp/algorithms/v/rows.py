"""Whole-grid array passes of a V slot grid (`v_grid.SlotSchedule`): W placement, profiles, walks,
tightening and decoding, each a handful of 2-D numpy calls over the (ranks x slots) grid `occ`, rebuilt from
each op's slot by one scatter. tests/oracles/v_slots.py holds the per-rank loops each is checked against.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from primuspp.schedule.array_order import KINDS, ArrayOrder
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.timing_arrays import UNIT_STARTS

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


def _sum_before(step: np.ndarray) -> np.ndarray:
    """Sum of each row's int8 `step`s before each slot: (p, width + 1), a leading 0 column (one
    accumulate)."""
    out = np.zeros((step.shape[0], step.shape[1] + 1), dtype=INT)
    out[:, 1:] = step
    np.cumsum(out[:, 1:], axis=1, out=out[:, 1:])
    return out


def _pending(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pending W's before each slot, the running minimum m of (B's - free slots) so far), each (p, width
    + 1), when each free slot runs a pending W: W's run before slot t are free(t) + m(t) (a queueing
    identity), so the pending ones are B's(t) - free(t) - m(t); a free slot runs one where one is
    pending before it."""
    lag = _sum_before((code == _B).view(np.int8) - (code == 3).view(np.int8))
    low = np.minimum.accumulate(lag, axis=1)
    np.subtract(lag, low, out=lag)
    return lag, low


def fill_ws(occ: np.ndarray, slot: np.ndarray) -> None:
    """Each free slot runs the W of the oldest completed B whose
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
    """(p, width + 1) live chunk activations during each slot (F
    counts from its slot, W until the end of its slot), then the level after the last slot."""
    code = _codes(occ)
    is_w = (code == _W).view(np.int8)
    # (F's - W's) up to and including each slot, then the W of the slot added back: one accumulate
    prof = _sum_before((code == _F).view(np.int8) - is_w)
    prof[:, :-1] = prof[:, 1:]
    prof[:, :-1] += is_w
    return prof


def walks(occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's walk with W's derived (W's stripped): (pending B's, live chunks) before each slot, each
    (p, width + 1). Live chunks: F's - W's run = F's - free slots - the running minimum (`_pending`)."""
    code = _codes(occ)
    pend, low = _pending(code)
    live = _sum_before((code == _F).view(np.int8) - (code == 3).view(np.int8))
    live -= low
    return pend, live


def views(*arrays: np.ndarray) -> list[memoryview]:
    """The arrays as memoryviews, for `for op, ... in zip(*views(...))`: iterating a memoryview makes each
    Python int as it is read, so no list of them is built (`tolist` costs ~20 ns an element, about a tenth
    of a V squeeze at p = 32-64, and at p = 256 hundreds of MB)."""
    return [memoryview(np.ascontiguousarray(a)) for a in arrays]


def columns(occ: np.ndarray, rank_of_stage: np.ndarray, n: int, kinds: tuple[int, ...]):
    """The ops of the given kinds ordered by slot, then rank, with their
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
#: wrong one: "min" settles in 1, zb's block in 2; most others would take about p / 2 or more and go by
#: slots at once
SWEEPS = 2

#: `by_ranks` sweeps down from the raw repetition when at most this share of its ops could start earlier
#: given their inputs' and rank's raw slots ("min": 10 of 12672 at p = 32, under 1 % from p = 2 on;
#: "min-b0" and "half-f1" about 4 %, zb's block a third), else up from 0 (a loose op delays the ops after
#: it, which then all move)
LOOSE_SHARE = 0.01


def tighten(occ: np.ndarray, slot: np.ndarray, n: int, sweeps: int = SWEEPS) -> np.ndarray:
    """Each op, ranks keeping their slot order, at the first slot after its inputs and its rank's previous
    op (whole microbatches, every op placed, each input in an earlier slot): the new slots.

    This is a longest path with unit durations. An op's input on its own rank sits in an earlier slot, so
    the rank order already binds it; of a V op's inputs one at most is on another rank (`_links`).
    `by_ranks` solves it a rank at a time (then a slot at a time from where `sweeps` sweeps left it
    wrong), or a slot at a time at once for a block whose sweeps would not settle."""
    if not slot.size:  # no microbatch: nothing to move
        return slot.copy()
    if slot.size % (3 * n) or (slot < 0).any() or not _inputs_before(slot, n):
        raise ValueError("tighten: needs whole microbatches, every op placed after its inputs")
    return by_ranks(occ, slot, n, sweeps)


def _inputs_before(slot: np.ndarray, n: int) -> bool:
    """Whether each op's inputs (`inputs`) sit in earlier slots: the previous stage's F, the cell's F or
    B, the next stage's B (whole microbatches, every op placed)."""
    f, b, w = (slot.reshape(-1, n, 3)[:, :, k] for k in range(3))  # by microbatch and stage
    return bool(
        (f[:, 1:] > f[:, :-1]).all() and (b > f).all() and (w > b).all() and (b[:, :-1] > b[:, 1:]).all()
    )


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


def by_ranks(occ: np.ndarray, slot: np.ndarray, n: int, sweeps: int = SWEEPS) -> np.ndarray:
    """`tighten`'s new slots (inputs checked there) by at most `sweeps` rank sweeps, then a slot at a
    time from the first raw slot whose ops the sweeps left wrong, if any; by slots alone where the sweeps
    would start up from 0 and some input sits one raw slot before its op on another rank (`_unit_step`).

    On one rank, its ops in slot order, D = 1..k and ready = the end (new slot + 1) of each op's input on
    another rank (0 if none), the ends are D + maximum.accumulate(ready - (D - 1)). The ranks are swept
    0..p-1, then p-1..0, and so on, each scanned from the ends the others have so far; a rank is scanned
    again only when an end it reads has changed since its last scan.

    Why that is the longest path: the solution is its own scan, and a scan is monotone in its inputs.
    Started from ends at or below the solution (all 0: "up") or at or above it (the raw repetition, a valid
    schedule: "down"), the ends move one way towards it; when they stop, every op ends at 1 + max(its
    input's end, its rank's previous op's end), a system with one solution (inputs and rank predecessors
    sit in earlier raw slots: by induction in raw slot order). The same induction lets the slot loop
    resume from the first raw slot whose ops break an equation.

    Sweeps run down where few raw ops are loose (`LOOSE_SHARE`): "min" then settles in 1 sweep, zb's
    block in 2 up. Blocks whose chains zigzag between neighbouring ranks (a spacing of 1 beside one of 2
    or more) need about p / 2 sweeps and more, and go by slots."""
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
    if not down and _unit_step(slot, n):
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
    if any(dirty):
        after[1:] = end[:-2]
        after[edges[:-1]] = 0
        wrong = np.maximum(end[ready], after) + 1 != end[:-1]
        if wrong.any():
            resumed = int(slot[ops[wrong]].min())
            kept = np.count_nonzero(mask[:, :resumed], axis=1)  # each rank's ops before it
            ends = np.where(kept > 0, end[np.asarray(edges[:-1]) + kept - 1], 0).astype(INT)
            new = by_slots(occ, new, n, resumed, ends)
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
    """`tighten`'s new slots a slot at a time (inputs checked there), each op's one input on another rank
    read through `_links`. From raw slot `start` on, `slot` then holding the
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
