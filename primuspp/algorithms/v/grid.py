"""The slot grid of a V schedule: ops on unit slots, each rank's op per slot.

A block (`v_blocks`) repeated m times is a valid schedule at the block's memory, with idle slots during
warm-up and cool-down. `SlotSchedule` lays it out, tightens it (every op as early as its inputs and rank
allow) and squeezes it under a cap of live chunk activations (`v_squeeze`): explicit W's, or W's stripped
and re-derived (each free slot runs the oldest pending W). The per-rank order by slot is the result; its
memory depends on the order only, so it holds under any cost model. tests/oracles/v_slots.py holds the
readable per-op references every pass here is checked against.
"""

from __future__ import annotations

import numpy as np

from primuspp.algorithms.v import rows as v_rows
from primuspp.algorithms.v import squeeze as v_squeeze
from primuspp.algorithms.v.blocks import PERIOD
from primuspp.schedule.array_order import ArrayOrder

_F, _B, _W = 0, 1, 2


class SlotSchedule:
    """Ops of a V schedule on unit slots. An op id is (mb * stages + stage) * 3 + kind; `slot[op]` is its
    slot (-1: not placed) and `occ[r, t]` the op rank r runs in slot t (-1: free), two int32 arrays that
    the passes replace (never edit in place: copies share them)."""

    def __init__(self, p: int, m: int, fo: list[int], bo: list[int], tighten: bool = True) -> None:
        """The block (F and B offsets `fo`, `bo` per stage) repeated m times, W's in the free slots, then
        (`tighten`) every op as early as its inputs and its rank allow."""
        self.p, self.m, self.n = p, m, 2 * p
        n = self.n
        self.ranks = np.minimum(np.arange(n), n - 1 - np.arange(n))
        base = min(fo)
        self.width = width = max(bo) - base + PERIOD * m + 3 * m + 2  # slots per row
        # microbatch k's F and B of stage s at the block's slots shifted by 6k (distinct modulo 6 on a rank)
        f_op = (np.arange(m)[:, None] * n + np.arange(n)[None, :]) * 3
        shift = PERIOD * np.arange(m)[:, None] - base
        f_t, b_t = np.asarray(fo)[None, :] + shift, np.asarray(bo)[None, :] + shift
        rows = np.broadcast_to(self.ranks[None, :], f_op.shape)
        slot = np.full(3 * n * m, -1, dtype=v_rows.INT)
        occ = np.full((p, width), -1, dtype=v_rows.INT)
        slot[f_op], slot[f_op + _B] = f_t, b_t
        occ[rows, f_t], occ[rows, b_t] = f_op, f_op + _B
        v_rows.fill_ws(occ, slot)
        if tighten:
            slot = v_rows.tighten(occ, slot, n)
            occ = self._grid(slot)
        self.slot, self.occ = slot, occ

    def _grid(self, slot: np.ndarray) -> np.ndarray:
        return v_rows.grid(slot, self.ranks, self.n, self.p, self.width)

    def copy(self) -> SlotSchedule:
        other = object.__new__(SlotSchedule)
        other.__dict__.update(self.__dict__)  # the arrays are shared: the passes replace them
        return other

    def squeeze_explicit(self, cap: int) -> None:
        """Move each op (in slot order) to the earliest free slot allowed by its inputs and by `cap` live
        chunk activations; W's are ops like the others."""
        self.slot = v_squeeze.explicit(self.slot, self.occ, self.ranks, cap)
        self.occ = self._grid(self.slot)

    def squeeze_derived(self, cap: int) -> None:
        """Strip the W's; move F and B ops (in slot order) to the earliest free slot where the memory, with
        W's re-derived (each free slot runs the oldest pending W), stays within `cap`; then re-place W's."""
        slot = self.slot.copy()
        slot[_W::3] = -1
        slot = v_squeeze.derived(slot, self._grid(slot), self.ranks, cap)
        occ = self._grid(slot)
        v_rows.fill_ws(occ, slot)
        self.slot, self.occ = slot, occ

    def order(self) -> ArrayOrder:
        """Each rank's occupied slots in slot order (no Node is built until someone reads one)."""
        return v_rows.order_of(self.occ, self.n)

    def peak(self) -> int:
        """Most live chunk activations of any rank in any slot (F counts from its slot, W to its end)."""
        return int(v_rows.profiles(self.occ).max())
