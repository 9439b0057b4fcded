"""Whole-schedule array passes of `vshape.SlotSchedule`: the per-rank numpy helpers there, run for every
rank at once.

Why: the per-rank helpers (`_ws_slots`, `_profile`, `_walk`, `_place_ws`) cost a dozen numpy calls and a
list round trip each, p times per pass; at p = 64 that was a third of a V generation outside its move
loops. Here each is a handful of 2-D calls over the (ranks x slots) grid `occ`. The grid is rebuilt from
`slot` (one scatter) rather than from the nested lists, which numpy converts slowly.

tests/algorithms/test_v_squeeze.py holds each equal to its per-rank reference.
"""

from __future__ import annotations

import numpy as np

_F, _B, _W = 0, 1, 2


def grid(slot: np.ndarray, rank_of_stage: np.ndarray, n: int, p: int, width: int) -> np.ndarray:
    """(p, width) int64 grid of op ids (-1: free) from each op's slot (-1: not placed)."""
    occ = np.full((p, width), -1, dtype=np.int64)
    ops = np.flatnonzero(slot >= 0)
    occ[rank_of_stage[ops // 3 % n], slot[ops]] = ops
    return occ


def fill_ws(occ: np.ndarray, slot: np.ndarray) -> None:
    """`vshape._ws_slots` on every row, applied: each free slot runs the W of the oldest completed B whose
    W has not run (rows are independent; the queueing identity is computed along axis 1)."""
    p = occ.shape[0]
    is_b = (occ >= 0) & (occ % 3 == _B)
    free = occ < 0
    zero = np.zeros((p, 1), dtype=np.int64)
    before_b = np.concatenate((zero, np.cumsum(is_b, axis=1)), axis=1)
    before_free = np.concatenate((zero, np.cumsum(free, axis=1)), axis=1)
    placed = before_free + np.minimum.accumulate(before_b - before_free, axis=1)
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
    kind = np.where(occ >= 0, occ % 3, -1)
    is_f = kind == _F
    is_w = kind == _W
    zero = np.zeros((occ.shape[0], 1), dtype=np.int64)
    prof = np.cumsum(is_f, axis=1) - np.concatenate((zero, np.cumsum(is_w, axis=1)[:, :-1]), axis=1)
    level = np.count_nonzero(is_f, axis=1) - np.count_nonzero(is_w, axis=1)
    return np.concatenate((prof, level[:, None]), axis=1)


def walks(occ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`SlotSchedule._walk` of every row (W's stripped): (pending B's, live chunks) before each slot, each
    (p, width + 1)."""
    is_f = (occ >= 0) & (occ % 3 == _F)
    is_b = (occ >= 0) & ~is_f
    free = occ < 0
    zero = np.zeros((occ.shape[0], 1), dtype=np.int64)
    before_b = np.concatenate((zero, np.cumsum(is_b, axis=1)), axis=1)
    before_f = np.concatenate((zero, np.cumsum(is_f, axis=1)), axis=1)
    before_free = np.concatenate((zero, np.cumsum(free, axis=1)), axis=1)
    run = before_free + np.minimum.accumulate(before_b - before_free, axis=1)
    return before_b - run, before_f - run


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
