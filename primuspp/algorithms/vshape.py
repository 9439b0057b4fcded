"""V-shape schedules from a repeating building block, squeezed under a memory cap.

The construction follows the building-block view of "Pipeline Parallelism with Controllable Memory"
(Qi et al., 2024). Time is cut into unit slots (one chunk's F, B or W each); every microbatch repeats the
same block, shifted by 6 slots (the six ops one microbatch costs a rank: F, B, W of two chunks). A block
gives each rank the slot of its chunk-0 forward (F0), chunk-1 forward (F1) and the two input-grad passes
(B1, B0); the spacing between neighbouring ranks along each of the four chains sets how long activations
live, hence the memory: tight chains (every spacing 1) give about p/3 microbatches (v-min), doubled F0 and
B1 spacings about p/2 (v-half), wider ones up to p (zbv).

Repeating the block m times is a valid schedule at the block's memory, with idle slots during warm-up and
cool-down. Two squeeze passes then move every op, in slot order, to the earliest free slot its inputs and
the cap allow: first with W's placed explicitly, then with W's stripped and re-derived (each free slot runs
the oldest pending W), so F and B may take the slots W's held. The per-rank order by slot is the result;
its memory depends on the order only, so it holds under any cost model.

The squeezes here are the readable references; `v_squeeze` holds their fast paths (the same moves, with
the per-slot counts in bytearrays), which `squeeze_explicit` and `squeeze_derived` run where they apply,
and `v_rows` the whole-grid numpy passes (construction, tightening, profiles, W placement) that replace
the per-rank helpers here between the move loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.nodes import Node

PERIOD = 6
_F, _B, _W = 0, 1, 2


@dataclass(frozen=True)
class Block:
    """Spacings of the four chains (F0 down, F1 up, B1 down, B0 up) and the gaps at the two turns."""

    name: str
    f0: int
    f1: int
    b1: int
    b0: int
    f_turn: int = 1
    b_turn: int = 1
    #: the squeeze that does best for this block (tried alone on large instances): "derived" or "explicit"
    squeeze: str = "derived"


#: the named blocks; `offsets` shifts the backward phase until no two ops of a rank share a slot mod 6
MIN = Block("min", 1, 1, 1, 1)
HALF = Block("half", 2, 1, 2, 1, 1, 2)
ZB = Block("zb", 4, 2, 4, 2, 3, 3, "explicit")
ZB_TIGHT = Block("zb-tight", 1, 1, 4, 2, squeeze="explicit")
CATALOG = (
    MIN,
    Block("min-b2", 1, 1, 2, 1),
    Block("min-f2", 2, 1, 1, 1),
    HALF,
    Block("half-b3", 1, 1, 3, 1),
    Block("half-f3", 3, 1, 2, 1, 1, 2),
    Block("wide-3", 1, 1, 3, 3),
    Block("wide-33", 3, 3, 3, 3),
    ZB_TIGHT,
    ZB,
)


def offsets(p: int, block: Block) -> tuple[list[int], list[int]]:
    """Slot of F and of B of microbatch 0 on every stage (V placement: stage i and 2p-1-i on rank i).

    Two ops of one rank must not share a slot modulo 6. The first of a few shifts of the backward phase
    (and widenings of the backward turn) that avoids every collision is taken; failing that, each op slides
    to the next slot its rank has free modulo 6, which always succeeds but bends the chains.

    (New lists each call, from `_offsets`, which works them out once per (p, block).)"""
    fo, bo = _offsets(p, block)
    return list(fo), list(bo)


@lru_cache(maxsize=512)
def _offsets(p: int, block: Block) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`offsets`, kept: the V family ranks every block of a catalog by `estimated_peak` on each build (a
    few hundred microseconds of small-int loops at p = 64)."""
    n = 2 * p
    for extra in range(3):
        for delta in range(PERIOD):
            fo, bo = _chains(p, block, delta, extra, slide=False)
            if all(
                len({fo[i] % PERIOD, fo[n - 1 - i] % PERIOD, bo[i] % PERIOD, bo[n - 1 - i] % PERIOD}) == 4
                for i in range(p)
            ):
                return tuple(fo), tuple(bo)
    fo, bo = _chains(p, block, 0, 0, slide=True)
    return tuple(fo), tuple(bo)


def _chains(p: int, block: Block, delta: int, extra: int, slide: bool) -> tuple[list[int], list[int]]:
    n = 2 * p
    fo, bo = [0] * n, [0] * n
    used: list[set[int]] = [set() for _ in range(p)]

    def put(rank: int, t: int) -> int:
        if slide:
            while t % PERIOD in used[rank]:
                t += 1
            used[rank].add(t % PERIOD)
        return t

    fo[0] = put(0, 0)
    for i in range(1, p):
        fo[i] = put(i, fo[i - 1] + block.f0)
    fo[p] = put(p - 1, fo[p - 1] + block.f_turn)
    for s in range(p + 1, n):
        fo[s] = put(n - 1 - s, fo[s - 1] + block.f1)
    bo[n - 1] = put(0, fo[n - 1] + 1 + delta)
    for s in range(n - 2, p - 1, -1):
        bo[s] = put(n - 1 - s, bo[s + 1] + block.b1)
    bo[p - 1] = put(p - 1, bo[p] + block.b_turn + extra)
    for s in range(p - 2, -1, -1):
        bo[s] = put(s, bo[s + 1] + block.b0)
    return fo, bo


def _ws_slots(ops):
    """(free slots that take a W, those W's) for one rank's row (numpy, -1 = free): each free slot runs the
    W of the oldest completed B whose W has not run, if any.

    As a queue walked slot by slot: a B enqueues its W, a free slot takes the head if any. The slots that
    take one are those where the count of W's placed so far grows: that count before slot t is free(t) +
    min over s <= t of (B's(s) - free(s)), counting in slots [0, s) (a queueing identity), computed for all
    t at once."""
    import numpy as np

    is_b = (ops >= 0) & (ops % 3 == _B)
    free = ops < 0
    before_b = np.concatenate(([0], np.cumsum(is_b)))
    before_free = np.concatenate(([0], np.cumsum(free)))
    placed = before_free + np.minimum.accumulate(before_b - before_free)
    takes = np.nonzero(free & (placed[1:] > placed[:-1]))[0]
    return takes, ops[is_b][: len(takes)] + 1


class SlotSchedule:
    """Ops of a V schedule on unit slots. An op id is (mb * stages + stage) * 3 + kind; `occ[r][t]` is the
    op rank r runs in slot t (-1: free), `slot[op]` the inverse."""

    def __init__(
        self,
        p: int,
        m: int,
        fo: list[int],
        bo: list[int],
        tighten: bool = True,
        like: tuple | None = None,
        keep_raw: bool = False,
    ) -> None:
        """The block (F and B offsets `fo`, `bo` per stage) repeated m times, W's in the free slots, then
        (`tighten`) every op as early as its inputs and its rank allow. `like`: (the new slots, the raw
        grid) of the same block tightened for fewer microbatches (`tightened_from`, of a schedule made
        with `keep_raw`), which the tightening tries first (`v_rows.tighten_from`)."""
        import numpy as np

        from primuspp.algorithms import v_rows

        self.p, self.m, self.n = p, m, 2 * p
        n = self.n
        self.rank = rank = [min(s, n - 1 - s) for s in range(n)]
        base = min(fo)
        self.width = width = max(bo) - base + PERIOD * m + 3 * m + 2  # slots per row
        # microbatch k's F and B of stage s at the block's slots shifted by 6k (distinct modulo 6 on a rank)
        f_op = (np.arange(m)[:, None] * n + np.arange(n)[None, :]) * 3
        shift = PERIOD * np.arange(m)[:, None] - base
        f_t, b_t = np.asarray(fo)[None, :] + shift, np.asarray(bo)[None, :] + shift
        rows = np.broadcast_to(np.asarray(rank)[None, :], f_op.shape)
        slot = np.full(3 * n * m, -1, dtype=v_rows.INT)
        occ = np.full((p, width), -1, dtype=v_rows.INT)
        slot[f_op], slot[f_op + _B] = f_t, b_t
        occ[rows, f_t], occ[rows, b_t] = f_op, f_op + _B
        v_rows.fill_ws(occ, slot)  # `_ws_slots` on every rank
        if tighten:
            new = None if like is None else v_rows.tighten_from(*like, occ, slot, n)
            if new is None:
                new = v_rows.tighten(occ, slot, n)  # `_tighten_reference`, a slot at a time
            if new is None:
                new = np.array(self._tightened(slot, occ), dtype=v_rows.INT)
            if keep_raw:
                self.raw = occ
            slot, occ = new, v_rows.grid(new, np.asarray(rank, dtype=np.int64), n, p, width)
        self._set_arrays(slot, occ)

    def tightened_from(self) -> tuple:
        """(the tightened slots, the raw grid) as `like` takes them: made with `keep_raw`, read before any
        squeeze."""
        return self._arr[0], self.raw

    # The ops' places are kept as arrays (`_arr`: the slot array and the grid, what the fast passes read
    # and write) or as the lists `slot` and `occ` (what the readable references edit in place), or both
    # while they agree. The lists are built from the arrays when first read (at p = 256 each is millions
    # of Python ints, which the fast passes never need); a method that edits the lists first drops the
    # arrays (`_fresh = None`), which keeps their content as the lists.
    _arr = None
    _slot = None
    _occ = None
    raw = None  # the raw repetition's grid, kept with `keep_raw`
    #: where a schedule left unfinished is proven the shorter one's final order with periods inserted
    #: (`v_proof.derived` with `build` False: a `v_period.Inserted`)
    inserted = None

    @property
    def slot(self) -> list[int]:
        """Each op's slot (-1: not placed), as a list."""
        if self._slot is None and self._arr is not None:
            self._lists()
        return self._slot

    @slot.setter
    def slot(self, value: list[int] | None) -> None:
        self._slot = value

    @property
    def occ(self) -> list[list[int]]:
        """Each rank's op per slot (-1: free), as lists."""
        if self._occ is None and self._arr is not None:
            self._lists()
        return self._occ

    @occ.setter
    def occ(self, value: list[list[int]] | None) -> None:
        self._occ = value

    def _lists(self) -> None:
        slot, occ = self._arr
        self._slot, self._occ = slot.tolist(), occ.tolist()

    @property
    def _fresh(self):
        """(slot array, grid) equal to `slot` and `occ` where the last array pass left them and nothing has
        moved since, else None; setting None (before editing the lists) turns the arrays into the lists."""
        return self._arr

    @_fresh.setter
    def _fresh(self, value) -> None:
        if value is None and self._arr is not None and (self._slot is None or self._occ is None):
            self._lists()
        self._arr = value

    def _set_arrays(self, slot, occ) -> None:
        """The ops' places from arrays (slot array, grid), which nobody writes to afterwards; the lists
        are dropped (built again from these if read)."""
        self._slot = self._occ = None
        self._arr = (slot, occ)

    def _arrays(self):
        """(`slot` as an int32 array, `occ` as a grid); not to be written to (they may be shared)."""
        import numpy as np

        from primuspp.algorithms import v_rows

        if self._arr is not None:
            return self._arr
        slot = np.array(self.slot, dtype=v_rows.INT)
        return slot, v_rows.grid(slot, np.asarray(self.rank, dtype=np.int64), self.n, self.p, self.width)

    def copy(self) -> SlotSchedule:
        other = object.__new__(SlotSchedule)
        other.p, other.m, other.n, other.rank, other.width = self.p, self.m, self.n, self.rank, self.width
        other._arr = self._arr  # shared: nobody writes to them
        other._slot = None if self._slot is None else list(self._slot)
        other._occ = None if self._occ is None else [list(row) for row in self._occ]
        return other

    # -- helpers ----------------------------------------------------------------------------------------

    def _rank_of(self, op: int) -> int:
        return self.rank[(op // 3) % self.n]

    def _place_ws(self, r: int) -> None:
        """Fill rank r's free slots with the W's of completed B's, oldest first (`_ws_slots`)."""
        import numpy as np

        self._fresh = None
        row, slot = self.occ[r], self.slot
        takes, ws = _ws_slots(np.array(row, dtype=np.int64))
        for t, w in zip(takes.tolist(), ws.tolist(), strict=True):
            row[t], slot[w] = w, t

    def _set_lists(self, slot, occ) -> None:
        """`slot` and `occ` from arrays; the old lists go first (at p = 256 each is 100+ MB of ints)."""
        self._arr = self._slot = self._occ = None
        self.slot = slot.tolist()
        self.occ = occ.tolist()

    def _grid(self):
        """`occ` as a (p, width) numpy grid, built from `slot` (faster than converting the nested lists)."""
        import numpy as np

        from primuspp.algorithms import v_rows

        slot = np.array(self.slot, dtype=v_rows.INT)
        return v_rows.grid(slot, np.asarray(self.rank, dtype=np.int64), self.n, self.p, self.width)

    def _tightened(self, slot, occ) -> list[int]:
        """`_tighten_reference` on the arrays of the raw repetition (`slot`, `occ`); returns the new slots
        as a list. The same loop, each op's inputs looked up beforehand (`v_rows.inputs`)."""
        import numpy as np

        from primuspp.algorithms import v_rows

        n = self.n
        ops, kind, stage, rank = v_rows.columns(occ, np.asarray(self.rank, dtype=np.int64), n, (_F, _B, _W))
        first, second = v_rows.inputs(ops, kind, stage, n, len(slot))
        s = slot.tolist()
        s.append(-1)  # the slot of a missing input
        ready = [0] * self.p
        for op, a, b, r in zip(ops.tolist(), first.tolist(), second.tolist(), rank.tolist(), strict=True):
            e = s[a]
            x = s[b]
            if x > e:
                e = x
            u = ready[r]
            if e >= u:
                u = e + 1
            s[op] = u
            ready[r] = u + 1
        s.pop()
        return s

    def _tighten_reference(self) -> None:
        """Start every op as soon as its inputs and its rank allow, keeping each rank's order (memory, an
        order property, is unchanged). The raw repetition is loose everywhere; this leaves the squeeze
        only the holes an op can jump into. Slots are visited in time order, so inputs come first.
        (`SlotSchedule(..., tighten=True)` runs the same loop as `_tightened`.)"""
        self._fresh = None
        p, occ, slot, n = self.p, self.occ, self.slot, self.n
        width = len(occ[0])
        new_occ = [[-1] * width for _ in range(p)]
        ready = [0] * p
        for op, kind, s, r in zip(*self._op_columns((_F, _B, _W)), strict=True):
            # earliest(op), inlined (see `_earliest`)
            if kind == _F:
                e = slot[op - 3] + 1 if s else 0
            else:
                e = slot[op - 1] + 1
                if kind == _B and s < n - 1:
                    b = slot[op + 3] + 1
                    if b > e:
                        e = b
            u = ready[r]
            if e > u:
                u = e
            slot[op] = u
            new_occ[r][u] = op
            ready[r] = u + 1
        self.occ = new_occ

    def _op_columns(self, kinds: tuple[int, ...]) -> tuple[list[int], list[int], list[int], list[int]]:
        """`_ops_by_slot` with each op's kind, stage and rank beside it (the hot loops' inputs)."""
        import numpy as np

        ops = np.array(self._ops_by_slot(kinds), dtype=np.int64)
        stage = ops // 3 % self.n
        rank = np.asarray(self.rank, dtype=np.int64)[stage]
        return ops.tolist(), (ops % 3).tolist(), stage.tolist(), rank.tolist()

    def _ops_by_slot(self, kinds: tuple[int, ...]) -> list[int]:
        """Ops of the given kinds ordered by slot, then rank."""
        import numpy as np

        ops = np.array(self.occ, dtype=np.int64).T.ravel()  # slot-major, then rank
        ops = ops[ops >= 0]
        return ops[np.isin(ops % 3, kinds)].tolist()

    def _earliest(self, op: int) -> int:
        """First slot at which `op` may start, given where its inputs are now. Op ids are (key * 3 + kind),
        key = mb * stages + stage: the previous stage's F is op - 3, the same cell's F (for B) or B (for W)
        is op - 1, the next stage's B is op + 3."""
        slot = self.slot
        kind = op % 3
        if kind == _F:
            return slot[op - 3] + 1 if (op // 3) % self.n else 0
        e = slot[op - 1] + 1
        if kind == _B and (op // 3) % self.n < self.n - 1:
            b = slot[op + 3] + 1
            if b > e:
                return b
        return e

    # -- squeeze with explicit W's ------------------------------------------------------------------------

    def squeeze_explicit(self, cap: int) -> None:
        """Move each op (in slot order) to the earliest free slot allowed by its inputs and by `cap` live
        chunk activations; W's are ops like the others. Runs the fast path (`v_squeeze`) where it applies,
        else the reference below: the same moves."""
        from primuspp.algorithms import v_squeeze

        if not v_squeeze.squeeze_explicit(self, cap, self._arrays()):  # it leaves the new arrays
            self.squeeze_explicit_reference(cap)

    def squeeze_explicit_reference(self, cap: int) -> None:
        """Reference of `squeeze_explicit`: the live chunks per slot as a list, updated slot by slot."""
        self._fresh = None
        mem = [self._profile(r) for r in range(self.p)]
        slot, occ, rank, n = self.slot, self.occ, self.rank, self.n
        for op in self._ops_by_slot((_F, _B, _W)):
            key, kind = divmod(op, 3)
            s = key % n
            # earliest(op), inlined (this loop runs for every op)
            if kind == _F:
                e = slot[op - 3] + 1 if s else 0
            else:
                e = slot[op - 1] + 1
                if kind == _B and s < n - 1 and slot[op + 3] >= e:
                    e = slot[op + 3] + 1
            cur = slot[op]
            if e >= cur:
                continue
            row, prof = occ[rank[s]], mem[rank[s]]
            lo = e
            if kind == _F:  # the activation now lives from the new slot on: the cap must hold there
                lo = cur
                while lo > e and prof[lo - 1] < cap:
                    lo -= 1
                if lo == cur:
                    continue
            try:
                t = row.index(-1, lo, cur)
            except ValueError:
                continue
            row[cur], row[t], slot[op] = -1, op, t
            if kind == _F:
                prof[t:cur] = [x + 1 for x in prof[t:cur]]
            elif kind == _W:
                prof[t + 1 : cur + 1] = [x - 1 for x in prof[t + 1 : cur + 1]]

    def _profile(self, r: int) -> list[int]:
        """Live chunk activations during each slot: F counts from its slot, W until the end of its slot."""
        import numpy as np

        ops = np.array(self.occ[r], dtype=np.int64)
        kind = np.where(ops >= 0, ops % 3, -1)
        prof = np.cumsum(kind == _F) - np.concatenate(([0], np.cumsum(kind == _W)[:-1]))
        level = int(np.count_nonzero(kind == _F) - np.count_nonzero(kind == _W))
        return [*prof.tolist(), level]

    # -- squeeze with derived W's -------------------------------------------------------------------------

    def squeeze_derived(self, cap: int, min_cap: int | None = None, counts: str = "bytes") -> None:
        """Strip the W's; move F and B ops (in slot order) to the earliest free slot where the memory, with
        W's re-derived (each free slot runs the oldest pending W), stays within `cap`; then re-place W's. Runs
        the closed form (`v_squeeze.derived_moves`) for caps from `min_cap` (default
        `v_squeeze.CLOSED_FORM_CAP`: none), else the reference's re-walk (the same moves) on the walk's
        counts kept in bytearrays (`counts="bytes"`: `v_squeeze.derived_bytes` where they fit in a byte,
        `derived_wide` where not; `"wide"`: `derived_wide` always) or in lists (`"lists"`,
        `v_squeeze.derived_walk`, also where the stored walk already breaks the cap)."""
        import numpy as np

        from primuspp.algorithms import v_rows, v_squeeze

        if min_cap is None:
            min_cap = v_squeeze.CLOSED_FORM_CAP
        ranks = np.asarray(self.rank, dtype=np.int64)
        slot = self._arrays()[0].copy()
        self._arr = self._slot = self._occ = None  # the moves below start from `slot`
        slot[_W::3] = -1  # `_strip_ws`
        occ = v_rows.grid(slot, ranks, self.n, self.p, self.width)
        ops, kind, stage, rank = v_rows.columns(occ, ranks, self.n, (_F, _B))
        done = False
        if cap >= min_cap:  # the closed form moves ops in the lists
            self._set_lists(slot, occ)
            done = v_squeeze.derived_moves(self, cap, (ops, kind, stage, rank), occ, min_cap)
            slot = np.array(self.slot, dtype=v_rows.INT)
        if not done:
            first, second = v_rows.inputs(ops, kind, stage, self.n, len(slot))
            inputs = (ops, first, second, rank)
            # the byte and int32 walks move ops in an array, its last entry the slot (-1) of a missing input
            ext = np.append(slot, v_rows.INT(-1))
            view = memoryview(ext)
            done = counts == "bytes" and v_squeeze.derived_bytes(view, cap, inputs, occ)
            if not done and counts != "lists":
                done = v_squeeze.derived_wide(view, cap, inputs, occ)
            if done:
                slot = ext[:-1]
            else:
                self._set_lists(slot, occ)
                pend, live = v_rows.walks(occ)
                v_squeeze.derived_walk(self, cap, inputs, pend.tolist(), live.tolist())
                slot = np.array(self.slot, dtype=v_rows.INT)
        occ = v_rows.grid(slot, ranks, self.n, self.p, self.width)
        v_rows.fill_ws(occ, slot)  # `_place_ws` on every rank
        self._set_arrays(slot, occ)

    def squeeze_derived_reference(self, cap: int) -> None:
        """Reference of `squeeze_derived`: the walk re-walked slot by slot after each tried move."""
        self._fresh = None
        self._strip_ws()
        self._derived_moves_reference(cap, self._op_columns((_F, _B)))
        for r in range(self.p):
            self._place_ws(r)

    def _strip_ws(self) -> None:
        """Take every W off its slot (the derived squeeze re-derives them)."""
        self._fresh = None
        slot, occ, rank, n = self.slot, self.occ, self.rank, self.n
        for w in range(_W, len(slot), 3):
            t = slot[w]
            if t >= 0:
                occ[rank[(w // 3) % n]][t] = -1
                slot[w] = -1

    def _derived_moves_reference(self, cap: int, columns) -> None:
        """The moves of the derived squeeze, `columns` the F's and B's in slot order (`_op_columns`)."""
        slot, occ, n = self.slot, self.occ, self.n
        states = [self._walk(r) for r in range(self.p)]
        for op, kind, s, r in zip(*columns, strict=True):
            # earliest(op), inlined
            if kind == _F:
                e = slot[op - 3] + 1 if s else 0
            else:
                e = slot[op - 1] + 1
                if s < n - 1 and slot[op + 3] >= e:
                    e = slot[op + 3] + 1
            cur = slot[op]
            if e >= cur:
                continue
            row = occ[r]
            lo = e
            if kind == _F:  # necessary: one more live activation on [t, cur] (derived W's only move later)
                live = states[r][1]
                lo = cur + 1
                while lo > e and live[lo - 1] < cap:
                    lo -= 1
            while lo < cur:
                try:
                    t = row.index(-1, lo, cur)
                except ValueError:
                    break
                if self._try_move(r, states[r], op, t, cur, cap):
                    slot[op] = t
                    break
                lo = t + 1

    def _walk(self, r: int) -> tuple[list[int], list[int]]:
        """(pending B's, live chunks) before each slot, W's derived: a B adds a pending W, a free slot runs
        one if any (then one chunk fewer is live). The count of W's run before slot t follows the same
        queueing identity as `_place_ws`."""
        import numpy as np

        ops = np.array(self.occ[r], dtype=np.int64)
        is_f = (ops >= 0) & (ops % 3 == _F)
        is_b = (ops >= 0) & ~is_f
        free = ops < 0
        before_b = np.concatenate(([0], np.cumsum(is_b)))
        before_f = np.concatenate(([0], np.cumsum(is_f)))
        before_free = np.concatenate(([0], np.cumsum(free)))
        run = before_free + np.minimum.accumulate(before_b - before_free)
        return (before_b - run).tolist(), (before_f - run).tolist()

    def _try_move(
        self, r: int, state: tuple[list[int], list[int]], op: int, t: int, cur: int, cap: int
    ) -> bool:
        """Move `op` from slot cur to the free slot t if, with W's re-derived from t on, the live chunks stay
        within `cap`; keep `state` (the walk) in step either way."""
        row = self.occ[r]
        row[cur], row[t] = -1, op
        failed = self._rewalk(row, state, t, cur, cap)
        if failed < 0:
            return True
        row[cur], row[t] = op, -1
        self._rewalk(row, state, t, failed, cap + len(row))  # repair the walk up to where it stopped
        return False

    @staticmethod
    def _rewalk(row: list[int], state: tuple[list[int], list[int]], t: int, cur: int, cap: int) -> int:
        """Re-derive the walk from slot t in place until it rejoins the stored one past slot cur. Return -1,
        or the slot at which the live chunks would exceed `cap` (the walk is then written up to there)."""
        pend, live = state
        q, lv = pend[t], live[t]
        end = len(row)
        u = t
        while u < end:
            if u > cur and q == pend[u] and lv == live[u]:
                return -1
            pend[u], live[u] = q, lv
            op = row[u]
            if op >= 0:
                if op % 3 == _F:
                    lv += 1
                    if lv > cap:
                        return u
                else:
                    q += 1
            elif q:
                q -= 1
                lv -= 1
            u += 1
        pend[end], live[end] = q, lv
        return -1

    # -- result ---------------------------------------------------------------------------------------------

    def order(self) -> ArrayOrder:
        """Each rank's occupied slots in slot order, as an `ArrayOrder` (`v_rows.order_of`: no Node is
        built until someone reads one)."""
        from primuspp.algorithms import v_rows

        return v_rows.order_of(self._arrays()[1], self.n)

    def peak(self) -> int:
        """Most live chunk activations of any rank in any slot (`_profile`)."""
        from primuspp.algorithms import v_rows

        return int(v_rows.profiles(self._arrays()[1]).max())

    def peak_reference(self) -> int:
        return max(max(self._profile(r)) for r in range(self.p))


@lru_cache(maxsize=1024)
def estimated_peak(p: int, block: Block) -> int:
    """Live chunks of the block's steady state from the activations' lifespans (F to the end of its W,
    taken right after B), within one of `block_peak`; cheap enough to rank a whole catalog (and kept per
    (p, block): the V family ranks its blocks on every build)."""
    fo, bo = _offsets(p, block)
    n = 2 * p
    return max(
        -(-(bo[r] - fo[r] + 2) // PERIOD) - (-(bo[n - 1 - r] - fo[n - 1 - r] + 2) // PERIOD) for r in range(p)
    )


def block_peak(p: int, m: int, block: Block) -> int:
    """Live chunk activations the repeated block needs on its busiest rank."""
    return SlotSchedule(p, m, *offsets(p, block), tighten=False).peak()


def squeezed_orders(
    p: int,
    m: int,
    block: Block,
    cap: int,
    both: bool = True,
    report: dict | None = None,
    period: bool = True,
) -> tuple[int, list[tuple[str, list[list[Node]]]]]:
    """(peak of the repeated block, orders): the block repeated m times and squeezed under `cap` live
    chunks — the derived-W squeeze alone, and the explicit squeeze followed by the derived one (`both=False`:
    only the block's preferred one). No orders if the block itself needs more than `cap`.

    For long m the orders come from those of a short m0 and a somewhat longer m0 + d, the steady-state
    period inserted m - m0 times (`v_period`: the same orders, checked on every run; where the check
    fails, the full squeeze runs; `period=False`: the full squeeze always). Only m0 is squeezed: m0 + d's
    moves are copied from it where `v_proof` proves them (else squeezed too). `report["squeeze"]`, if a
    report is given, says which ran."""
    from primuspp.algorithms import v_period, v_proof

    offs = offsets(p, block)
    variants = ("derived", "explicit") if both else (block.squeeze,)
    lead, ratio = v_proof.lead(p, block.name, both), v_proof.RATIO
    if period and v_period.applies(m, v_period.starts(cap)[0] + lead, ratio):
        from primuspp.algorithms import v_rows

        # the repeated block's memory is an order property: the untightened repetition's is the same
        peak = v_rows.raw_peak(p, m, *offs)
        if peak > cap:
            _said(report, "full")
            return peak, []
        # the first start skipped where it is known to fail (`v_period.late`, a measured rule)
        unit = block.f0 == block.f1 == block.b1 == block.b0 == 1
        skip = int(v_period.late(estimated_peak(p, block), peak, unit))
        if not v_period.applies(m, v_period.starts(cap)[skip] + lead, ratio):
            _said(report, "full (the first start would fail, m is too short for the second)")
            return _squeezed(p, m, block.name, offs, cap, variants)

        def squeeze(k: int):
            return _squeezed(p, k, block.name, offs, cap, variants)[1]

        def pair(k: int, k1: int):  # the longer one's moves copied from the shorter one's where proven
            return v_proof.squeezed(p, k, k1, block.name, offs, cap, variants, False)

        found = v_period.extended(squeeze, m, cap, ratio, skip=skip, pair=pair, lead=lead)
        if found is not None:
            _said(report, f"period (from m = {found[0]})")
            return peak, found[1]
        _said(report, "full (period check failed)")
    else:
        _said(report, "full")
    return _squeezed(p, m, block.name, offs, cap, variants)


def _said(report: dict | None, how: str) -> None:
    if report is not None:
        report["squeeze"] = how


def _squeezed(
    p: int, m: int, name: str, offs: tuple[list[int], list[int]], cap: int, variants: tuple[str, ...]
) -> tuple[int, list[tuple[str, ArrayOrder]]]:
    """`squeezed_orders` by the full squeezes (the reference of the period extension)."""
    base = SlotSchedule(p, m, *offs)
    peak = base.peak()
    if peak > cap:
        return peak, []
    out = []
    for i, variant in enumerate(variants):
        sched = base.copy() if i < len(variants) - 1 else base
        if variant == "explicit":
            sched.squeeze_explicit(cap)
        sched.squeeze_derived(cap)
        out.append((f"{name}/{variant}", sched.order()))
    return peak, out
