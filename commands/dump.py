"""`primuspp dump`: write tables as text, JSON, CSV (torch.distributed.pipelining) or a Chrome trace."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from primuspp.commands import options as o
from primuspp.commands.console import err, out
from primuspp.config.loader import run_specs, simulation_config
from primuspp.outputs import check_file_target, safe_component, write_file
from primuspp.schedule.formats import to_csv, to_json, to_text
from primuspp.sim.runs import build


class Format(StrEnum):
    text = "text"
    json = "json"
    csv = "csv"
    chrome = "chrome"


_EXT = {Format.text: "txt", Format.json: "json", Format.csv: "csv", Format.chrome: "trace.json"}


def dump(
    config: o.ConfigOpt = None,
    algo: o.AlgoOpt = None,
    pp: o.PpOpt = None,
    vpp: o.VppOpt = None,
    mb: o.MbOpt = None,
    fwd: o.FwdOpt = None,
    bwd: o.BwdOpt = None,
    wgrad: o.WgradOpt = None,
    comm: o.CommOpt = None,
    mem_limit: o.MemLimitOpt = None,
    max_nodes: o.MaxNodesOpt = o.DEFAULT_MAX_NODES,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    out_path: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output file (one table) or directory (several); default stdout."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Validate and report instead of writing the table.")
    ] = False,
    show: Annotated[
        bool,
        typer.Option(
            "--show",
            help="Draw each table's simulated timeline in the terminal, instead of the table on stdout "
            "(with --out: besides the files).",
        ),
    ] = False,
) -> None:
    """Write schedule tables (default: every run of the packaged config, as text on stdout)."""
    specs = run_specs(
        simulation_config(config),
        o.overrides(algo, pp, vpp, mb, fwd, bwd, wgrad, comm, mem_limit, max_nodes=max_nodes),
    )
    if out_path is not None and not check:
        for target in _targets(out_path, [spec.name for spec in specs], fmt):
            check_file_target(target, "--out")  # before any table is built
    tables = []
    for spec in specs:
        tables.append((spec, build(spec)))
    if check:  # build_schedule validated each table: said here with what was checked
        for spec, table in tables:
            n_comm = sum(1 for nodes in table.ranks for n in nodes if n.kind.is_comm)
            out.print(
                f"[green]valid[/green] {spec.name}: {table.describe()}, {table.num_nodes()} nodes "
                f"({n_comm} p2p); dependencies, FIFO pairing and rendezvous termination checked"
            )
        return
    from primuspp.sim.engine import simulate  # numpy (the tables are built: it is loaded already)

    if show:
        from primuspp.viz.terminal import render_timeline

        for spec, table in tables:
            out.print(render_timeline(simulate(table, spec.costs, spec.name).timeline, out.width))
        if out_path is None:
            return
    rendered = []
    for spec, table in tables:
        if fmt is Format.text:
            text = to_text(table)
        elif fmt is Format.json:
            text = to_json(table)
        elif fmt is Format.csv:
            text = to_csv(table)
        else:
            from primuspp.trace.chrome import chrome_trace

            text = json.dumps(chrome_trace(simulate(table, spec.costs, spec.name).timeline)) + "\n"
        rendered.append((spec.name, text))
    if out_path is None:
        for i, (name, text) in enumerate(rendered):
            if len(rendered) > 1 and fmt is Format.text:
                print(("" if i == 0 else "\n") + f"## {name}")
            print(text, end="")
        return
    targets = _targets(out_path, [name for name, _ in rendered], fmt)
    if len(targets) == 1 and targets[0] == out_path:
        write_file(out_path, rendered[0][1], "--out")
        err.print(f"wrote {out_path}")
        return
    for target, (_, text) in zip(targets, rendered, strict=True):
        write_file(target, text, "--out")
    err.print(f"wrote {len(rendered)} tables to {out_path}/")


def _targets(out_path: Path, names: list[str], fmt: Format) -> list[Path]:
    """One table: `out_path` itself unless it is a directory; several: `<out_path>/<name>.<ext>` each."""
    if len(names) == 1 and not out_path.is_dir():
        return [out_path]
    return [out_path / f"{safe_component(name, 'run name')}.{_EXT[fmt]}" for name in names]
