"""Helpers shared by the V period tests: compare named orders column by column."""

from __future__ import annotations

import numpy as np

from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.v.blocks import CATALOG
from primuspp.schedule.array_order import ArrayOrder

#: every named V block (the catalog's and v-auto's)
BLOCKS = tuple(dict.fromkeys((*CATALOG, *v_family.AUTO_BLOCKS)))


def columns(order: ArrayOrder) -> tuple[list[int], ...]:
    """An order's rank starts and its kind, stage and microbatch columns, as lists."""
    rows = order.rows
    return (list(order.first), *(np.asarray(rows[k]).tolist() for k in ("kind", "stage", "mb")))


def same(x, y) -> bool:
    """Whether two lists of named orders hold the same names and orders."""
    return [n for n, _ in x] == [n for n, _ in y] and all(
        columns(a) == columns(b) for (_, a), (_, b) in zip(x, y, strict=True)
    )
