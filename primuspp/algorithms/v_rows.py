"""Whole-schedule array passes of `vshape.SlotSchedule`: the per-rank numpy helpers there, run for every
rank at once.

Why: the per-rank helpers (`_ws_slots`, `_profile`, `_walk`, `_place_ws`) cost a dozen numpy calls and a
list round trip each, p times per pass; at p = 64 that was a third of a V generation outside its move
loops. Here each is a handful of 2-D calls over the (ranks x slots) grid `occ`. The grid is rebuilt from
`slot` (one scatter) rather than from the nested lists, which numpy converts slowly.

tests/algorithms/test_v_squeeze.py holds each equal to its per-rank reference.
"""

from __future__ import annotations

import itertools

import numpy as np

_F, _B, _W = 0, 1, 2


#: op ids, slots and counts fit 32 bits (3.1 M ops at p = 256, m = 2048); half the bytes of int64
INT = np.int32


def grid(slot: np.ndarray, rank_of_stage: np.ndarray, n: int, p: int, width: int) -> np.ndarray:
    """(p, width) grid of op ids (-1: free) from each op's slot (-1: not placed)."""
    occ = np.full((p, width), -1, dtype=INT)
    ops = np.flatnonzero(slot >= 0).astype(INT)
    occ[rank_of_stage[ops // 3 % n], slot[ops]] = ops
    return occ


def _codes(occ: np.ndarray) -> np.ndarray:
    """Each slot's kind (F 0, B 1, W 2) or 3 where free, as int8."""
    code = (occ % 3).astype(np.int8)
    code[occ < 0] = 3
    return code


def _before(mask: np.ndarray) -> np.ndarray:
    """Count of True in each row before each slot: (p, width + 1), a leading 0 column."""
    out = np.zeros((mask.shape[0], mask.shape[1] + 1), dtype=INT)
    np.cumsum(mask, axis=1, dtype=INT, out=out[:, 1:])
    return out


def _run(before_b: np.ndarray, free: np.ndarray) -> np.ndarray:
    """W's run before each slot when each free slot runs a pending one (a B makes one pending): free
    slots so far + the running minimum of (B's - free slots) so far (a queueing identity)."""
    before_free = _before(free)
    lag = before_b - before_free
    np.minimum.accumulate(lag, axis=1, out=lag)
    lag += before_free
    return lag


def fill_ws(occ: np.ndarray, slot: np.ndarray) -> None:
    """`vshape._ws_slots` on every row, applied: each free slot runs the W of the oldest completed B whose
    W has not run (rows are independent; the queueing identity is computed along axis 1)."""
    p = occ.shape[0]
    code = _codes(occ)
    is_b = code == _B
    free = code == 3
    placed = _run(_before(is_b), free)
    takes = free & (placed[:, 1:] > placed[:, :-1])
    tr, tt = np.nonzero(takes)  # row-major: by row, then slot
    br, bt = np.nonzero(is_b)
    count = np.bincount(tr, minlength=p)  # W's placed per row (never more than its B's)
    start = np.concatenate(([0], np.cumsum(np.bincount(br, minlength=p))[:-1]))
    keep = (np.arange(br.size) - start[br]) < count[br]  # each row's first `count` B's, oldest first
    ws = occ[br[keep], bt[keep]] + 1
    occ[tr, tt] = ws
    slot[ws] = tt


def profiles(occ: np.ndarray) -> np.ndarray:
    """`SlotSchedule._profile` of every row: (p, width + 1) live chunk activations during each slot (F
    counts from its slot, W until the end of its slot), then the level after the last slot."""
    code = _codes(occ)
    prof = _before(code == _F)
    prof[:, :-1] += (code == _F).view(np.int8)  # F counts from its own slot
    prof -= _before(code == _W)  # W until the end of its slot; the last column: the level after all
    return prof


def walks(occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`SlotSchedule._walk` of every row (W's stripped): (pending B's, live chunks) before each slot, each
    (p, width + 1)."""
    code = _codes(occ)
    before_b = _before(code == _B)
    run = _run(before_b, code == 3)
    before_b -= run
    before_f = _before(code == _F)
    before_f -= run
    return before_b, before_f


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
    kind = ops % 3
    if len(kinds) < 3:
        keep = np.isin(kind, kinds)
        ops, kind = ops[keep], kind[keep]
    stage = ops // 3 % n
    return ops, kind, stage, rank_of_stage[stage]


def inputs(ops: np.ndarray, kind: np.ndarray, stage: np.ndarray, n: int, none: int):
    """(first, second) input op ids of each op: the ops whose slots bound its start (the previous stage's
    F for an F, the same cell's F or B for a B or W; the next stage's B for a B), `none` where there is
    none (the move loops append a slot -1 at that index, so an op's earliest slot is one past the larger
    of its inputs' slots)."""
    first = np.where(kind == _F, np.where(stage > 0, ops - 3, none), ops - 1)
    second = np.where((kind == _B) & (stage < n - 1), ops + 3, none)
    return first, second


def tighten(occ: np.ndarray, slot: np.ndarray, n: int) -> np.ndarray | None:
    """`SlotSchedule._tighten_reference` on a grid whose row index is the rank: each op, in slot order,
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
    for a, b in itertools.pairwise(bounds):
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
    """`SlotSchedule(p, m, fo, bo, tighten=False).peak()` from the F and B slots alone: the W's that
    `fill_ws` would place before each slot are counted by the queueing identity (`_run`), so neither op
    ids nor the W's slots are built (a third of the time at p = 256, m = 2048)."""
    n = 2 * p
    base = min(fo)
    width = max(bo) - base + 6 * m + 3 * m + 2
    rank = np.minimum(np.arange(n), n - 1 - np.arange(n))
    shift = 6 * np.arange(m)[:, None] - base
    is_f = np.zeros((p, width), dtype=bool)
    is_b = np.zeros((p, width), dtype=bool)
    rows = np.broadcast_to(rank[None, :], (m, n))
    is_f[rows, np.asarray(fo)[None, :] + shift] = True
    is_b[rows, np.asarray(bo)[None, :] + shift] = True
    placed = _run(_before(is_b), ~(is_f | is_b))  # W's placed before each slot (and after the last)
    before_f = _before(is_f)
    level = before_f - placed  # live chunks before each slot; an F counts from its own slot
    level[:, :-1] += is_f
    return int(level.max())
