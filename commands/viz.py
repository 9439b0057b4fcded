"""`primuspp viz` (alias `visualize`): pipeline timelines as one self-contained HTML page and/or a Chrome
trace, from simulate outputs, real-run pp_data dumps or YAML configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from primuspp.commands.console import err
from primuspp.outputs import check_file_target, write_file
from primuspp.trace.chrome import chrome_traces
from primuspp.viz.html import timeline_page
from primuspp.viz.sources import load_sources, shown_iterations, with_transfers

DEFAULT_OUT = Path("pp_viz.html")


def viz(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Simulate output directories (a root or one run), pp_data directories (Primus' format, "
            "its older dumps too) or YAML configs (simulated first). Several: one section each, one time "
            "axis.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help=f"HTML file to write (default {DEFAULT_OUT}; none with only --chrome)."
        ),
    ] = None,
    iteration: Annotated[
        str | None,
        typer.Option(
            "--iteration",
            help="Iteration shown first for multi-iteration runs (default: one of median step time).",
        ),
    ] = None,
    chrome: Annotated[
        Path | None,
        typer.Option(
            "--chrome", help="Write a Chrome/Perfetto trace JSON of the shown iterations to this file."
        ),
    ] = None,
) -> None:
    """Draw pipeline timelines: an interactive HTML page that opens offline, and/or a Chrome trace."""
    if out is None and chrome is None:
        out = DEFAULT_OUT
    for target, key in ((out, "--out"), (chrome, "--chrome")):
        if target is not None:
            check_file_target(target, key)  # before reading and drawing anything
    sources = load_sources(paths)
    if out is not None:
        html = timeline_page(sources, iteration)
        write_file(out, html)
        sections = f"{len(sources)} section{'s' * (len(sources) != 1)}"
        err.print(f"wrote {out} ({sections}, {len(html) / 1e6:.1f} MB)", soft_wrap=True)
    if chrome is not None:
        picks = shown_iterations(sources, iteration)
        runs = [(s.label, with_transfers(s, i)) for s, i in zip(sources, picks, strict=True)]
        write_file(chrome, json.dumps(chrome_traces(runs)) + "\n", "--chrome")
        err.print(f"wrote {chrome} (Chrome/Perfetto trace JSON)", soft_wrap=True)
