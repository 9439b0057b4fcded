"""`primuspp algorithms`: the registry, with aliases, placement, v, constraints and memory class."""

from __future__ import annotations

import json

from rich.table import Table

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.commands import options as o
from primuspp.commands.console import out


def algorithms(json_: o.JsonOpt = False) -> None:
    """List the algorithms, their aliases, placement, allowed v, constraints and memory class."""
    records = [
        {
            "name": a.name,
            "aliases": list(a.aliases),
            "placement": a.placement,
            "vpp": a.vpp_rule,
            "vpp_default": a.vpp_default,
            "constraints": a.constraints,
            "memory": a.memory,
            "summary": a.summary,
            "params": [p.name for p in a.params],
            "uses_costs": a.uses_costs,
        }
        for a in ALGORITHMS.values()
    ]
    if json_:
        print(json.dumps({"algorithms": records}))
        return
    table = Table(
        title="Algorithms (also: file:PATH loads a table from `primuspp dump --format json`)",
        title_justify="left",
    )
    for col in ("name", "aliases", "placement", "v", "constraints", "peak activation", "what it does"):
        table.add_column(col)
    for r in records:
        table.add_row(
            r["name"],
            ", ".join(r["aliases"]),
            r["placement"],
            r["vpp"],
            r["constraints"],
            r["memory"],
            r["summary"],
        )
    out.print(table)
