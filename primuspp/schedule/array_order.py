"""A compute order stored as integer columns: what generators emit instead of one Node object per step.

A compute order is, per rank, the compute and memory nodes that rank runs, in order. At p=64, m=512 the V
family's holds about 200,000 nodes; as Node objects they cost most of a simple generator's time and, at
p=256, m=2048, most of the build's memory. `ArrayOrder` keeps the same nodes as the rows of
`order_arrays` (rank-major numpy columns: kind code, microbatch, stage; a composite node as one row
per part) and reads as the `Sequence[Sequence[Node]]` it stands for: `order[r]` builds rank r's Node tuple
once and caches it, so every consumer that walks Nodes keeps working. Lowering, timing, validation, the
simulator and candidate scoring read the columns directly (`order_arrays(order)` returns them as
they are), so a build never creates a compute Node.

numpy is imported inside the functions that need it: importing this module costs nothing at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import chain, pairwise
from operator import attrgetter
from typing import Any

from primuspp.schedule.lazy_ranks import LazyRanks
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.rows import Rows, memo_of
from primuspp.schedule.semantics import SEMANTICS

#: kind codes in the arrays: the index of the kind in NodeKind's order
KINDS: tuple[NodeKind, ...] = tuple(NodeKind)
CODE: dict[str, int] = {k.text: i for i, k in enumerate(KINDS)}  # keyed by text: a str hashes in C
_KIND_TEXT, _MB, _STAGE = attrgetter("kind.text"), attrgetter("microbatch"), attrgetter("stage")
#: up to this many nodes the index columns are numpy's native intp (indexing with int32 converts them
#: first, which costs more than the copy saves on small tables) and per-row facts are kept in the rows'
#: memo; above, int32 (the memo's memory)
NATIVE_MAX = 1 << 20


class ArrayOrder(LazyRanks):
    """Each rank's compute order as columns; reads as `tuple[tuple[Node, ...], ...]`.

    `rows`: the `order_arrays` dictionary of the order (node_kind, parts_ok, kind, mb, stage, rank,
    index, part); `first[r]`: rank r's first node in the flat, rank-major node numbering (`first[-1]`: the
    node count). Build one with `from_ranks` (per-rank columns of simple nodes), `from_flat` or
    `from_nodes`."""

    __slots__ = ("_cache", "_lengths", "_row_first", "first", "rows")

    def __init__(self, rows: dict[str, Any], first: Any) -> None:
        import numpy as np

        # the columns as `Rows`: facts derived from them are remembered across a build's passes
        self.rows, self.first = rows if isinstance(rows, Rows) else Rows(rows), first
        n_ranks = len(first) - 1
        # rank r's rows: _row_first[r] .. _row_first[r + 1] (rows are rank-major; one row per node: `first`)
        if len(rows["kind"]) == int(first[-1]):
            self._row_first = first
        else:
            self._row_first = np.searchsorted(rows["rank"], np.arange(n_ranks + 1), "left")
        self._cache: list[tuple[Node, ...] | None] = [None] * n_ranks
        self._lengths: list[int] | None = None

    # -- construction ------------------------------------------------------------------------------------

    @classmethod
    def from_flat(cls, kind: Any, mb: Any, stage: Any, lengths: Sequence[int]) -> ArrayOrder:
        """Simple nodes (no composite kind), rank-major: rank r's are the next `lengths[r]` of the columns
        `kind` (codes of KINDS), `mb`, `stage`."""
        import numpy as np

        lengths_a = np.asarray(lengths, dtype=np.int64)
        first = np.zeros(len(lengths_a) + 1, dtype=np.int64)
        np.cumsum(lengths_a, out=first[1:])
        n = int(first[-1])
        kind = np.asarray(kind, dtype=np.int8)
        if len(kind) != n or len(mb) != n or len(stage) != n:
            raise ValueError(f"columns of {len(kind)}, {len(mb)}, {len(stage)} rows for {n} nodes")
        # the kinds that occur (`kinds_present`, per row and per node alike here: kept in the memo)
        present = np.flatnonzero(np.bincount(kind, minlength=len(KINDS))).tolist() if n else []
        if any(part_tables()[0][c] for c in present) or (present and present[-1] >= len(KINDS)):
            raise ValueError("from_flat takes simple nodes only: build composite nodes with from_nodes")
        rank = np.repeat(np.arange(len(lengths_a), dtype=np.int64), lengths_a)
        rows = {
            "node_kind": kind,
            "parts_ok": True,
            "kind": kind,
            "mb": np.asarray(mb, dtype=np.int64),
            "stage": np.asarray(stage, dtype=np.int64),
            "rank": rank,
            "index": np.arange(n, dtype=np.int64) - first[rank],
            "part": np.zeros(n, dtype=np.int64),
        }
        rows = Rows(rows)
        rows.memo["present", "kind"] = rows.memo["present", "node_kind"] = present
        return cls(rows, first)

    @classmethod
    def from_rows(
        cls, node_kind: Any, kind: Any, mb: Any, stage: Any, part: Any, lengths: Sequence[int]
    ) -> ArrayOrder:
        """Nodes given as rows (rank-major), composite ones included: `node_kind` one code per node,
        `kind`/`mb`/`stage`/`part` one value per row (a composite node: one row per part, `part` 0, 1, ...;
        a simple node: one row, part 0); rank r holds the next `lengths[r]` nodes."""
        import numpy as np

        composite_of, n_parts_of, part_ok_of = part_tables()
        lengths_a = np.asarray(lengths, dtype=np.int64)
        first = np.zeros(len(lengths_a) + 1, dtype=np.int64)
        np.cumsum(lengths_a, out=first[1:])
        node_kind = np.asarray(node_kind, dtype=np.int8)
        kind, part = np.asarray(kind, dtype=np.int8), np.asarray(part, dtype=np.int64)
        node = np.cumsum(part == 0) - 1  # each row's node
        if len(node_kind) != int(first[-1]) or int(node[-1] if len(node) else -1) + 1 != len(node_kind):
            raise ValueError(
                f"{len(node_kind)} node kinds, {int(first[-1])} nodes by lengths, rows for others"
            )
        rank = np.repeat(np.arange(len(lengths_a), dtype=np.int64), lengths_a)
        n_parts = np.bincount(node, minlength=len(node_kind))
        composite = composite_of[node_kind]
        simple_ok = (n_parts[~composite] == 1).all() and (kind == node_kind[node])[~composite[node]].all()
        if not simple_ok:
            raise ValueError("a simple node takes one row of its own kind")
        parts_ok = bool((n_parts[composite] == n_parts_of[node_kind[composite]]).all())
        rows_c = composite[node]
        if parts_ok and rows_c.any():
            parts_ok = bool(part_ok_of[node_kind[node[rows_c]], part[rows_c], kind[rows_c]].all())
        if not parts_ok:
            raise ValueError("a composite node lacks the parts its kind names")
        rows = {
            "node_kind": node_kind,
            "parts_ok": True,
            "kind": kind,
            "mb": np.asarray(mb, dtype=np.int64),
            "stage": np.asarray(stage, dtype=np.int64),
            "rank": rank[node],
            "index": node - first[rank[node]],
            "part": part,
        }
        return cls(rows, first)

    @classmethod
    def from_ranks(cls, ranks: Sequence[tuple[Any, Any, Any]]) -> ArrayOrder:
        """Simple nodes given per rank as (kind codes, microbatches, stages) columns."""
        import numpy as np

        if not ranks:
            return cls.from_flat(np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64), [])
        kinds, mbs, stages = zip(*ranks, strict=True)
        return cls.from_flat(
            np.concatenate([np.asarray(k, dtype=np.int8) for k in kinds]),
            np.concatenate([np.asarray(x, dtype=np.int64) for x in mbs]),
            np.concatenate([np.asarray(x, dtype=np.int64) for x in stages]),
            [len(k) for k in kinds],
        )

    @classmethod
    def from_nodes(cls, order: Sequence[Sequence[Node]]) -> ArrayOrder:
        """Any compute order of Nodes (composite ones included) as columns."""
        import numpy as np

        if isinstance(order, ArrayOrder):
            return order
        lengths = [len(seq) for seq in order]
        first = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=first[1:])
        rows = order_arrays(order)
        if not rows["parts_ok"]:  # a composite node without the parts its kind names has no rows of its own
            raise ValueError("a composite node lacks the parts its kind names")
        return cls(rows, first)

    # -- cheap facts ---------------------------------------------------------------------------------------

    def lengths(self) -> list[int]:
        """Each rank's node count, without building a Node (a new list each call: the caller may keep it)."""
        if self._lengths is None:
            first = self.first.tolist()
            self._lengths = [b - a for a, b in pairwise(first)]
        return list(self._lengths)

    def num_nodes(self) -> int:
        return int(self.first[-1])

    # -- the tuple it stands for ---------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"rows": self.rows, "first": self.first}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["rows"], state["first"])  # type: ignore[misc]

    def _build(self, r: int) -> tuple[Node, ...]:
        rows = self.rows
        a, b = int(self._row_first[r]), int(self._row_first[r + 1])
        kinds = list(map(KINDS.__getitem__, rows["kind"][a:b].tolist()))
        mbs, stages = rows["mb"][a:b].tolist(), rows["stage"][a:b].tolist()
        n_nodes = int(self.first[r + 1] - self.first[r])
        if b - a == n_nodes:  # one row per node: no composite node on this rank
            return tuple(map(Node, kinds, mbs, stages))
        # a composite node is its parts' rows (part 0, 1, ...); it carries its first part's mb and stage
        node_kinds = rows["node_kind"][int(self.first[r]) : int(self.first[r + 1])].tolist()
        out: list[Node] = []
        parts: list[Node] = []
        index = rows["index"][a:b].tolist()
        for i, (kind, mb, stage, at) in enumerate(zip(kinds, mbs, stages, index, strict=True)):
            own = KINDS[node_kinds[at]]
            if own is kind:
                out.append(Node(kind, mb, stage))
                continue
            parts.append(Node(kind, mb, stage))
            if i + 1 == len(index) or index[i + 1] != at:
                out.append(Node(own, parts[0].microbatch, parts[0].stage, None, tuple(parts)))
                parts = []
        return tuple(out)


def rank_lengths(order: Sequence[Sequence[Node]]) -> list[int]:
    """Each rank's node count; an ArrayOrder's without building its Nodes."""
    if isinstance(order, ArrayOrder):
        return order.lengths()
    return [len(seq) for seq in order]


def copied(order: Sequence[Sequence[Node]]) -> Any:
    """A copy a caller may keep or change: each rank as a new list; an ArrayOrder, which nobody can change,
    as it is (copying it would build its Nodes)."""
    if isinstance(order, ArrayOrder):
        return order
    return [list(seq) for seq in order]


def order_arrays(order: Sequence[Sequence[Node]]) -> dict[str, Any]:
    """The order's nodes as flat arrays (rank-major): rank, index in the rank's list, kind code, microbatch,
    stage, and `part`: a composite node becomes one row per part, numbered 0, 1 (0 for a simple node).
    `node_kind`: the kind of each node (one per node, not per row); `parts_ok`: every composite node has the
    parts its semantics name.

    The fields are read with `map` over all nodes at once; only composite nodes' parts are visited one by
    one (`tests/oracles/order_arrays.py` is the plain loop: a test holds the two equal). An `ArrayOrder`
    holds these arrays already: they are returned as they are."""
    import numpy as np

    if isinstance(order, ArrayOrder):
        return order.rows
    composite_of, n_parts_of, part_ok_of = part_tables()
    flat = list(chain.from_iterable(order))
    n = len(flat)
    lengths = np.array([len(seq) for seq in order], dtype=np.int64)
    node_kind = np.fromiter(map(CODE.__getitem__, map(_KIND_TEXT, flat)), dtype=np.int8, count=n)
    mb = np.fromiter(map(_MB, flat), dtype=np.int64, count=n)
    stage = np.fromiter(map(_STAGE, flat), dtype=np.int64, count=n)
    node_rank = np.repeat(np.arange(len(order), dtype=np.int64), lengths)
    node_index = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    composite = composite_of[node_kind]
    if not composite.any():
        return Rows(
            {
                "node_kind": node_kind,
                "parts_ok": True,
                "kind": node_kind,
                "mb": mb,
                "stage": stage,
                "rank": node_rank,
                "index": node_index,
                "part": np.zeros(n, dtype=np.int64),
            }
        )
    # a composite node becomes one row per part (in place of its own row)
    where = np.nonzero(composite)[0]
    parts = [flat[i].parts for i in where.tolist()]
    n_parts = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    per_node = np.ones(n, dtype=np.int64)
    per_node[where] = n_parts
    row_node = np.repeat(np.arange(n, dtype=np.int64), per_node)
    part = np.arange(len(row_node), dtype=np.int64) - np.repeat(np.cumsum(per_node) - per_node, per_node)
    kind, row_mb, row_stage = node_kind[row_node], mb[row_node], stage[row_node]
    part_rows = composite[row_node]
    flat_parts = list(chain.from_iterable(parts))
    m_parts = len(flat_parts)
    part_kind = np.fromiter(map(CODE.__getitem__, map(_KIND_TEXT, flat_parts)), dtype=np.int8, count=m_parts)
    kind[part_rows] = part_kind
    row_mb[part_rows] = np.fromiter(map(_MB, flat_parts), dtype=np.int64, count=m_parts)
    row_stage[part_rows] = np.fromiter(map(_STAGE, flat_parts), dtype=np.int64, count=m_parts)
    # each composite node has as many parts as its kind names, each of an allowed kind
    owner_kind = node_kind[where]
    parts_ok = bool((n_parts == n_parts_of[owner_kind]).all())
    if parts_ok and m_parts:
        parts_ok = bool(part_ok_of[np.repeat(owner_kind, n_parts), part[part_rows], part_kind].all())
    return Rows(
        {
            "node_kind": node_kind,
            "parts_ok": parts_ok,
            "kind": kind,
            "mb": row_mb,
            "stage": row_stage,
            "rank": node_rank[row_node],
            "index": node_index[row_node],
            "part": part,
        }
    )


def one_row_per_node(rows: dict[str, Any]) -> bool:
    """Whether row i of `rows` is node i (no composite node: each node one row of its own)."""
    composite = part_tables()[0]
    return len(rows["kind"]) == len(rows["node_kind"]) and not any(
        composite[c] for c in kinds_present(rows, "node_kind")
    )


def kinds_present(rows: dict[str, Any], column: str = "kind") -> list[int]:
    """The kind codes that occur in `rows[column]` ("kind": per row, "node_kind": per node), ascending
    (`np.unique`'s answer, counted once per order: `rows.Rows.memo`)."""
    import numpy as np

    memo = memo_of(rows)
    got = memo.get(("present", column))
    if got is None:
        got = memo["present", column] = np.flatnonzero(
            np.bincount(rows[column], minlength=len(KINDS))
        ).tolist()
    return got


@cache
def part_tables() -> tuple[Any, Any, Any]:
    """Per kind code: composite or not, its number of parts, and which kinds may fill each part."""
    import numpy as np

    width = max((len(sem.parts) for sem in SEMANTICS.values()), default=0) or 1
    composite = np.zeros(len(KINDS), dtype=bool)
    n_parts = np.zeros(len(KINDS), dtype=np.int64)
    part_ok = np.zeros((len(KINDS), width, len(KINDS)), dtype=bool)
    for kind, sem in SEMANTICS.items():
        k = CODE[kind.text]
        composite[k] = bool(sem.parts)
        n_parts[k] = len(sem.parts)
        for j, allowed in enumerate(sem.parts):
            for a in allowed:
                part_ok[k, j, CODE[a.text]] = True
    return composite, n_parts, part_ok


def kind_stage(rows: dict[str, Any], n_stages: int) -> Any:
    """Each row's index into a (kind x stage) table, flattened (kept in the rows' memo up to NATIVE_MAX
    rows: above, three passes make it again rather than hold it)."""
    kind = rows["kind"]
    n = len(kind)
    import numpy as np

    memo = memo_of(rows) if n <= NATIVE_MAX else {}
    key = ("kind_stage", n_stages)
    got = memo.get(key)
    if got is None:
        got = kind.astype(np.intp if n <= NATIVE_MAX else np.int32)
        got *= n_stages
        got += rows["stage"]
        memo[key] = got
    return got
