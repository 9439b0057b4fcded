"""Serialised forms of a ScheduleTable: compact text, exact JSON, and torch.distributed.pipelining CSV."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from primuspp.errors import ValidationError
from primuspp.schedule.nodes import Node, NodeKind, format_node, parse_node
from primuspp.schedule.placement import Placement, make_placement
from primuspp.schedule.table import ScheduleTable

JSON_FORMAT = "primuspp.schedule/1"
_TEXT_HEADER = "# primuspp schedule"


def to_text(table: ScheduleTable) -> str:
    """One rank a line, nodes as `kind mb.stage` (`F0.0 SEND_F0.0>1 ...`), after a one-line header."""
    header = (
        f"{_TEXT_HEADER} algorithm={table.algorithm} placement={table.placement.kind} pp={table.pp} "
        f"vpp={table.vpp} micro_batches={table.num_microbatches}"
    )
    lines = [header] + [" ".join(format_node(n) for n in nodes) for nodes in table.ranks]
    return "\n".join(lines) + "\n"


def from_text(text: str) -> ScheduleTable:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith(_TEXT_HEADER):
        raise ValidationError(f"text schedule: first line must start with '{_TEXT_HEADER}'")
    fields: dict[str, str] = {}
    for item in lines[0][len(_TEXT_HEADER) :].split():
        key, _, value = item.partition("=")
        fields[key] = value
    try:
        placement = make_placement(fields["placement"], int(fields["pp"]), int(fields["vpp"]))
        m = int(fields["micro_batches"])
    except (KeyError, ValueError) as err:
        raise ValidationError(f"text schedule header: missing or bad field {err}") from None
    ranks = tuple(tuple(parse_node(tok) for tok in ln.split()) for ln in lines[1:])
    return ScheduleTable(placement, m, ranks, fields.get("algorithm", "custom"))


def to_json_dict(table: ScheduleTable) -> dict[str, Any]:
    return {
        "format": JSON_FORMAT,
        "algorithm": table.algorithm,
        "params": table.params,
        "micro_batches": table.num_microbatches,
        "placement": table.placement.to_dict(),
        "ranks": [[format_node(n) for n in nodes] for nodes in table.ranks],
    }


def to_json(table: ScheduleTable) -> str:
    return json.dumps(to_json_dict(table), indent=1) + "\n"


def from_json_dict(data: Any, source: str = "schedule") -> ScheduleTable:
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise ValidationError(
            f'{source}: not a primuspp schedule (expected a JSON object with "format": "{JSON_FORMAT}", '
            "as written by `primuspp dump --format json`)"
        )
    for key in ("micro_batches", "placement", "ranks"):
        if key not in data:
            raise ValidationError(f"{source}: missing key {key!r}")
    placement = Placement.from_dict(data["placement"])
    ranks = data["ranks"]
    if not isinstance(ranks, list) or not all(isinstance(r, list) for r in ranks):
        raise ValidationError(f"{source}: 'ranks' must be a list of lists of node strings")
    nodes = tuple(tuple(parse_node(str(tok)) for tok in r) for r in ranks)
    return ScheduleTable(
        placement,
        int(data["micro_batches"]),
        nodes,
        str(data.get("algorithm", "custom")),
        data.get("params", {}),
    )


def from_json(text: str, source: str = "schedule") -> ScheduleTable:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValidationError(f"{source}: invalid JSON ({err.msg} at line {err.lineno})") from None
    return from_json_dict(data, source)


_TORCH_KIND = {NodeKind.F: "F", NodeKind.B: "I", NodeKind.W: "W", NodeKind.BW: "B"}


def _torch_action(node: Node) -> str:
    if node.kind is NodeKind.FB:
        inner = ";".join(_torch_action(p) for p in node.parts)
        return f"({inner})OVERLAP_F_B"
    return f"{node.stage}{_TORCH_KIND[node.kind]}{node.microbatch}"


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
