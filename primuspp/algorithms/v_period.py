"""A squeezed V order for many microbatches from two short ones: the steady state repeats.

`vshape.squeezed_orders` repeats a block m times and squeezes it, op by op: its cost grows with m. The
result is periodic in m: past a warm-up and before a cool-down whose lengths depend on p, the block and
the cap but not on m, each rank runs the same six ops (one period: F, B and W of its two chunks) again
and again, each time one microbatch later. So the order for m + 1 is the order for m with one period
inserted in that steady state, everything before the insertion unchanged and everything after it one
microbatch later. Here the orders for a short m0 and for m0 + d (d = `gap(m0)`, a prime near m0 / 4) are
taken as the full squeeze gives them (`squeeze`; or `pair`, which squeezes m0 only and copies m0 + d's
moves from it where `v_proof` proves them), the inserted periods are read off their difference, and the
order for m is the order for m0 with m - m0 periods inserted, each one microbatch later than the one
before: numpy slices, no per-op loop. Where `v_proof` also proves m0 + d's final order m0's with d periods
inserted at a column of m0's final grid (`Inserted`), neither short order is built: the order for m is
that grid with m - m0 periods inserted there, decoded at once. The V family starts from `starts(cap)`
plus `v_proof.lead` (the proof needs the shorter order's grid to repeat over its window) and extends from
twice m0 + 1 on (`v_proof.RATIO`: one short squeeze to pay for, not two).

Soundness. The squeeze visits the ops in slot order and moves each into an earlier free slot; what it
decides for an op depends on the slots near it (inputs, free slots and memory between its earliest slot
and its own; the derived squeeze's re-walk reads on until it rejoins the stored walk). Where the state
around the op is periodic, so are the decisions, which is why the result is. `v_proof` turns that into a
proof for m0 + d (it checks the state and every read of m0's run); for any longer m it stays a measured
rule with a check on every run:

- the rule: m0 = cap + 2 (cap in live chunks), else 3 * cap / 2 + 4 (`starts`; each only where m is
  long enough for it to pay, `applies`). For the blocks of `vshape.CATALOG` and `v_family.AUTO_BLOCKS`,
  p up to 48 and the caps the V family passes, the insertion holds from about m = cap on for a block at
  its own width (zbv's block at 2p, v-half's at p + 2), later for a narrow block under a wide cap (up to
  about 1.5 cap: "min" with the explicit squeeze at cap 2p) or v-min's block at p = 32 (cap 24, from 36);
  where the first start fails the check, the second is tried. A few blocks at their own peak never
  settle (e.g. "min-b2" at p = 6, cap 9, derived: the check always fails, the full squeeze runs);
- where the first start is known to fail (`late`), it is skipped: two short squeezes saved (v-min at p = 32
  squeezed 26, 33, 40 and 51 microbatches, now 40 and 51). A measured rule too: a block of unit spacings
  ("min") whose raw repetition needs more than its steady state's estimate (`vshape.estimated_peak` below
  the raw peak: v-min's block at p = 5, 8, 11, ..., 47) fails the first start. Over every block of both
  lists, p = 2..48 and the caps the V family passes (the block's own peak, 2p, 2 ((p + 2) // 2),
  2 ((p + 4) // 3), p + 1), each with both squeezes and with the block's own (3018 cases), it failed in 101
  of the 104 cases so predicted; under other caps (the raw peak + 0..12, p = 2..26, both squeeze settings)
  in 89 of 108, every miss at p = 2. A second clause once skipped the first start wherever both squeezes run
  under a cap 6 or more chunks above the estimate (right in 522 of 554 cases at those caps), but under the
  caps a user's budget gives (the estimate + 6, + 9, + 12) the first start passed in 401 of 453 such cases,
  so it was dropped. The check still runs on every extension, so a wrong prediction costs time only: the
  second start (or the full squeeze, where m is too short for it) runs where the first would have passed;
- the check (`insertion`): on every rank the order for m0 + d is the order for m0 with 6 d ops inserted,
  each period of them the one before one microbatch later, and the stretch where the two orders agree
  around the insertion covers one more whole period (the steady state is visible on both sides, not
  just one coincidental match). Otherwise (or if the cap is too tight for the block at m0) the caller
  runs the full squeeze, which stays the reference. d > 1 because a settling can look done and is not:
  "min-b0" at p = 18, cap 21, explicit squeeze, passes the one-period check (d = 1) from m = 34 to 37,
  fails it from 38 to 40 and passes it for good from 41; extended from 35 with d = 1 its orders for
  m >= 40 would be wrong; with d = 11 the check fails at 35 and the full squeeze runs. d is a prime
  because an order can repeat every q > 1 microbatches only: "min-b2" at p = 13, cap 16, explicit
  squeeze, fails the one-period check for every m (its cool-down alternates with the parity of m), yet
  passes it with d = 4; a prime d passes only if q = d.

tests/algorithms/test_v_period.py holds the extended orders equal to the full squeeze over a sweep of
blocks, p, m and caps, and the fallback taken where the check fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.timing_arrays import UNIT_STARTS

PERIOD = 6  # ops per microbatch on a rank: F, B, W of each of its two chunks

#: an extension from m0 runs when m is at least this many times m0 + 1 (it squeezes two short orders)
MIN_RATIO = 3


@dataclass(frozen=True)
class Inserted:
    """The longer of two short orders, not built: the shorter one's final grid (`grid`: each rank's op per
    slot, op = 3 (mb n + stage) + kind, -1 free; n stages) with d periods inserted at column `column` (its
    columns before it, then [column - 6, column) d times, one, two, ... microbatches later, then the rest d
    microbatches later: `v_proof.final_insertion` proves it). As orders, the longer one is the shorter one
    with each rank's six ops of [column - 6, column) inserted d times, which passes `insertion`'s check by
    construction (the agreement after the insertion reaches one whole period back into it: its last period
    is the shorter order's period before it, d microbatches later)."""

    grid: np.ndarray
    column: int
    n: int

    def extended(self, k: int) -> ArrayOrder:
        """The order with k periods inserted the same way: `extend`'s result from the shorter order and the
        longer one (the period taken a row earlier or later within a repeating stretch inserts the same
        rows), as one grid decoded at once (`v_rows.order_of`)."""
        from primuspp.algorithms import v_rows

        grid, c, shift = self.grid, self.column, 3 * self.n
        copies = np.tile(grid[:, c - PERIOD : c], (1, k))  # full columns: no free slot to keep at -1
        copies += np.repeat(shift * np.arange(1, k + 1, dtype=grid.dtype), PERIOD)
        rest = grid[:, c:]
        rest = np.where(rest >= 0, rest + shift * k, rest)
        return v_rows.order_of(np.concatenate((grid[:, :c], copies, rest), axis=1), self.n)


Named = Sequence[tuple[str, ArrayOrder]] | None
Squeeze = Callable[[int], Named]
#: the named orders of the full squeeze for two m at once (`v_proof.squeezed`: the longer one copied); a
#: longer one proven the shorter one with periods inserted is not built (`Inserted`), nor the shorter one
#: beside it (None)
Pair = Callable[
    [int, int], tuple[Sequence[tuple[str, ArrayOrder | None]], Sequence[tuple[str, ArrayOrder | Inserted]]]
]


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

    `insertion_reference` rank by rank, here a few passes over all ranks at once: rank r of `b` starts 6 d r
    rows after rank r of `a`, so row i of `a` faces row i + 6 d r of `b` in the prefix and i + 6 d (r + 1)
    in the suffix."""
    if len(a.first) != len(b.first):
        return None
    if not (_one_row_per_node(a) and _one_row_per_node(b)):
        return insertion_reference(a, b, d)
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


def insertion_reference(a: ArrayOrder, b: ArrayOrder, d: int = 1) -> list[int] | None:
    """Where, on every rank, order `b` (d microbatches more) is order `a` with d periods inserted:
    `b[:x] == a[:x]`, then 6 d ops, each period the one before it one microbatch later, then `a[x:]` d
    microbatches later; x is taken as late as the two agree. None unless, on every rank, the stretch where
    they agree around the insertion spans one more whole period (the check of the module docstring).

    The readable form, rank by rank, of `insertion` (a test holds the two equal)."""
    if len(a.first) != len(b.first):
        return None
    out = []
    for (ka, sa, ma), (kb, sb, mb) in zip(_columns(a), _columns(b), strict=True):
        n, extra = len(ka), PERIOD * d
        if len(kb) != n + extra:
            return None
        same = (ka == kb[:n]) & (sa == sb[:n]) & (ma == mb[:n])
        i = n if same.all() else int(np.argmin(same))  # the common prefix
        later = (ka == kb[extra:]) & (sa == sb[extra:]) & (ma + d == mb[extra:])
        later = later[::-1]
        j = n if later.all() else int(np.argmin(later))  # the common suffix, d microbatches later
        if i + j < n + PERIOD:
            return None
        k, s, x = kb[i : i + extra], sb[i : i + extra], mb[i : i + extra]
        if not (
            np.array_equal(k[PERIOD:], k[:-PERIOD])
            and np.array_equal(s[PERIOD:], s[:-PERIOD])
            and np.array_equal(x[PERIOD:], x[:-PERIOD] + 1)
        ):
            return None
        out.append(i)
    return out


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
    squeeze: Squeeze,
    m: int,
    cap: int,
    ratio: float = MIN_RATIO,
    skip: int = 0,
    pair: Pair | None = None,
    lead: int = 0,
) -> tuple[int, list[tuple[str, ArrayOrder]]] | None:
    """(m0, the squeezed orders for m microbatches) from those for m0 and m0 + `gap(m0)` (`squeeze(k)`: the
    named orders of the full squeeze for k microbatches, None or empty if the block needs more than the
    cap; `pair(m0, m1)`, if given, both at once, the longer ones built or `Inserted`), m0 the first of
    `starts(cap)[skip:]`, each plus `lead`, that passes the check (skip 1 where the first is `late`); None
    where none that `applies` (at `ratio`) does: the caller then squeezes m in full."""
    for m0 in starts(cap)[skip:]:
        m0 += lead
        if not applies(m, m0, ratio):
            break
        out = _extended_from(squeeze, m0, m, pair)
        if out is not None:
            return m0, out
    return None


def _extended_from(
    squeeze: Squeeze, m0: int, m: int, pair: Pair | None = None
) -> list[tuple[str, ArrayOrder]] | None:
    d = gap(m0)
    short, longer = pair(m0, m0 + d) if pair is not None else (squeeze(m0), squeeze(m0 + d))
    if not short or not longer or [n for n, _ in short] != [n for n, _ in longer]:
        return None
    out = []
    for (name, a), (_, b) in zip(short, longer, strict=True):
        if isinstance(b, Inserted):  # proven: `insertion`'s check holds by construction
            out.append((name, b.extended(m - m0)))
            continue
        at = insertion(a, b, d)
        if at is None:
            return None
        out.append((name, extend(a, b, at, m0, m)))
    return out
