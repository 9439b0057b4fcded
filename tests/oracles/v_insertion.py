"""Readable reference of `v_period.insertion`: rank by rank."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from primuspp.algorithms.v.period import PERIOD
from primuspp.schedule.array_order import ArrayOrder


def _columns(order: ArrayOrder) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each rank's (kind code, stage, microbatch) columns."""
    rows, first = order.rows, np.asarray(order.first).tolist()
    kind, stage, mb = (np.asarray(rows[k]) for k in ("kind", "stage", "mb"))
    return [(kind[a:b], stage[a:b], mb[a:b]) for a, b in pairwise(first)]


def insertion(a: ArrayOrder, b: ArrayOrder, d: int = 1) -> list[int] | None:
    """Where, on every rank, order `b` (d microbatches more) is order `a` with d periods inserted:
    `b[:x] == a[:x]`, then 6 d ops, each period the one before it one microbatch later, then `a[x:]` d
    microbatches later; x is taken as late as the two agree. None unless, on every rank, the stretch where
    they agree around the insertion spans one more whole period (the check of the module docstring).

    Rank by rank."""
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
