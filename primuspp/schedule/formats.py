"""Serialised forms of a ScheduleTable: compact text, exact JSON, and torch.distributed.pipelining CSV."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

from primuspp.errors import ConfigError, ValidationError
from primuspp.inputs import parse_json
from primuspp.schedule.compact import LoweredRanks
from primuspp.schedule.limits import MAX_MB, MAX_PP, MAX_VPP
from primuspp.schedule.nodes import Node, NodeKind, format_node, fused, parse_node
from primuspp.schedule.placement import PLACEMENT_KINDS, Placement, make_placement
from primuspp.schedule.table import ScheduleTable

JSON_FORMAT = "primuspp.schedule/1"
_TEXT_HEADER = "# primuspp schedule"


def to_text(table: ScheduleTable) -> str:
    """One rank a line, nodes as `kind mb.stage` (`F0.0 SEND_F0.0>1 ...`), after a one-line header."""
    header = (
        f"{_TEXT_HEADER} algorithm={table.algorithm} placement={table.placement.kind} pp={table.pp} "
        f"vpp={table.vpp} micro_batches={table.num_microbatches}"
    )
    lines = [header] + [_joined(table, r, " ") for r in range(len(table.ranks))]
    return "\n".join(lines) + "\n"


def node_texts(table: ScheduleTable) -> list[list[str]]:
    """Each rank's nodes as `format_node` writes them (read from the arrays of a compact table)."""
    return [_rank_texts(table, r) for r in range(len(table.ranks))]


def _rank_texts(table: ScheduleTable, r: int) -> list[str]:
    ranks = table.ranks
    if isinstance(ranks, LoweredRanks):
        return ranks.texts(r)
    return [format_node(n) for n in ranks[r]]


def _joined(table: ScheduleTable, r: int, sep: str) -> str:
    """`sep.join(_rank_texts(table, r))` (a compact table's made from its columns at once)."""
    ranks = table.ranks
    return ranks.joined(r, sep) if isinstance(ranks, LoweredRanks) else sep.join(_rank_texts(table, r))


def from_text(text: str) -> ScheduleTable:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith(_TEXT_HEADER):
        raise ValidationError(f"text schedule: first line must start with '{_TEXT_HEADER}'")
    fields: dict[str, str] = {}
    for item in lines[0][len(_TEXT_HEADER) :].split():
        key, _, value = item.partition("=")
        fields[key] = value
    try:
        pp, vpp, m = (int(fields[k]) for k in ("pp", "vpp", "micro_batches"))
        kind = fields["placement"]
    except (KeyError, ValueError) as err:
        raise ValidationError(f"text schedule header: missing or bad field {err}") from None
    for key, value, high in (("pp", pp, MAX_PP), ("vpp", vpp, MAX_VPP), ("micro_batches", m, MAX_MB)):
        _check_int(value, key, high, "text schedule header")
    placement = make_placement(_kind(kind, "text schedule header"), pp, vpp)
    ranks = _nodes([ln.split() for ln in lines[1:]], "text schedule")
    _check_ranges(ranks, placement, m, "text schedule")
    return ScheduleTable(placement, m, ranks, fields.get("algorithm", "custom"))


def _nodes(ranks: list[list[Any]], source: str) -> tuple[tuple[Node, ...], ...]:
    try:
        return tuple(tuple(parse_node(str(tok)) for tok in r) for r in ranks)
    except ValueError as err:  # e.g. a microbatch number over Python's digit limit
        raise ValidationError(f"{source}: bad node ({' '.join(str(err).split())})") from None


def to_json_dict(table: ScheduleTable) -> dict[str, Any]:
    """The JSON document of `table`."""
    return {**_json_head(table), "ranks": node_texts(table)}


def _json_head(table: ScheduleTable) -> dict[str, Any]:
    return {
        "format": JSON_FORMAT,
        "algorithm": table.algorithm,
        "params": table.params,
        "micro_batches": table.num_microbatches,
        "placement": table.placement.to_dict(),
    }


def to_json_text(table: ScheduleTable) -> str:
    """`json.dumps(to_json_dict(table))`: one line, as result directories hold it."""
    return "".join(to_json_pieces(table))


def to_json_pieces(table: ScheduleTable) -> Iterator[str]:
    """`to_json_text` in pieces, one rank's nodes at a time: result directories write a large table's text
    piece by piece, never holding it whole."""
    yield json.dumps(_json_head(table))[:-1] + ', "ranks": ['
    for r in range(len(table.ranks)):
        # a rank's json.dumps: node texts hold nothing JSON escapes (letters, digits and `_.<>+`)
        texts = _joined(table, r, '", "')
        yield (", " if r else "") + (f'["{texts}"]' if texts else "[]")
    yield "]}"


def to_json(table: ScheduleTable) -> str:
    return json.dumps(to_json_dict(table), indent=1) + "\n"


def _check_int(value: Any, key: str, high: int, source: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValidationError(f"{source}: {key}={value!r}: expected an integer from 1 to {high:,}")


#: the names users give placements (Megatron's "interleaved", torch's "looped" schedules)
_KIND_ALIASES = {"interleaved": "loop", "1f1b-interleaved": "loop", "looped": "loop", "v-shape": "v"}


def _kind(kind: Any, source: str) -> str:
    """The placement kind `kind` names (a PLACEMENT_KINDS entry or an alias), or a one-line refusal."""
    kind = _KIND_ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    if kind not in PLACEMENT_KINDS:
        raise ValidationError(
            f"{source}: placement.kind={kind!r}: unknown placement (allowed: {', '.join(PLACEMENT_KINDS)}, "
            f"or {', '.join(_KIND_ALIASES)})"
        )
    return kind


def _check_placement(placement: Placement, source: str) -> None:
    """Field lengths and ranges agree (routes were checked to cover 0..n-1 by Placement itself)."""
    n = placement.num_stages
    for key, values, high in (
        ("stage_chunk", placement.stage_chunk, placement.vpp),
        ("model_part", placement.model_part, n),
    ):
        if len(values) != n or any(not 0 <= x < high for x in values):
            raise ValidationError(
                f"{source}: placement.{key}: expected {n} values (one per stage) in 0..{high - 1}"
            )


def _check_ranges(nodes: tuple[tuple[Node, ...], ...], placement: Placement, m: int, source: str) -> None:
    """Every node names a microbatch < m, a stage < the stage count and a peer < pp (checked before the
    validator, which indexes by them)."""
    n, pp = placement.num_stages, placement.pp
    for rank, row in enumerate(nodes):
        for pos, node in enumerate(row):
            for part in node.parts or (node,):
                if not (0 <= part.microbatch < m and 0 <= part.stage < n) or not (
                    part.peer is None or 0 <= part.peer < pp
                ):
                    raise ValidationError(
                        f"{source}: ranks[{rank}][{pos}]={format_node(node)!r}: microbatch, stage or peer "
                        f"out of range (micro_batches={m}, {n} stages, pp={pp})"
                    )


def from_json_dict(data: Any, source: str = "schedule") -> ScheduleTable:
    """A table from its JSON document; sizes, the placement kind and field types are checked first (a table
    is user input: `1e30` microbatches or an unknown placement kind is refused in one line)."""
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise ValidationError(
            f'{source}: not a primuspp schedule (expected a JSON object with "format": "{JSON_FORMAT}", '
            "as written by `primuspp dump --format json`)"
        )
    for key in ("micro_batches", "placement", "ranks"):
        if key not in data:
            raise ValidationError(f"{source}: missing key {key!r}")
    _check_int(data["micro_batches"], "micro_batches", MAX_MB, source)
    place = data["placement"]
    if not isinstance(place, dict):
        raise ValidationError(
            f"{source}: placement={place!r}: expected an object (as `dump --format json` writes)"
        )
    place = {**place, "kind": _kind(place.get("kind"), source)}
    for key, high in (("pp", MAX_PP), ("vpp", MAX_VPP)):
        if key in place:
            _check_int(place[key], f"placement.{key}", high, source)
    ranks = data["ranks"]
    if "stage_rank" not in place:  # a hand-written table names its placement by kind, pp and vpp
        place = make_placement(
            place["kind"], place.get("pp", max(len(ranks), 1)), place.get("vpp", 1)
        ).to_dict()
    for key in ("stage_rank", "stage_chunk", "routes", "model_part"):
        if key in place and not isinstance(place[key], list):
            raise ValidationError(f"{source}: placement.{key}: expected a list")
    n = len(place.get("stage_rank", []))
    routes = place.get("routes", [])
    if not all(isinstance(r, list) and all(isinstance(x, int) and 0 <= x < n for x in r) for r in routes):
        raise ValidationError(f"{source}: placement.routes: expected lists of stages in 0..{n - 1}")
    try:
        placement = Placement.from_dict(place)
    except ValidationError as err:  # name the file and the key (placement.stage_rank, .routes)
        raise ValidationError(f"{source}: placement.{_placement_key(str(err))}: {err}") from None
    _check_placement(placement, source)
    if not isinstance(ranks, list) or not all(isinstance(r, list) for r in ranks):
        raise ValidationError(f"{source}: 'ranks' must be a list of lists of node strings")
    if len(ranks) != placement.pp:
        raise ValidationError(f"{source}: ranks: {len(ranks)} lists for placement.pp={placement.pp}")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ValidationError(f"{source}: params={params!r}: expected an object")
    nodes = _nodes(ranks, source)
    _check_ranges(nodes, placement, data["micro_batches"], source)
    return ScheduleTable(
        placement, data["micro_batches"], nodes, str(data.get("algorithm", "custom")), params
    )


def _placement_key(message: str) -> str:
    return "routes" if "routes" in message else "stage_rank"


def from_json(text: str, source: str = "schedule") -> ScheduleTable:
    """A table from JSON text, read under primuspp.inputs' limits (no NaN/Infinity, bounded nesting)."""
    try:
        data = parse_json(text, source)
    except ConfigError as err:
        raise ValidationError(str(err).replace("not valid JSON", "invalid JSON", 1)) from None
    return from_json_dict(data, source)


_TORCH_KIND = {NodeKind.F: "F", NodeKind.B: "I", NodeKind.W: "W", NodeKind.BW: "B"}


def _torch_action(node: Node) -> str:
    if node.kind is NodeKind.FB:
        inner = ";".join(_torch_action(p) for p in node.parts)
        return f"({inner})OVERLAP_F_B"
    return f"{node.stage}{_TORCH_KIND[node.kind]}{node.microbatch}"


_FROM_TORCH = {text: kind for kind, text in _TORCH_KIND.items()}
_TORCH_ACTION = re.compile(r"(\d{1,9})([FIBW])(\d{1,9})")
_OVERLAP = ")OVERLAP_F_B"


def from_csv(text: str, source: str = "csv") -> ScheduleTable:
    """A compute-only table from torch.distributed.pipelining's CSV (`_load_csv`'s compute_only format, as
    `to_csv` writes it): a row per rank, actions `<stage><F|I|B|W><microbatch>`, empty cells idle. p, the
    stage count and m are read off the rows; the placement is the kind whose stage ranks and routes the
    actions follow. The comm nodes are left to lowering."""
    rows = list(csv.reader(io.StringIO(text)))
    while rows and not any(cell.strip() for cell in rows[-1]):
        rows.pop()
    if not rows:
        raise ValidationError(f"{source}: no rows (expected one row of actions per rank, e.g. 0F0,0F1,0I0)")
    _check_int(len(rows), "rows (pp)", MAX_PP, source)
    ranks = tuple(
        tuple(_csv_node(c, source, r, i) for i, c in enumerate(row) if c.strip())
        for r, row in enumerate(rows)
    )
    parts = [(r, p) for r, nodes in enumerate(ranks) for n in nodes for p in n.parts or (n,)]
    pp, n = len(ranks), max((p.stage for _, p in parts), default=0) + 1
    m = max((p.microbatch for _, p in parts), default=0) + 1
    _check_int(m, "micro_batches (largest microbatch + 1)", MAX_MB, source)
    # the narrowest first: a bidirectional table also fits a V (same ranks), a linear one a loop of v=1
    for kind in ("linear", "bidirectional", "loop", "v") if n % pp == 0 and n // pp <= MAX_VPP else ():
        placement = make_placement(kind, pp, n // pp)
        routes = [set(route) for route in placement.routes]
        if placement.num_stages == n and all(
            placement.stage_rank[p.stage] == r and p.stage in routes[p.microbatch % len(routes)]
            for r, p in parts
        ):
            return ScheduleTable(placement, m, ranks)
    raise ValidationError(
        f"{source}: the stages' ranks ({n} stages on {pp} rows) match no placement "
        f"(allowed: {', '.join(PLACEMENT_KINDS)}: stage s on rank s, s % pp, or a V)"
    )


def _csv_node(cell: str, source: str, rank: int, pos: int) -> Node:
    cell = cell.strip()
    if cell.startswith("(") and cell.endswith(_OVERLAP):
        pair = [_csv_node(c, source, rank, pos) for c in cell[1 : -len(_OVERLAP)].split(";")]
        try:
            return fused(*pair)
        except (TypeError, ValueError):  # not one F and one B/BW: refused below
            pass
    match = _TORCH_ACTION.fullmatch(cell)
    if match:
        stage, kind, mb = match.groups()
        return Node(_FROM_TORCH[kind], int(mb), int(stage))
    raise ValidationError(
        f"{source}: rank {rank}, action {pos}: {cell[:40]!r}: expected a compute action such as 0F1, 0I1, "
        "0W1, 0B1 or (0F2;1I0)OVERLAP_F_B (torch's compute_only CSV; comm actions are inserted here)"
    )


def to_csv(table: ScheduleTable) -> str:
    """Compute-only rows in torch.distributed.pipelining's `_load_csv` format.

    torch names full backward `B` and input-grad `I`; ours are `BW` and `B`. Comm and memory nodes are
    left out (torch lowers its own comms).
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for nodes in table.ranks:
        writer.writerow([_torch_action(n) for n in nodes if n.kind.is_compute])
    return out.getvalue()
