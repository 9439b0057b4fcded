"""The tuple of per-rank Node tuples that compact storage stands for, each rank built on first read.

`ArrayOrder` (a compute order as columns) and `LoweredRanks` (a lowered table's comm rows as columns) keep
their nodes as numpy arrays and read as `tuple[tuple[Node, ...], ...]`: indexing a rank builds that rank's
Node tuple once (`_build`) and caches it; length, iteration, slicing, equality with any such sequence,
hashing and repr are a tuple's. This base holds that behaviour once; a subclass has a `_cache` slot (one
entry per rank, None until built) and implements `_build(r)`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from primuspp.schedule.nodes import Node


class LazyRanks(Sequence):
    """Reads as the tuple of per-rank Node tuples it stands for; ranks are built by `_build` when read."""

    __slots__ = ()
    _cache: list[tuple[Node, ...] | None]

    def _build(self, r: int) -> tuple[Node, ...]:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[r] for r in range(*index.indices(len(self))))
        r = range(len(self._cache))[index]  # negative indices, IndexError
        nodes = self._cache[r]
        if nodes is None:
            nodes = self._cache[r] = self._build(r)
        return nodes

    def __iter__(self) -> Iterator[tuple[Node, ...]]:
        return (self[r] for r in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRanks | tuple | list):
            if len(self) != len(other):
                return False
            return all(tuple(a) == tuple(b) for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({tuple(self)!r})"
