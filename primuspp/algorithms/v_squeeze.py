"""Fast paths of the V squeezes (`vshape.SlotSchedule`), move for move the same as the readable ones there.

Why a second copy: nearly every op of a V schedule moves, each by up to about p slots, so the references'
per-slot Python work (the memory profile shifted slot by slot, the walk re-walked after every tried move)
made generation grow as p * (p*m). Here a rank's per-slot counts live in bytearrays: "is the cap reached
in [e, cur)" is one `rfind`, a +-d over a range one `translate`, both in C, and so is "the first free
slot from e" (`find` on a rank's free-slot flags). The explicit squeeze keeps each headroom in one byte
for caps up to 253 (`_explicit_one_digit`) and as two base-255 digits above (`_explicit_two_digits`:
caps over 253 come at p >= 128), moving ops in an int32 array and handing the schedule arrays, not
lists; `_Wide` (the same digits, the low digit's 255 free to mark a slot a count does not apply to) keeps
the closed form's counts. The derived squeeze runs the
reference's walk with its long stretches shifted rather than walked (between the slots where the stored
walk is idle the tried move's walk is the stored one plus a constant), on bytearrays where its counts fit
(`derived_bytes`: caps up to 253) and on int32 counts in bytearrays otherwise (`derived_wide`); the
reference's walk on lists (`derived_walk`) and a closed form (`derived_moves`) stay for comparison and
for `SlotSchedule.squeeze_derived`'s options. The loops read each op's inputs from arrays
(`v_rows.inputs`), a chunk at a time.

tests/algorithms/test_v_squeeze.py holds every fast path equal to its reference (slots and rows).
"""

from __future__ import annotations

import numpy as np

from primuspp.algorithms import v_rows

_F, _B, _W = 0, 1, 2
_DELTAS = (-3, -2, -1, 1, 2, 3)
#: byte maps of a +-d on base-255 low digits, keeping the 255 mark
_WIDE = {d: bytes(255 if i == 255 else (i + d) % 255 for i in range(256)) for d in _DELTAS}
_INC, _DEC = _WIDE[1], _WIDE[-1]
#: largest count `_Wide` holds
WIDE_MAX = 255 * 256 - 1


class _Wide:
    """Non-negative counts per slot as two base-255 digits (`lo`, `hi`); `lo` 255 marks a slot outside
    the set the counts are kept for (it stays 255 under shifts). numpy views share the bytes for the rare
    carry across digits."""

    __slots__ = ("hi", "hi_n", "lo", "lo_n")

    def __init__(self, values: np.ndarray, member: np.ndarray | None = None) -> None:
        lo, hi = values % 255, values // 255
        if member is not None:
            lo, hi = np.where(member, lo, 255), np.where(member, hi, 0)
        self.lo = bytearray(lo.astype(np.uint8).tobytes())
        self.hi = bytearray(hi.astype(np.uint8).tobytes())
        self.lo_n = np.frombuffer(self.lo, dtype=np.uint8)
        self.hi_n = np.frombuffer(self.hi, dtype=np.uint8)

    @classmethod
    def rows(cls, values: np.ndarray) -> list[_Wide]:
        """One `_Wide` per row of a 2-D array of counts (the digits computed for all rows at once)."""
        lo = (values % 255).astype(np.uint8)
        hi = (values // 255).astype(np.uint8)
        out = []
        for low, high in zip(lo, hi, strict=True):
            wide = object.__new__(cls)
            wide.lo, wide.hi = bytearray(low.tobytes()), bytearray(high.tobytes())
            wide.lo_n = np.frombuffer(wide.lo, dtype=np.uint8)
            wide.hi_n = np.frombuffer(wide.hi, dtype=np.uint8)
            out.append(wide)
        return out

    def shift(self, a: int, b: int, d: int) -> None:
        """counts[a:b] += d (|d| <= 3)."""
        if a >= b:
            return
        lo = self.lo
        for v in range(255 - d, 255) if d > 0 else range(-d):
            if lo.find(v, a, b) >= 0:  # some low digit wraps: carry into the high one
                seg = self.lo_n[a:b]
                if d > 0:
                    self.hi_n[a:b] += ((seg >= 255 - d) & (seg != 255)).view(np.uint8)
                else:
                    self.hi_n[a:b] -= (seg < -d).view(np.uint8)
                break
        lo[a:b] = lo[a:b].translate(_WIDE[d])

    def first_at_most(self, a: int, b: int, k: int) -> int:
        """First slot in [a, b) whose count is <= k (k < 255), or -1."""
        lo, hi, best = self.lo, self.hi, -1
        for v in range(k + 1):
            j = lo.find(v, a, b)
            while j >= 0 and hi[j]:
                j = lo.find(v, j + 1, b)
            if j >= 0:
                best, b = j, j
        return best

    def last_at_most(self, a: int, b: int, k: int) -> int:
        """Last slot in [a, b) whose count is <= k (k < 255), or -1."""
        lo, hi, best = self.lo, self.hi, -1
        for v in range(k + 1):
            j = lo.rfind(v, a, b)
            while j >= 0 and hi[j]:
                j = lo.rfind(v, a, j)
            if j >= 0:
                best, a = j, j + 1
        return best

    def get(self, j: int) -> int:
        """The count at slot j (-1: marked)."""
        lo = self.lo[j]
        return -1 if lo == 255 else lo + 255 * self.hi[j]

    def put(self, j: int, value: int) -> None:
        """Set slot j's count (-1: mark it)."""
        if value < 0:
            self.lo[j], self.hi[j] = 255, 0
        else:
            self.lo[j], self.hi[j] = value % 255, value // 255


def squeeze_explicit(sched, cap: int, arrays=None) -> bool:
    """`SlotSchedule.squeeze_explicit_reference` on the headroom (cap - live chunks) per slot. False
    (nothing changed) where a slot is already over the cap: the caller then runs the reference, which
    allows that. `arrays`: `sched.slot` and `sched.occ` as arrays (`SlotSchedule._arrays`), if at hand.
    The moves edit arrays only (each op's slot in an int32 array, each rank's free slots as byte flags:
    a free slot is one `find`, no exception when there is none); `sched` gets the new arrays
    (`SlotSchedule._set_arrays`), its lists are built only if someone reads them."""
    run = ExplicitRun.start(sched, cap, arrays)
    if run is None:
        return False
    run.run(0, run.size)
    run.finish(sched)
    return True


class ExplicitRun:
    """The explicit squeeze's state (each op's slot, each rank's free-slot flags and headroom digits) and
    its visit list, run a stretch of the list at a time: `squeeze_explicit` runs it whole, `pair` runs the
    common prefix of two schedules once (`adopt`)."""

    __slots__ = ("columns", "ext", "frees", "grid", "highs", "lows", "ranks", "size")

    @classmethod
    def start(cls, sched, cap: int, arrays=None) -> ExplicitRun | None:
        """The state before the first move, or None where a slot is already over the cap (or the
        headroom exceeds what two digits hold)."""
        if arrays is None:
            arr = np.array(sched.slot, dtype=v_rows.INT)
            occ = v_rows.grid(arr, np.asarray(sched.rank, dtype=np.int64), sched.n, sched.p, sched.width)
        else:
            arr, occ = arrays
        room = cap - v_rows.profiles(occ)
        if room.size and (room.min() < 0 or room.max() > WIDE_MAX):
            return None
        self = object.__new__(cls)
        # the loops move ops in an int32 array (as `derived_bytes`), its last entry the slot of a missing
        # input
        self.ext = np.append(arr, v_rows.INT(-1))
        self.ranks = np.asarray(sched.rank, dtype=np.int64)
        self.grid = occ
        n = sched.n
        ops, kind, stage, rank = v_rows.columns(occ, self.ranks, n, (_F, _B, _W))
        first, second = v_rows.inputs(ops, kind, stage, n, len(arr))
        self.columns = (ops, kind, first, second, rank)
        self.size = len(ops)
        self.frees = [bytearray(row.tobytes()) for row in (occ < 0).view(np.uint8)]
        if cap <= 253:  # one digit: headroom never reaches 254, and the F's range holds no 0 (see below)
            self.lows = [bytearray(row.tobytes()) for row in room.astype(np.uint8)]
            self.highs = None
        else:
            self.lows = [bytearray(row.tobytes()) for row in (room % 255).astype(np.uint8)]
            self.highs = [bytearray(row.tobytes()) for row in (room // 255).astype(np.uint8)]
        return self

    def run(self, lo: int, hi: int) -> None:
        """Move the ops of visit positions [lo, hi)."""
        chunks = v_rows.chunked(*(a[lo:hi] for a in self.columns))
        if self.highs is None:
            _explicit_one_digit(chunks, memoryview(self.ext), self.frees, self.lows)
        else:
            _explicit_two_digits(chunks, memoryview(self.ext), self.frees, self.lows, self.highs)

    def adopt(self, other: ExplicitRun, upto: int, ops: np.ndarray) -> None:
        """Take `other`'s state of slots before `upto` and the slots of `ops` (the ops it moved)."""
        self.ext[ops] = other.ext[ops]
        for mine, theirs in ((self.frees, other.frees), (self.lows, other.lows), (self.highs, other.highs)):
            for row, src in zip(mine or (), theirs or (), strict=True):
                row[:upto] = src[:upto]

    def finish(self, sched) -> None:
        """Hand `sched` the new slots and grid."""
        slot = self.ext[:-1]
        sched._set_arrays(slot, v_rows.grid(slot, self.ranks, sched.n, sched.p, sched.width))


def _explicit_one_digit(chunks, slot: memoryview, frees: list[bytearray], lows: list[bytearray]) -> None:
    """The moves of `squeeze_explicit` where every headroom fits one byte with 254 to spare (cap <= 253),
    `lows` each rank's headroom per slot. An F goes past the last slot with no headroom, so the range whose
    headroom drops holds no 0; a W's range ends at most at the cap, below 254."""
    dec, inc = _DEC, _INC
    for chunk in chunks:
        for op, k, a, b, r in zip(*chunk, strict=True):
            e = slot[a]
            x = slot[b]
            if x > e:
                e = x
            e += 1
            cur = slot[op]
            if e >= cur:
                continue
            free = frees[r]
            if k == _F:  # the activation now lives from the new slot on: the cap must hold there
                low = lows[r]
                lo = low.rfind(0, e, cur) + 1  # past the last slot with no headroom
                if lo < e:
                    lo = e
                t = free.find(1, lo, cur)
                if t < 0:
                    continue
                low[t:cur] = low[t:cur].translate(dec)
            else:
                t = free.find(1, e, cur)
                if t < 0:
                    continue
                if k == _W:
                    low = lows[r]
                    low[t + 1 : cur + 1] = low[t + 1 : cur + 1].translate(inc)
            free[cur] = 1
            free[t] = 0
            slot[op] = t


def _explicit_two_digits(
    chunks, slot: memoryview, frees: list[bytearray], lows: list[bytearray], highs: list[bytearray]
) -> None:
    """The moves of `squeeze_explicit` for caps over 253: each headroom as two base-255 digits (`_Wide`'s,
    without marks), the low ones in `lows`, the high ones in `highs`. A no-headroom slot is a low 0 whose
    high digit is 0 (one `rfind`, rarely more); a +-1 over a range is one `translate` of the low digits
    unless one of them wraps (a 0 under -1, a 254 under +1: one `find` says), when numpy views carry."""
    lo_ns = [np.frombuffer(x, dtype=np.uint8) for x in lows]
    hi_ns = [np.frombuffer(x, dtype=np.uint8) for x in highs]
    dec, inc = _DEC, _INC
    for chunk in chunks:
        for op, k, a, b, r in zip(*chunk, strict=True):
            e = slot[a]
            x = slot[b]
            if x > e:
                e = x
            e += 1
            cur = slot[op]
            if e >= cur:
                continue
            free = frees[r]
            if k == _F:  # the activation now lives from the new slot on: the cap must hold there
                low = lows[r]
                j = low.rfind(0, e, cur)  # the last slot with no headroom (a low 0 with a high 0)
                if j >= 0:
                    high = highs[r]
                    while j >= 0 and high[j]:
                        j = low.rfind(0, e, j)
                    lo = j + 1 if j >= 0 else e
                else:
                    lo = e
                t = free.find(1, lo, cur)
                if t < 0:
                    continue
                if low.find(0, t, cur) < 0:  # headroom - 1 on [t, cur), no borrow
                    low[t:cur] = low[t:cur].translate(dec)
                else:
                    seg = lo_ns[r][t:cur]
                    hi_ns[r][t:cur] -= (seg == 0).view(np.uint8)
                    low[t:cur] = low[t:cur].translate(dec)
            else:
                t = free.find(1, e, cur)
                if t < 0:
                    continue
                if k == _W:  # headroom + 1 on [t + 1, cur + 1)
                    low = lows[r]
                    if low.find(254, t + 1, cur + 1) < 0:
                        low[t + 1 : cur + 1] = low[t + 1 : cur + 1].translate(inc)
                    else:
                        seg = lo_ns[r][t + 1 : cur + 1]
                        hi_ns[r][t + 1 : cur + 1] += (seg == 254).view(np.uint8)
                        low[t + 1 : cur + 1] = low[t + 1 : cur + 1].translate(inc)
            free[cur] = 1
            free[t] = 0
            slot[op] = t


#: byte maps of +-k (the counts they shift stay within 0..255)
_SHIFT = {k: bytes((i + k) % 256 for i in range(256)) for k in (-2, -1, 1, 2)}
#: `derived_bytes`' slot kinds
_FREE, _FK, _BK = 0, 1, 2
#: the shortest run of slots `derived_bytes` shifts rather than walks, and how many slots a tried move walks
#: before it looks for one
_SEG, _LEAD = 6, 3


class _ByteCounts:
    """The walk's pending-W and live-chunk counts of every rank as bytearrays (caps <= 253: every count a
    byte): found with `find`/`rfind`, shifted over a range with one `translate`."""

    def __init__(self, pend_all: np.ndarray, live_all: np.ndarray, cap: int) -> None:
        self.cap = cap
        self.pends = [bytearray(row.tobytes()) for row in pend_all.astype(np.uint8)]
        self.lives = [bytearray(row.tobytes()) for row in live_all.astype(np.uint8)]

    def last_full(self, r: int, a: int, b: int) -> int:
        """The last slot in [a, b) whose live count is the cap, or -1."""
        return self.lives[r].rfind(self.cap, a, b)

    def f_at(self, r: int, row: bytearray, v: int, a: int, b: int) -> bool:
        """Whether an F starts in [a, b) with v live chunks."""
        live = self.lives[r]
        j = live.find(v, a, b)
        while j >= 0 and row[j] != _FK:
            j = live.find(v, j + 1, b)
        return j >= 0

    def shift_live(self, r: int, a: int, b: int, d: int) -> None:
        live = self.lives[r]
        live[a:b] = live[a:b].translate(_SHIFT[d])

    def shift_pend(self, r: int, a: int, b: int, d: int) -> None:
        pend = self.pends[r]
        pend[a:b] = pend[a:b].translate(_SHIFT[d])

    def adopt(self, other: _ByteCounts, upto: int) -> None:
        """Take `other`'s counts before slot `upto`."""
        for mine, theirs in ((self.pends, other.pends), (self.lives, other.lives)):
            for row, src in zip(mine, theirs, strict=True):
                row[:upto] = src[:upto]


class _IntCounts:
    """The same counts as int32 in bytearrays (any cap; p >= 128 brings caps over 253), read and written
    through `memoryview`s (Python ints, as fast as bytes), found with a 4-byte `find` (a hit off the 4-byte
    grid is skipped) and shifted over a range by numpy views. The searches look for counts near the cap
    only (within the +-2 a tried move changes them by)."""

    def __init__(self, pend_all: np.ndarray, live_all: np.ndarray, cap: int) -> None:
        self.cap = cap
        pbs = [bytearray(row.tobytes()) for row in pend_all.astype(np.int32)]
        self.lbs = [bytearray(row.tobytes()) for row in live_all.astype(np.int32)]
        self.pends = [memoryview(b).cast("i") for b in pbs]
        self.lives = [memoryview(b).cast("i") for b in self.lbs]
        self.pns = [np.frombuffer(b, dtype=np.int32) for b in pbs]
        self.lns = [np.frombuffer(b, dtype=np.int32) for b in self.lbs]
        self.pat = {v: np.int32(v).tobytes() for v in range(max(cap - 3, 0), cap + 1)}

    def last_full(self, r: int, a: int, b: int) -> int:
        lb, pcap = self.lbs[r], self.pat[self.cap]
        j = lb.rfind(pcap, 4 * a, 4 * b)
        while j >= 0 and j & 3:  # off the 4-byte grid
            j = lb.rfind(pcap, 4 * a, j + 3)
        return j >> 2 if j >= 0 else -1

    def f_at(self, r: int, row: bytearray, v: int, a: int, b: int) -> bool:
        lb, pv = self.lbs[r], self.pat[v]
        j = lb.find(pv, 4 * a, 4 * b)
        while j >= 0 and (j & 3 or row[j >> 2] != _FK):
            j = lb.find(pv, j + 1, 4 * b)
        return j >= 0

    def shift_live(self, r: int, a: int, b: int, d: int) -> None:
        self.lns[r][a:b] += d

    def shift_pend(self, r: int, a: int, b: int, d: int) -> None:
        self.pns[r][a:b] += d

    def adopt(self, other: _IntCounts, upto: int) -> None:
        """Take `other`'s counts before slot `upto`."""
        for mine, theirs in ((self.pns, other.pns), (self.lns, other.lns)):
            for row, src in zip(mine, theirs, strict=True):
                row[:upto] = src[:upto]


def derived_bytes(slot: memoryview, cap: int, columns, occ: np.ndarray) -> bool:
    """`derived_walk` with the walk's counts in bytearrays (`_ByteCounts`, caps <= 253). False (nothing
    changed) where the cap or the stored walk does not fit: the caller then runs `derived_wide`. The walk
    itself is `_derived`."""
    return cap <= 253 and _derived(slot, cap, columns, occ, _ByteCounts)


def derived_wide(slot: memoryview, cap: int, columns, occ: np.ndarray) -> bool:
    """`derived_bytes` for any cap, the counts as int32 (`_IntCounts`): the same moves. False (nothing
    changed) where the stored walk already breaks the cap."""
    return _derived(slot, cap, columns, occ, _IntCounts)


def _derived(slot: memoryview, cap: int, columns, occ: np.ndarray, storage: type) -> bool:
    """`DerivedRun` over the whole visit list (`columns`: ops, first inputs, second inputs, ranks) on `slot`
    (each op's slot, then -1), the counts kept in `storage` (`_ByteCounts` or `_IntCounts`). False
    (nothing changed) where the stored walk already breaks the cap."""
    run = DerivedRun.start(slot, cap, columns, occ, storage)
    if run is None:
        return False
    run.run(0, run.size)
    return True


class DerivedRun:
    """The derived squeeze's moves with the tried move's walk (`SlotSchedule._rewalk` from t) inlined and
    shortened, the counts kept in `storage` (`_ByteCounts` or `_IntCounts`), run a stretch of the visit
    list at a time: `derived_bytes` and `derived_wide` run it whole, `pair` runs the common prefix of two
    schedules once (`adopt`; `run` returns the furthest slot its walks read, which says whether the other
    schedule would have read the same).

    The stored walk keeps live <= cap at every slot (checked once; a move is kept only if its walk does),
    so no F starts with live == cap (the next slot would hold cap + 1). Hence a tried F at t (past the
    last slot with live == cap in [e, cur]) never breaks the cap itself, and no F in [t, cur) starts at
    cap - 1 either (the slot after it would be full); a tried B at t with live == cap before it fails at
    once if an F follows at t + 1 (no W runs at t any more, so that F starts at cap): the move is skipped
    without walking, as the reference's walk and repair leave the walk as it was.

    On (t, cur] the old and new rows agree, so the new walk is the stored one plus (dq, dl), dq >= 0 and
    dl - dq = 1 for an F, -1 for a B: a free slot runs a W in both walks or, where the stored walk is
    idle (no W pending), only in the new one, which lowers dq and dl by one. Between such idle slots
    (found with `find` in `idle`, a byte flag per slot, set where the walk is written) the new walk is a
    shift of the stored one: runs of `_SEG` or more slots are shifted with `translate` (an F there breaks
    the cap iff one starts at cap - dl, the first to reach it), shorter ones walked. Where dq is 0 (dl 1
    for an F, -1 for a B: by the above, no F reaches the cap) the rest up to cur is one shift; past cur,
    where the new walk holds no more live chunks than the stored one, it is walked until the walks rejoin.

    `slot` holds every op's slot (a memoryview of int32: no list of Python ints to chase, which at
    p = 256 is 3 M objects; one more entry, -1, the slot of a missing input); the rows are bytearrays of
    kinds (`_FREE`, `_FK`, `_BK`): a free slot is one `find` (no exception when there is none). The
    caller rebuilds the grid from `slot`."""

    __slots__ = ("cap", "columns", "counts", "end", "ext", "idles", "rows", "size")

    @classmethod
    def start(cls, slot: memoryview, cap: int, columns, occ: np.ndarray, storage: type) -> DerivedRun | None:
        """The state before the first move, or None where the stored walk already breaks the cap."""
        pend_all, live_all = v_rows.walks(occ)
        if live_all.max(initial=0) > cap:
            return None
        self = object.__new__(cls)
        code = (occ % 3 + 1).astype(np.uint8)
        code[occ < 0] = _FREE
        self.rows = [bytearray(row.tobytes()) for row in code]
        kinds = np.full(live_all.shape, _FREE, dtype=np.uint8)
        kinds[:, :-1] = code
        del code
        self.counts = storage(pend_all, live_all, cap)
        self.idles = [bytearray(row.tobytes()) for row in ((kinds == _FREE) & (pend_all == 0)).view(np.uint8)]
        self.cap, self.ext, self.columns = cap, slot, columns
        self.size = len(columns[0])
        self.end = occ.shape[1]  # every row's length
        return self

    def adopt(self, other: DerivedRun, upto: int, ops: np.ndarray) -> None:
        """Take `other`'s state of slots before `upto` (rows, walks, idle flags) and the slots of `ops`."""
        mine, theirs = np.asarray(self.ext), np.asarray(other.ext)
        mine[ops] = theirs[ops]
        for rows, src in ((self.rows, other.rows), (self.idles, other.idles)):
            for row, row_src in zip(rows, src, strict=True):
                row[:upto] = row_src[:upto]
        self.counts.adopt(other.counts, upto)

    def run(self, lo: int, hi: int) -> int:
        """Move the ops of visit positions [lo, hi); returns the furthest slot a walk read (-1: none)."""
        slot, cap, counts, rows, idles, end = self.ext, self.cap, self.counts, self.rows, self.idles, self.end
        columns = [c[lo:hi] for c in self.columns]
        pends, lives = counts.pends, counts.lives
        seg, lead = _SEG, _LEAD
        reach = -1
        for chunk in v_rows.chunked(*columns):
            for op, a, b, r in zip(*chunk, strict=True):
                e = slot[a]
                x = slot[b]
                if x > e:
                    e = x
                e += 1
                cur = slot[op]
                if e >= cur:
                    continue
                row = rows[r]
                lo = row.find(_FREE, e, cur)  # the first free slot the op may take, if any
                if lo < 0:
                    continue
                live = lives[r]
                k = op % 3 + 1
                is_f = k == _FK
                if is_f:  # one more live chunk on [t, cur]: past the last full slot there
                    j = counts.last_full(r, lo, cur + 1)
                    if j >= 0:
                        lo = j + 1
                pend = pends[r]
                idle = idles[r]
                while lo < cur:
                    t = row.find(_FREE, lo, cur)
                    if t < 0:
                        break
                    # the walk from t with the op at t and cur free
                    if is_f:
                        lv = live[t] + 1  # <= cap: t is past the last slot with live == cap
                        q = pend[t]
                    else:
                        lv = live[t]
                        if lv == cap and t + 1 < cur and row[t + 1] == _FK:  # that F would start at cap
                            lo = t + 1
                            continue
                        q = pend[t] + 1
                    row[cur] = _FREE
                    row[t] = k
                    failed = -1
                    u = t + 1
                    stop = u + lead
                    while u <= cur:
                        if q == pend[u]:  # dq is 0 from here to cur: the stored walk + dl live chunks
                            dl = lv - live[u]  # no F there reaches the cap (see above)
                            if dl:
                                counts.shift_live(r, u, cur + 1, dl)
                            lv = live[cur]  # slot cur, now free
                            q = pend[cur]
                            idle[cur] = q == 0
                            if q:
                                q -= 1
                                lv -= 1
                            u = cur + 1
                            break
                        if u >= stop:  # past the walked lead: look for a long run
                            i = idle.find(1, u, cur)  # the next slot where the stored walk is idle
                            if i < 0:
                                i = cur
                            if i - u >= seg:  # the stored walk + (dq, dl) on [u, i]
                                dl = lv - live[u]
                                # an F in [u, i) with live == cap - dl, the first to reach the cap
                                if dl > 0 and counts.f_at(r, row, cap - dl, u, i):
                                    failed = u - 1  # nothing written from u on
                                    break
                                counts.shift_pend(r, u, i + 1, q - pend[u])
                                if dl:
                                    counts.shift_live(r, u, i + 1, dl)
                                q = pend[i] - 1  # slot i is free; the new walk runs a W there
                                lv = live[i] - 1
                                idle[i] = 0
                                u = stop = i + 1
                                continue
                            stop = i + 1  # a short run: walked
                        pend[u] = q
                        live[u] = lv
                        x = row[u]
                        if x:
                            if x == _FK:
                                lv += 1
                                if lv > cap:
                                    failed = u
                                    break
                            else:
                                q += 1
                        else:
                            idle[u] = q == 0
                            if q:
                                q -= 1
                                lv -= 1
                        u += 1
                    if failed < 0:  # past cur: until the walks rejoin
                        failed = _walk_to_rejoin(row, pend, live, idle, u, q, lv, cap, end)
                        if failed < 0:
                            if ~failed > reach:
                                reach = ~failed
                            slot[op] = t
                            idle[t] = 0  # slot t is taken
                            break
                    row[cur] = k
                    row[t] = _FREE
                    u = _rewalk_marked(row, pend, live, idle, t, failed, end)  # repair up to there
                    if u > reach:
                        reach = u
                    idle[cur] = 0  # the op's slot again
                    lo = t + 1
        return reach


def _rewalk_marked(row, pend, live, idle: bytearray, t: int, cur: int, end: int) -> int:
    """`_rewalk` without a cap (the repair after a failed move) that also writes `idle` (1 at a free slot
    with no W pending) of `derived_bytes` and `derived_wide` (`row` their kinds); returns the slot where
    the walk rejoined the stored one (or `end`)."""
    q, lv = pend[t], live[t]
    u = t
    while u <= cur:
        pend[u] = q
        live[u] = lv
        op = row[u]
        if op:
            if op == _FK:
                lv += 1
            else:
                q += 1
        else:
            idle[u] = q == 0
            if q:
                q -= 1
                lv -= 1
        u += 1
    return ~_walk_to_rejoin(row, pend, live, idle, u, q, lv, _NO_CAP, end)


#: a cap no count reaches (`_rewalk_marked`'s walk is not capped)
_NO_CAP = 1 << 62


def _walk_to_rejoin(row, pend, live, idle: bytearray, u: int, q: int, lv: int, cap: int, end: int) -> int:
    """Write the walk from slot u (q W's pending, lv live chunks before it) over the stored one until the
    two agree again or the row ends (then its final counts at `end`): ~u (negative) for the slot u where they
    agree (or `end`), the last it read; or the slot where an F takes the live count over `cap` (written up
    to there)."""
    while u < end:
        if q == pend[u] and lv == live[u]:
            return ~u
        pend[u] = q
        live[u] = lv
        x = row[u]
        if x:
            if x == _FK:
                lv += 1
                if lv > cap:
                    return u
            else:
                q += 1
        else:
            idle[u] = q == 0
            if q:
                q -= 1
                lv -= 1
        u += 1
    pend[end] = q
    live[end] = lv
    return ~end


def derived_walk(sched, cap: int, columns, pend_rows: list[list[int]], live_rows: list[list[int]]) -> None:
    """`SlotSchedule._derived_moves_reference` with `_try_move` and `_rewalk` inlined (W's already
    stripped): `columns` the F's and B's in slot order as arrays (ops, first inputs, second inputs,
    ranks: `v_rows.columns`, `v_rows.inputs`), `pend_rows` and `live_rows` every rank's walk
    (`v_rows.walks`). The re-walk runs in two stretches, up to the moved op's old slot and then until it
    rejoins the stored walk."""
    slot, occ = sched.slot, sched.occ
    # live <= cap everywhere stays so (a move is kept only if no F then exceeds the cap): the last slot in
    # [e, cur] with live >= cap is then the last with live == cap, found by list.index on the reversed span
    full_at_cap = all(max(live) <= cap for live in live_rows)
    slot.append(-1)  # the slot of a missing input
    try:
        for chunk in v_rows.chunked(*columns):
            for op, a, b, r in zip(*chunk, strict=True):
                e = slot[a]
                x = slot[b]
                if x > e:
                    e = x
                e += 1
                cur = slot[op]
                if e >= cur:
                    continue
                row, pend, live = occ[r], pend_rows[r], live_rows[r]
                lo = e
                if op % 3 == _F:  # necessary: one more live activation on [t, cur]
                    if full_at_cap:
                        span = live[e : cur + 1]
                        span.reverse()
                        try:
                            lo = cur + 1 - span.index(cap)
                        except ValueError:
                            lo = e
                    else:
                        lo = cur + 1
                        while lo > e and live[lo - 1] < cap:
                            lo -= 1
                end = len(row)
                while lo < cur:
                    try:
                        t = row.index(-1, lo, cur)
                    except ValueError:
                        break
                    row[cur] = -1
                    row[t] = op
                    failed = _rewalk(row, pend, live, t, cur, cap, end)
                    if failed < 0:
                        slot[op] = t
                        break
                    row[cur] = op
                    row[t] = -1
                    # repair the walk up to where it stopped
                    _rewalk(row, pend, live, t, failed, cap + end, end)
                    lo = t + 1
    finally:
        slot.pop()


def _rewalk(row: list[int], pend: list[int], live: list[int], t: int, cur: int, cap: int, end: int) -> int:
    """`SlotSchedule._rewalk`: re-derive the walk from slot t in place until it rejoins the stored one past
    slot cur; -1, or the slot at which the live chunks would exceed `cap` (the walk written up to there).
    Two stretches: up to cur (no rejoin there), then until the walks rejoin."""
    q, lv = pend[t], live[t]
    for u in range(t, cur + 1):
        pend[u] = q
        live[u] = lv
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
    u = cur + 1
    while u < end:
        if q == pend[u] and lv == live[u]:
            return -1
        pend[u] = q
        live[u] = lv
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
    pend[end] = q
    live[end] = lv
    return -1


# -- the derived squeeze ---------------------------------------------------------------------------------
#
# The reference keeps, per rank, the walk of the row with W's derived: pend(u) and live(u), the pending W's
# and the live chunks before slot u, and re-walks them slot by slot after each tried move. Here the change a
# move makes is computed in closed form. Write x(u) = B's - free slots before u and M(u) its running
# minimum; W's run before u = free slots + M(u), and M drops by one after each idle slot (free, no W
# pending). Moving an op from slot cur to the free slot t adds D to x on [t+1, cur] (D = 1 for an F: one
# free slot fewer; 2 for a B: also one B more), so M grows by delta(u) = min(D, idle slots in [t, u)) there,
# and past cur by min(delta(cur), the least pend since cur), which reaches 0 where the walks rejoin. Then
# on [t+1, cur] pend += D - delta and live += (3 - D) - delta (an F is one more live chunk), past cur both
# -= delta: a handful of range shifts. The move fails if some F (the moved one at t included) would start
# with live >= cap; given that no F of the current row does (checked once, kept by every move), only F's in
# [t, cur) can, where live grows.


class _Rank:
    """One rank's walk as `_Wide` counts: pending W's (`pend`), headroom cap - live (`room`), and the same
    two kept only at free slots (`fpend`: an idle slot is a 0 there) and at F slots (`froom`)."""

    __slots__ = ("fpend", "froom", "pend", "room", "size")

    def __init__(self, ops: np.ndarray, cap: int) -> None:
        is_f, free, pend, live = _walk(ops)
        room = cap - live
        self.size = len(ops) + 1
        self.pend, self.room = _Wide(pend), _Wide(room)
        self.froom = _Wide(room, np.concatenate((is_f, [False])))
        self.fpend = _Wide(pend, np.concatenate((free, [False])))


def _walk(ops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(F slots, free slots, pending W's before each slot, live chunks before each slot) of a row with
    W's derived (`SlotSchedule._walk`, as arrays)."""
    is_f = (ops >= 0) & (ops % 3 == _F)
    is_b = (ops >= 0) & ~is_f
    free = ops < 0
    before_b = np.concatenate(([0], np.cumsum(is_b)))
    before_f = np.concatenate(([0], np.cumsum(is_f)))
    before_free = np.concatenate(([0], np.cumsum(free)))
    run = before_free + np.minimum.accumulate(before_b - before_free)
    return is_f, free, before_b - run, before_f - run


def _walk_ok(ops: np.ndarray, cap: int) -> bool:
    """Whether the derived walk of a row keeps every F within the cap (live before it < cap), which the
    closed form needs (the reference allows a cap broken already); the counts then fit `_Wide`."""
    is_f, _, _, live = _walk(ops)
    return bool(np.all(live[:-1][is_f] < cap)) and cap <= WIDE_MAX


#: caps from which `squeeze_derived` runs the closed form by default: none. Its fixed cost per tried move (a
#: dozen C calls) beat the plain walk for long walks, but `derived_wide` (the walk with its long runs
#: shifted) ties with it for zbv at p = 256 after the explicit squeeze (2.2 s at m = 512) and wins elsewhere
#: (p = 256 from the tightened block 3.5 s against 4.8; v-half at p = 200 0.6 s against 2.4). It stays,
#: held equal to the reference, for `min_cap`.
CLOSED_FORM_CAP = WIDE_MAX + 1


def derived_moves(sched, cap: int, columns, occ: np.ndarray, min_cap: int = CLOSED_FORM_CAP) -> bool:
    """The moves of `SlotSchedule.squeeze_derived_reference` (W's already stripped), `columns` the F's and
    B's in slot order as arrays (ops, kinds, stages, ranks: `v_rows.columns`), `occ` the grid. False
    (nothing changed) for a cap under `min_cap` live chunks or where the closed form does not apply."""
    if cap < min_cap:
        return False
    rows = list(occ)
    if not all(_walk_ok(row, cap) for row in rows):
        return False
    ranks = [_Rank(row, cap) for row in rows]
    slot, occ, last = sched.slot, sched.occ, sched.n - 1  # the lists the moves edit
    for chunk in v_rows.chunked(*columns):
        for op, kind, s, r in zip(*chunk, strict=True):
            if kind == _F:
                e = slot[op - 3] + 1 if s else 0
            else:
                e = slot[op - 1] + 1
                if s < last and slot[op + 3] >= e:
                    e = slot[op + 3] + 1
            cur = slot[op]
            if e >= cur:
                continue
            row, st = occ[r], ranks[r]
            lo = e
            if kind == _F:  # one more live chunk on [t, cur] at least: the last full slot there bounds t
                j = st.room.last_at_most(e, cur + 1, 0)
                lo = j + 1 if j >= e else e
            while lo < cur:
                try:
                    t = row.index(-1, lo, cur)
                except ValueError:
                    break
                if _try_move(st, row, op, kind, t, cur):
                    slot[op] = t
                    break
                lo = t + 1
    return True


def _try_move(st: _Rank, row: list[int], op: int, kind: int, t: int, cur: int) -> bool:
    """Move `op` from slot cur to the free slot t unless an F would then break the cap; keep the walk."""
    pend, room, froom, fpend = st.pend, st.room, st.froom, st.fpend
    if kind == _F:
        if room.get(t) == 0:  # the moved F itself
            return False
        d, c = 1, 2
    else:
        d, c = 2, 1
    u = fpend.first_at_most(t, cur, 0)
    if u < 0:  # the common case, no idle slot in [t, cur): delta 0 throughout, nothing changes past cur
        if t + 1 < cur and froom.first_at_most(t + 1, cur, c) >= 0:
            return False
        row[cur], row[t] = -1, op
        pend.shift(t + 1, cur + 1, d)
        fpend.shift(t + 1, cur + 1, d)
        room.shift(t + 1, cur + 1, -c)
        froom.shift(t + 1, cur + 1, -c)
        if kind == _F:
            froom.put(t, room.get(t))
            froom.put(cur, -1)
        fpend.put(t, -1)
        fpend.put(cur, pend.get(cur))
        return True
    bounds = [t + 1, u + 1]  # delta is 0 on [t+1, first idle + 1), then 1, ..., at most d
    while len(bounds) <= d:
        u = fpend.first_at_most(u + 1, cur, 0)
        if u < 0:
            break
        bounds.append(u + 1)
    steps = len(bounds) - 1
    bounds.append(cur + 1)
    for delta in range(steps + 1):  # an F in [t+1, cur) left with live >= cap
        a, b, k = bounds[delta], min(bounds[delta + 1], cur), c - delta
        if a < b and k >= 0 and froom.first_at_most(a, b, k) >= 0:
            return False
    row[cur], row[t] = -1, op
    for delta in range(steps + 1):
        a, b = bounds[delta], bounds[delta + 1]
        if a < b:
            if d != delta:
                pend.shift(a, b, d - delta)
                fpend.shift(a, b, d - delta)
            if c != delta:
                room.shift(a, b, delta - c)
                froom.shift(a, b, delta - c)
    dc, a, size = steps, cur + 1, st.size
    while dc > 0 and a < size:  # past cur: both -= delta until the walks rejoin
        b = pend.first_at_most(a, size, dc - 1)
        if b < 0:
            b = size
        pend.shift(a, b, -dc)
        fpend.shift(a, b, -dc)
        room.shift(a, b, dc)
        froom.shift(a, b, dc)
        if b == size:
            break
        dc, a = pend.get(b), b
    if kind == _F:  # the F-headroom follows the F
        froom.put(t, room.get(t))
        froom.put(cur, -1)
    fpend.put(t, -1)
    fpend.put(cur, pend.get(cur))
    return True
