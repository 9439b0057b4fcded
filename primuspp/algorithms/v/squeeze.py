"""The two squeezes of a V slot grid (`v_grid.SlotSchedule`), move for move the readable references of
tests/oracles/v_slots.py.

Nearly every op of a V schedule moves, each by up to about p slots, so per-slot Python work (a memory
profile shifted slot by slot, a walk re-walked after every tried move) would make generation grow as
p * (p*m). Here a rank's per-slot counts live in bytearrays: "is the cap reached in [e, cur)" is one
`rfind`, a +-d over a range one `translate`, both in C, and so is "the first free slot from e" (`find` on
a rank's free-slot flags). The loops read each op's inputs from arrays (`v_rows.inputs`) and move ops in an
int32 array whose last entry, -1, is the slot of a missing input.
"""

from __future__ import annotations

import numpy as np

from primuspp.algorithms.v import rows as v_rows

_F, _B, _W = 0, 1, 2
#: byte maps of a +-1 on base-255 low digits
_INC = bytes((i + 1) % 255 for i in range(256))
_DEC = bytes((i - 1) % 255 for i in range(256))
#: largest headroom two base-255 digits hold
WIDE_MAX = 255 * 256 - 1


def explicit(slot: np.ndarray, occ: np.ndarray, ranks: np.ndarray, cap: int) -> np.ndarray:
    """The new slots after the explicit squeeze: each op, in slot order, to the earliest free slot its
    inputs allow where, for an F, the headroom (cap - live chunks) stays positive up to its old slot; a W
    moved earlier gives headroom back. Each rank's headroom is kept as two base-255 digits (`lows`,
    `highs`; caps over 253 come at p >= 128): a no-headroom slot is a low 0 whose high digit is 0 (one
    `rfind`, rarely more); a +-1 over a range is one `translate` of the low digits unless one of them wraps
    (a 0 under -1, a 254 under +1: one `find` says), when numpy views carry."""
    room = cap - v_rows.profiles(occ)
    if room.size and (room.min() < 0 or room.max() > WIDE_MAX):
        raise ValueError(f"explicit squeeze: the grid does not fit the cap of {cap} live chunks")
    ext = np.append(slot, v_rows.INT(-1))
    n = len(ranks)
    ops, kind, stage, rank = v_rows.columns(occ, ranks, n, (_F, _B, _W))
    first, second = v_rows.inputs(ops, kind, stage, n, len(slot))
    frees = [bytearray(row.tobytes()) for row in (occ < 0).view(np.uint8)]
    lows = [bytearray(row.tobytes()) for row in (room % 255).astype(np.uint8)]
    highs = [bytearray(row.tobytes()) for row in (room // 255).astype(np.uint8)]
    lo_ns = [np.frombuffer(x, dtype=np.uint8) for x in lows]
    hi_ns = [np.frombuffer(x, dtype=np.uint8) for x in highs]
    dec, inc, s = _DEC, _INC, memoryview(ext)
    wide = cap > 253  # else no headroom reaches 254 and no F's range holds a 0: no digit to carry
    for op, k, a, b, r in zip(*v_rows.views(ops, kind, first, second, rank), strict=True):
        e = s[a]
        x = s[b]
        if x > e:
            e = x
        e += 1
        cur = s[op]
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
            if wide and low.find(0, t, cur) >= 0:  # a borrow from the high digit
                hi_ns[r][t:cur] -= (lo_ns[r][t:cur] == 0).view(np.uint8)
            low[t:cur] = low[t:cur].translate(dec)
        else:
            t = free.find(1, e, cur)
            if t < 0:
                continue
            if k == _W:  # headroom + 1 on [t + 1, cur + 1)
                low = lows[r]
                if wide and low.find(254, t + 1, cur + 1) >= 0:  # a carry into the high digit
                    hi_ns[r][t + 1 : cur + 1] += (lo_ns[r][t + 1 : cur + 1] == 254).view(np.uint8)
                low[t + 1 : cur + 1] = low[t + 1 : cur + 1].translate(inc)
        free[cur] = 1
        free[t] = 0
        s[op] = t
    return ext[:-1]


_SHIFT = {k: bytes((i + k) % 256 for i in range(256)) for k in (-2, -1, 1, 2)}
#: `derived`' slot kinds
_FREE, _FK, _BK = 0, 1, 2
#: the shortest run of slots `derived` shifts rather than walks, and how many slots a tried move walks
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


def derived(slot: np.ndarray, occ: np.ndarray, ranks: np.ndarray, cap: int) -> np.ndarray:
    """The new slots of the F's and B's (W's stripped: `slot` and `occ` hold none) after the derived
    squeeze: each, in slot order, to the earliest free slot from which, with W's re-derived (each free slot
    runs the oldest pending W), no F starts with `cap` live chunks.

    Per rank the walk of the row is kept: pend(u) and live(u), the pending W's and the live chunks before
    slot u. The stored walk keeps live <= cap at every slot (checked once; a move is kept only if its walk
    does), so no F starts with live == cap. Hence a tried F at t (past the last slot with live == cap in
    [e, cur]) never breaks the cap itself, and no F in [t, cur) starts at cap - 1 either; a tried B at t
    with live == cap before it fails at once if an F follows at t + 1 (no W runs at t any more, so that F
    starts at cap): the move is skipped without walking.

    On (t, cur] the old and new rows agree, so the new walk is the stored one plus (dq, dl), dq >= 0 and
    dl - dq = 1 for an F, -1 for a B: a free slot runs a W in both walks or, where the stored walk is
    idle (no W pending), only in the new one, which lowers dq and dl by one. Between such idle slots
    (found with `find` in `idle`, a byte flag per slot) the new walk is a shift of the stored one: runs of
    `_SEG` or more slots are shifted (an F there breaks the cap iff one starts at cap - dl, the first to
    reach it), shorter ones walked. Where dq is 0 the rest up to cur is one shift; past cur, where the new
    walk holds no more live chunks than the stored one, it is walked until the walks rejoin. A failed move
    re-walks the stored walk up to where the tried one stopped."""
    n = len(ranks)
    ops, kind, stage, rank = v_rows.columns(occ, ranks, n, (_F, _B))
    first, second = v_rows.inputs(ops, kind, stage, n, len(slot))
    pend_all, live_all = v_rows.walks(occ)
    if live_all.max(initial=0) > cap:
        raise ValueError(f"derived squeeze: the grid does not fit the cap of {cap} live chunks")
    ext = np.append(slot, v_rows.INT(-1))
    s = memoryview(ext)
    code = (occ % 3 + 1).astype(np.uint8)
    code[occ < 0] = _FREE
    rows = [bytearray(row.tobytes()) for row in code]
    kinds = np.full(live_all.shape, _FREE, dtype=np.uint8)
    kinds[:, :-1] = code
    counts = (_ByteCounts if cap <= 253 else _IntCounts)(pend_all, live_all, cap)
    idles = [bytearray(row.tobytes()) for row in ((kinds == _FREE) & (pend_all == 0)).view(np.uint8)]
    del code, kinds
    end = occ.shape[1]
    pends, lives = counts.pends, counts.lives
    seg, lead = _SEG, _LEAD
    for op, a, b, r in zip(*v_rows.views(ops, first, second, rank), strict=True):
        e = s[a]
        x = s[b]
        if x > e:
            e = x
        e += 1
        cur = s[op]
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
                    s[op] = t
                    idle[t] = 0  # slot t is taken
                    break
            row[cur] = k
            row[t] = _FREE
            _rewalk(row, pend, live, idle, t, failed, end)  # repair up to there
            idle[cur] = 0  # the op's slot again
            lo = t + 1
    return ext[:-1]


def _rewalk(row, pend, live, idle: bytearray, t: int, cur: int, end: int) -> None:
    """The stored walk written again from slot t (the repair after a failed move, no cap) until it rejoins
    what is stored past `cur` (or the row ends)."""
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
    _walk_to_rejoin(row, pend, live, idle, u, q, lv, 1 << 62, end)


def _walk_to_rejoin(row, pend, live, idle: bytearray, u: int, q: int, lv: int, cap: int, end: int) -> int:
    """Write the walk from slot u (q W's pending, lv live chunks before it) over the stored one until the
    two agree again or the row ends (then its final counts at `end`): -1; or the slot where an F takes the
    live count over `cap` (written up to there)."""
    while u < end:
        if q == pend[u] and lv == live[u]:
            return -1
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
    return -1
