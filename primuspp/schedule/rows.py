"""A compute order's columns (`array_order.order_arrays`) as a dict that remembers what was derived from it.

A build reads one order's columns several times: the unit-cost timing that lowering places the receives by,
the validator, then the simulator's timing under the real costs. What those passes derive from the columns
alone (who produces each datum, each node's cross-rank inputs, which kinds occur) does not depend on the
costs, so it is worked out once and kept in `Rows.memo`, beside the columns rather than among them: equality,
iteration and pickling are a plain dict's. The columns are read-only by contract (nobody writes into an
order's arrays), which is what makes the memo safe.
"""

from __future__ import annotations

from typing import Any


class Rows(dict):
    """`array_order.order_arrays`' dictionary; `memo`: facts derived from its columns, keyed by what else they
    depend on (a placement, a microbatch count)."""

    __slots__ = ("memo",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memo: dict[Any, Any] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (Rows, (dict(self),))  # the memo is recomputed, never stored


def memo_of(rows: dict[str, Any]) -> dict[Any, Any]:
    """The memo of `rows`; a throwaway dict for a plain dict (nothing is remembered)."""
    return rows.memo if isinstance(rows, Rows) else {}
