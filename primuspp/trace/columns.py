"""Lazy list views over column arrays: a simulated timeline's intervals, transfers and memory curve.

The simulator keeps a timeline as numpy columns (rank, kind, microbatch, stage, chunk, start, end, ...): a
table at p=64, m=512 has hundreds of thousands of intervals and building one Python object per interval
cost more than the simulation itself. Callers that read `RankTimeline.intervals`, `Timeline.transfers` or
`RankTimeline.memory` get one of these views: a read-only sequence that builds its objects on first use
(all at once, then cached) and otherwise behaves as the list it stands for (length, indexing and slicing,
iteration, equality with a list, `repr`, pickling as a plain list). `metrics.timeline_metrics` reads the
columns directly and never builds the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


class LazyList(Sequence):
    """A list built by `build()` on first use, or by the subclass's `_make()` where no `build` is given;
    `length` is known up front (len() builds nothing).

    The column subclasses define `_make` rather than pass their own bound method as `build`: a view holding
    a bound method of itself is a reference cycle, which keeps its columns (a simulated timeline's arrays)
    alive until the cyclic collector runs instead of freeing them with the view."""

    __slots__ = ("_build", "_items", "_length")

    def __init__(self, length: int, build: Callable[[], list[Any]] | None = None) -> None:
        self._length = length
        self._build: Callable[[], list[Any]] | None = build
        self._items: list[Any] | None = None

    def _make(self) -> list[Any]:
        raise NotImplementedError("a LazyList needs `build` or a `_make` of its subclass")

    def items(self) -> list[Any]:
        """The built list (a new list is not made on each call: do not mutate it)."""
        if self._items is None:
            build = self._build if self._build is not None else self._make
            self._items = build()
            self._build = None
        return self._items

    def __len__(self) -> int:
        return self._length

    def __bool__(self) -> bool:
        return self._length > 0

    def __getitem__(self, index):  # type: ignore[override]
        return self.items()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyList):
            return self.items() == other.items()
        if isinstance(other, list | tuple):
            return self.items() == list(other)
        return NotImplemented

    def __hash__(self) -> int:  # a list view: unhashable, as a list is
        raise TypeError("unhashable type: 'LazyList'")

    def __repr__(self) -> str:
        return repr(self.items())

    def __reduce__(self):
        return (list, (self.items(),))


class IntervalColumns(LazyList):
    """One rank's compute intervals as columns (`cols`: numpy arrays of equal length: kind codes into
    `kinds`, microbatch, stage, chunk, start, end; `backward`: the FB rows' backward parts as columns (row,
    kind code, microbatch, stage, chunk), None when no row has one). `timeline_metrics` reads `start`/`end`
    without building objects."""

    __slots__ = ("backward", "chunk", "end", "kind", "kinds", "mb", "stage", "start")

    def __init__(
        self,
        kinds: Sequence[str],
        kind: Any,
        mb: Any,
        stage: Any,
        chunk: Any,
        start: Any,
        end: Any,
        backward: tuple[Any, Any, Any, Any, Any] | None = None,
    ) -> None:
        self.kinds, self.kind, self.mb, self.stage, self.chunk = kinds, kind, mb, stage, chunk
        self.start, self.end, self.backward = start, end, backward
        super().__init__(len(kind))

    def _make(self) -> list[Any]:
        from primuspp.trace.timeline import Interval

        names = self.kinds
        cols = (
            [names[k] for k in self.kind.tolist()],
            self.mb.tolist(),
            self.stage.tolist(),
            self.chunk.tolist(),
            self.start.tolist(),
            self.end.tolist(),
        )
        out = [Interval(*row) for row in zip(*cols, strict=True)]
        if self.backward is not None:
            where, kind, mb, stage, chunk = (col.tolist() for col in self.backward)
            for i, k, b_mb, b_s, b_c in zip(where, kind, mb, stage, chunk, strict=True):
                out[i].backward = (names[k], b_mb, b_s, b_c)
        return out


class TransferColumns(LazyList):
    """A timeline's transfers as columns: tag codes into `tags` ("F"/"B"), microbatch, stage, src, dst,
    sent, arrived (numpy arrays of equal length)."""

    __slots__ = ("arrived", "dst", "mb", "sent", "src", "stage", "tag", "tags")

    def __init__(
        self, tags: Sequence[str], tag: Any, mb: Any, stage: Any, src: Any, dst: Any, sent: Any, arrived: Any
    ) -> None:
        self.tags, self.tag, self.mb, self.stage = tags, tag, mb, stage
        self.src, self.dst, self.sent, self.arrived = src, dst, sent, arrived
        super().__init__(len(tag))

    def _make(self) -> list[Any]:
        from primuspp.trace.timeline import Transfer

        tags = self.tags
        cols = (
            [tags[k] for k in self.tag.tolist()],
            self.mb.tolist(),
            self.stage.tolist(),
            self.src.tolist(),
            self.dst.tolist(),
            self.sent.tolist(),
            self.arrived.tolist(),
        )
        return [Transfer(*row) for row in zip(*cols, strict=True)]


class CurveColumns(LazyList):
    """A memory curve: (0.0, 0.0) then one (time, level) point per event (numpy arrays `time`, `level`)."""

    __slots__ = ("level", "time")

    def __init__(self, time: Any, level: Any) -> None:
        self.time, self.level = time, level
        super().__init__(len(time) + 1)

    def _make(self) -> list[tuple[float, float]]:
        return [(0.0, 0.0), *zip(self.time.tolist(), self.level.tolist(), strict=True)]
