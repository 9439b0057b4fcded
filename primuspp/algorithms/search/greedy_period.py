"""The greedy pass's steady phase, skipped: a state that repeats, shifted, repeats its future.

A greedy pass (`greedy._plan`, on a placement of one route) reaches a steady phase in which, a microbatch
or two later, the loop's whole state is the same but shifted: counts by P microbatches, every time by T.
The loop is a function of that state only (the counts enter through `count < m` tests), and with exact
arithmetic adding T to every time changes no comparison, so the next segment of decisions is the last one
shifted, and so on until the counts come near m. `Period` watches the state at every forward of the route's
first stage, and when two such states match it appends the repeated segments at once and moves the state
past them; the loop then runs the rest (the cool-down) itself.

What the state is, between two iterations of the loop (anything else the loop reads is fixed):
- per stage the counts nf, nb, nw (relative to the first stage's nf) and per rank the activation held,
  the kind of its last F/B and its free time (relative to the checkpoint's time);
- the heap's live entries, once each (a popped entry with `t < free[r] - eps` does nothing, and free only
  grows; equal entries pop one after another with no other rank acting between them, and the rank decides
  at each until it finds nothing to place, which a copy then finds again: copies change no decision);
- the forward/backward end times that can still decide something: f_end of stage s from the next stage's
  nf up to nf[s] (on the last stage: from nb[s], for its B), g_end of s from the previous stage's nb up to
  nb[s]. The others are never read again, or not yet written, or (f_end of a stage with a next one, for
  its own B) read only under the max with the next stage's g_end plus comm, which is never less (that B
  followed the next stage's F, which followed this F), so they are not carried over a skip.

Exactness: every time is a sum of durations and comm. When all of them (and the patience waits) are
multiples of a power of two q, eps <= q/4 and every time stays below 2**50 * q (checked after the loop),
every sum is exact and each comparison the loop makes (`a <= b + eps + w`, `a < b - eps`, ...) has the
result of the exact comparison without eps, so shifting every time by T changes none. Otherwise nothing is
skipped (`quantum` returns None).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from itertools import accumulate, chain
from typing import Any

#: times must stay below this many quanta for the sums to be exact (ulp <= q/4)
LIMIT = 2.0**50

#: checkpoints a state is remembered for: a period up to WINDOW / 2 microbatches is found (seen: 1 and 2)
WINDOW = 16


def insert_blocks(order: list[list[int]], blocks: list[tuple[int, int, Any]]) -> None:
    """Put a skip's decisions (`Period.blocks`) into the per-rank decision lists, in place."""
    for r, at, codes in blocks:
        order[r][at:at] = codes.tolist()


def quantum(values: Iterable[float], eps: float) -> float | None:
    """The largest power of two dividing every value, if eps <= a quarter of it and none is negative;
    else None."""
    least = None
    for v in values:
        if v == 0:
            continue
        if not math.isfinite(v) or v < 0:
            return None
        num, den = abs(v).as_integer_ratio()  # den is a power of two
        val = (num & -num).bit_length() - den.bit_length()  # log2 of v's largest power-of-two divisor
        least = val if least is None else min(least, val)
    if least is None:
        return None
    q = math.ldexp(1.0, least)
    return q if 0 <= eps <= q / 4 else None


class Period:
    """Watches a greedy loop's state at each forward of the route's first stage and skips the repeats."""

    def __init__(self, m: int, nxt: list[int], prv: list[int], eps: float, state: tuple) -> None:
        self.m, self.nxt, self.prv, self.eps = m, nxt, prv, eps
        (self.f_end, self.g_end, self.nf, self.nb, self.nw, self.mem, self.free, _, self.left, self.order,
         self.heap, self.last_kind) = state  # fmt: skip
        # signature -> (checkpoint, full state or None); the last WINDOW checkpoints' only (`recent`)
        self.seen: dict[tuple, tuple[int, tuple | None]] = {}
        self.recent: deque[tuple[int, tuple]] = deque()
        self.count = 0
        self.jumped = 0  # microbatches skipped (tests read it)
        # the skipped decisions: (rank, where in its order they go, their codes), not yet in `order`
        # (`insert_blocks` puts them there; `greedy._schedule` reads them as they are)
        self.blocks: list[tuple[int, int, Any]] = []

    def check(self, s0: int, now: float) -> bool:
        """At a checkpoint (a forward of the first stage s0 just placed, ending at `now`): when this state
        matched an earlier one, skip the repeats; True when the watch is over (skipped, or never can)."""
        nf, nb, nw, free = self.nf, self.nb, self.nw, self.free
        if not nb[s0]:  # still filling the pipeline (no B back on the first stage): not steady yet
            return False
        k = nf[s0]
        sig = (
            tuple([f - now for f in free]),
            tuple([x - k for x in nf]),
            tuple([x - k for x in nb]),
            tuple([x - k for x in nw]),
        )
        self.count += 1
        self.recent.append((self.count, sig))
        if len(self.recent) > WINDOW:
            old, old_sig = self.recent.popleft()
            if self.seen[old_sig][0] == old:
                del self.seen[old_sig]
        known = self.seen.get(sig)
        if known is None:
            self.seen[sig] = (self.count, None)
            return False
        full = self._full(k, now)
        earlier = known[1]
        if earlier is not None and earlier[0] == full:
            self._jump(earlier, k, now)
            return True
        self.seen[sig] = (self.count, (full, k, now, [len(seq) for seq in self.order]))
        return False

    def _full(self, k: int, now: float) -> tuple:
        f_end, g_end, nf, nb, free = self.f_end, self.g_end, self.nf, self.nb, self.free
        eps, nxt, prv = self.eps, self.nxt, self.prv
        n = len(nf)
        live = sorted({(t - now, r) for t, r in self.heap if not t < free[r] - eps})
        windows = []
        for s in range(n):
            lo = nf[nxt[s]] if nxt[s] >= 0 else nb[s]
            windows.append(lo - k)
            windows.extend([f_end[mb * n + s] - now for mb in range(lo, nf[s])])
            lo = nb[prv[s]] if prv[s] >= 0 else nb[s]
            windows.append(lo - k)
            windows.extend([g_end[mb * n + s] - now for mb in range(lo, nb[s])])
        return tuple(live), tuple(self.mem), tuple(self.last_kind), tuple(windows)

    def _jump(self, earlier: tuple, k: int, now: float) -> None:
        """State now = the earlier one shifted by P microbatches and T: append the segment between them
        N more times, shifted, and move the state N periods on, keeping every count below m."""
        import numpy as np

        f_end, g_end, nf, nb, nw, free = self.f_end, self.g_end, self.nf, self.nb, self.nw, self.free
        _, k0, t0, lens0 = earlier
        P, T = k - k0, now - t0
        N = (self.m - 1 - max(nf)) // P
        if N <= 0 or T <= 0:
            return
        n = len(nf)
        eps, nxt, prv = self.eps, self.nxt, self.prv
        NP, NT = N * P, N * T
        steps = np.arange(1, N + 1, dtype=np.int64)[:, None] * (3 * n * P)  # decision code of mb + P
        # every rank's segment in one row, its N shifted copies below (one array pass); rank r's repeats
        # are its columns, read row by row, kept as an array: the loop appends after them (`blocks`)
        segs = [seq[lens0[r] :] for r, seq in enumerate(self.order)]
        cuts = [0, *accumulate(map(len, segs))]
        flat = np.fromiter(chain.from_iterable(segs), dtype=np.int64, count=cuts[-1])
        repeats = flat[None, :] + steps
        for r, seq in enumerate(self.order):
            if segs[r]:
                self.blocks.append((r, len(seq), repeats[:, cuts[r] : cuts[r + 1]].ravel()))
                self.left[r] -= N * len(segs[r])
        for s in range(n):
            lo = nf[nxt[s]] if nxt[s] >= 0 else nb[s]
            moved = [f_end[mb * n + s] + NT for mb in range(lo, nf[s])]
            for i, v in enumerate(moved):
                f_end[(lo + NP + i) * n + s] = v
            lo = nb[prv[s]] if prv[s] >= 0 else nb[s]
            moved = [g_end[mb * n + s] + NT for mb in range(lo, nb[s])]
            for i, v in enumerate(moved):
                g_end[(lo + NP + i) * n + s] = v
        self.heap[:] = sorted({(t + NT, r) for t, r in self.heap if not t < free[r] - eps})
        for s in range(n):
            nf[s] += NP
            nb[s] += NP
            nw[s] += NP
        for r in range(len(free)):
            free[r] += NT
        self.jumped = NP
