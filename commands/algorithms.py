"""`primuspp algorithms`: the registry, with aliases, placement, v, constraints and memory class."""

from __future__ import annotations

import json

from rich import box
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
        box=box.SIMPLE_HEAD,
        show_lines=True,
        pad_edge=False,
        collapse_padding=True,
    )
    # names never wrap; the prose columns wrap to whatever width is left (an 80-column terminal fits)
    table.add_column("name (aliases)", no_wrap=True, min_width=max(len(r["name"]) for r in records))
    table.add_column("placement, v", no_wrap=True)
    table.add_column("peak activation", max_width=12)
    table.add_column("what it does; constraints")
    for r in records:
        table.add_row(
            "\n".join([r["name"], *(f"[dim]{a}[/dim]" for a in r["aliases"])]),
            f"{r['placement']}\nv {r['vpp']}",
            r["memory"],
            f"{r['summary']}\n[dim]{r['constraints']}[/dim]",
        )
    out.print(table)
