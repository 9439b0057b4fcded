"""A squeezed V order for many microbatches from two short ones: the steady state repeats.

Squeezing a block repeated m times costs time in m. The result is periodic in m: past a warm-up and
before a cool-down whose lengths depend on p, the block and the cap but not on m, each rank runs the same
six ops (one period: F, B and W of its two chunks) again and again, each one microbatch later. So the
orders for a short m0 and for m0 + d (d = `gap(m0)`, a prime near m0 / 4) are squeezed in full, the
inserted periods read off their difference, and the order for m is the order for m0 with m - m0 periods
inserted: numpy slices, no per-op loop.

Soundness: the squeeze visits the ops in slot order and moves each into an earlier free slot; what it
decides for an op depends on the slots near it, so where the state is periodic so are the decisions. That
is a measured rule, with a check on every run:

- the rule: m0 = cap + 2 (cap in live chunks), else 3 * cap / 2 + 4 (`starts`; each only where m is
  long enough for it to pay, `applies`). For the named blocks, p up to 48 and the V family's caps, the
  insertion holds from about m = cap on for a block at its own width, later for a narrow block under a
  wide cap; a few blocks at their own peak never settle ("min-b2" at p = 6, cap 9, derived);
- `late`: a block of unit spacings whose raw repetition peaks above its steady state's estimate (v-min's
  block at p = 5, 8, 11, ...) fails the first start (101 of the 104 cases so predicted over p = 2..48):
  it is skipped. A wrong prediction costs time only;
- the check (`insertion`): on every rank the order for m0 + d is the order for m0 with 6 d ops inserted,
  each period the one before one microbatch later, and the stretch where the two agree around the
  insertion covers one more whole period. Otherwise the caller runs the full squeeze. d > 1 because a
  settling can look done and is not ("min-b0" at p = 18, cap 21, explicit: the one-period check passes
  from m = 34 to 37, fails from 38 to 40); d is a prime because an order can repeat every q > 1
  microbatches only ("min-b2" at p = 13, cap 16, explicit, passes with d = 4 and never with d = 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import numpy as np

from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.timing_arrays import UNIT_STARTS

PERIOD = 6  # ops per microbatch on a rank: F, B, W of each of its two chunks

#: an extension from m0 runs when m is at least this many times m0 + 1 (it squeezes two short orders)
MIN_RATIO = 3


def starts(cap: int) -> tuple[int, int]:
    """The short m0 the extension tries, in turn (the measured rule, see the module docstring)."""
    return cap + 2, 3 * cap // 2 + 4


def late(estimate: int, peak: int, unit: bool) -> bool:
    """Whether the first of `starts(cap)` is predicted to fail the check (the measured rule of the module
    docstring): a block of unit spacings (`unit`) whose raw repetition peaks above its steady state's
    `estimate`."""
    return unit and estimate < peak


def applies(m: int, m0: int, ratio: float = MIN_RATIO) -> bool:
    """Whether m is long enough for an extension from m0 to save time (it squeezes m0 and m0 + `gap(m0)`):
    at least `ratio` times m0 + 1 (tests pass 1: any m past m0)."""
    return m >= ratio * (m0 + 1)


def _columns(order: ArrayOrder) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each rank's (kind code, stage, microbatch) columns."""
    rows, first = order.rows, np.asarray(order.first).tolist()
    kind, stage, mb = (np.asarray(rows[k]) for k in ("kind", "stage", "mb"))
    return [(kind[a:b], stage[a:b], mb[a:b]) for a, b in pairwise(first)]


def gap(m0: int) -> int:
    """How many microbatches longer the second short order is than the first (`extended`): the first
    prime from a quarter of m0 on, so that a settling that ends within that stretch fails the check, and so
    does an order that repeats only every q > 1 microbatches (q divides d only if q = d; see the module
    docstring)."""
    d = max(3, m0 // 4)
    while any(d % k == 0 for k in range(2, int(d**0.5) + 1)):
        d += 1
    return d


def insertion(a: ArrayOrder, b: ArrayOrder, d: int = 1) -> list[int] | None:
    """Where, on every rank, order `b` (d microbatches more) is order `a` with d periods inserted:
    `b[:x] == a[:x]`, then 6 d ops, each period the one before it one microbatch later, then `a[x:]` d
    microbatches later; x is taken as late as the two agree. None unless, on every rank, the stretch where
    they agree around the insertion spans one more whole period (the check of the module docstring).

    A few passes over all ranks at once: rank r of `b` starts 6 d r rows after rank r of `a`, so row i of
    `a` faces row i + 6 d r of `b` in the prefix and i + 6 d (r + 1) in the suffix."""
    if len(a.first) != len(b.first):
        return None
    if not (_one_row_per_node(a) and _one_row_per_node(b)):
        return None
    extra = PERIOD * d
    fa, fb = np.asarray(a.first, dtype=np.int64), np.asarray(b.first, dtype=np.int64)
    n = np.diff(fa)
    if not (np.diff(fb) == n + extra).all():
        return None
    ka, sa, ma = (np.asarray(a.rows[c]) for c in ("kind", "stage", "mb"))
    kb, sb, mb = (np.asarray(b.rows[c]) for c in ("kind", "stage", "mb"))
    shift = np.repeat(np.arange(len(n), dtype=np.int64) * extra, n)  # row i of a: rank r's 6 d r
    at = np.arange(len(ka), dtype=np.int64)
    at += shift
    del shift
    bad = np.flatnonzero((ka != kb[at]) | (sa != sb[at]) | (ma != mb[at]))
    starts, ends = fa[:-1], fa[1:]
    k = np.searchsorted(bad, starts)  # each rank's first row that differs (if below its end)
    first_bad = np.append(bad, np.iinfo(np.int64).max)[k]
    i = np.where(first_bad < ends, first_bad - starts, n)  # the common prefix
    at += extra  # the suffix: d microbatches later
    bad = np.flatnonzero((ka != kb[at]) | (sa != sb[at]) | (ma + d != mb[at]))
    del at
    k = np.searchsorted(bad, ends) - 1  # each rank's last row that differs (if at or past its start)
    last_bad = np.append(np.iinfo(np.int64).min, bad)[k + 1]
    j = np.where(last_bad >= starts, ends - 1 - last_bad, n)  # the common suffix
    if (i + j < n + PERIOD).any():
        return None
    if d > 1:  # each inserted period the one before it one microbatch later
        row = np.repeat(fb[:-1] + i, extra - PERIOD)
        row += np.tile(np.arange(PERIOD, extra, dtype=np.int64), len(n))
        back = row - PERIOD
        if not (
            np.array_equal(kb[row], kb[back])
            and np.array_equal(sb[row], sb[back])
            and np.array_equal(mb[row], mb[back] + 1)
        ):
            return None
    return i.tolist()


def _one_row_per_node(order: ArrayOrder) -> bool:
    return len(order.rows["kind"]) == int(order.first[-1])


def extend(a: ArrayOrder, b: ArrayOrder, at: list[int], m0: int, m: int) -> ArrayOrder:
    """The order for m microbatches (m > m0): on rank r, `a[:at[r]]`, then the period `b[at[r]:at[r]+6]`
    m - m0 times, each one microbatch later than the one before, then `a[at[r]:]` m - m0 microbatches
    later (`b`, `at` as `insertion` took them; with m = m0 + d this is `b`)."""
    k = m - m0
    cols_a, cols_b = _columns(a), _columns(b)
    lengths = [len(ka) + PERIOD * k for ka, _, _ in cols_a]
    total = sum(lengths)
    kind = np.empty(total, dtype=np.int8)
    stage = np.empty(total, dtype=np.int64)
    mb = np.empty(total, dtype=np.int64)
    step = np.arange(k, dtype=np.int64)[:, None]  # each inserted period one microbatch later
    # the unit slots (`timing_arrays.UNIT_STARTS`) where both orders have them: 6 slots a microbatch
    slots_a, slots_b = (_rank_cuts(x.rows.memo.get(UNIT_STARTS), x) for x in (a, b))
    slot = np.empty(total, dtype=np.int64) if slots_a and slots_b else None
    o = 0  # the rank's first row in the output; written in place (no per-rank pieces to concatenate)
    for r, ((ka, sa, ma), (kb, sb, mbb), x) in enumerate(zip(cols_a, cols_b, at, strict=True)):
        n, y = len(ka), x + PERIOD * k
        kind[o : o + x], stage[o : o + x], mb[o : o + x] = ka[:x], sa[:x], ma[:x]
        kind[o + x : o + y].reshape(k, PERIOD)[:] = kb[x : x + PERIOD]
        stage[o + x : o + y].reshape(k, PERIOD)[:] = sb[x : x + PERIOD]
        mb[o + x : o + y].reshape(k, PERIOD)[:] = mbb[x : x + PERIOD] + step
        kind[o + y : o + n + PERIOD * k] = ka[x:]
        stage[o + y : o + n + PERIOD * k] = sa[x:]
        np.add(ma[x:], k, out=mb[o + y : o + n + PERIOD * k])
        if slot is not None:
            ta, tb = slots_a[r], slots_b[r]
            slot[o : o + x] = ta[:x]
            slot[o + x : o + y].reshape(k, PERIOD)[:] = tb[x : x + PERIOD] + PERIOD * step
            np.add(ta[x:], PERIOD * k, out=slot[o + y : o + n + PERIOD * k])
        o += n + PERIOD * k
    out = ArrayOrder.from_flat(kind, mb, stage, lengths)
    if slot is not None:
        out.rows.memo[UNIT_STARTS] = slot
    return out


def _rank_cuts(column, order: ArrayOrder) -> list | None:
    """A per-node column cut into each rank's part (None stays None)."""
    if column is None:
        return None
    first = np.asarray(order.first).tolist()
    return [column[lo:hi] for lo, hi in pairwise(first)]


def extended(
    squeeze: Callable[[int], Sequence[tuple[str, ArrayOrder]] | None],
    m: int,
    cap: int,
    ratio: float = MIN_RATIO,
    skip: int = 0,
) -> tuple[int, list[tuple[str, ArrayOrder]]] | None:
    """(m0, the squeezed orders for m microbatches) from those for m0 and m0 + `gap(m0)` (`squeeze(k)`: the
    named orders of the full squeeze for k microbatches, None or empty if the block needs more than the
    cap), m0 the first of `starts(cap)[skip:]` that passes the check (skip 1 where the first is `late`);
    None where none that `applies` (at `ratio`) does: the caller then squeezes m in full."""
    for m0 in starts(cap)[skip:]:
        if not applies(m, m0, ratio):
            break
        d = gap(m0)
        short, longer = squeeze(m0), squeeze(m0 + d)
        if not short or not longer or [n for n, _ in short] != [n for n, _ in longer]:
            continue
        out = []
        for (name, a), (_, b) in zip(short, longer, strict=True):
            at = insertion(a, b, d)
            if at is None:
                break
            out.append((name, extend(a, b, at, m0, m)))
        else:
            return m0, out
    return None
