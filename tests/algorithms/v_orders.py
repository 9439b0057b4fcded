"""Helpers shared by the V period tests: compare named orders column by column."""

from __future__ import annotations

import numpy as np

from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.v.blocks import HALF, MIN, ZB, ZB_TIGHT, Block
from primuspp.schedule.array_order import ArrayOrder

#: the V blocks the tests sweep (the named ones and more spacings)
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
