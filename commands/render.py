"""Rich renderings of results."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def results_table(rows: list[dict[str, Any]], title: str, show_fits: bool = False) -> Table:
    """One row per result; the fastest (that fits) in bold green. The algorithm column appears only when
    some run's name does not already say its algorithm."""
    best = min((r["step_time"] for r in rows if r.get("fits", True)), default=None)
    show_algo = any(not str(r["name"]).startswith(str(r["algorithm"])) for r in rows)
    table = Table(title=title, title_justify="left")
    table.add_column("name", no_wrap=True)
    if show_algo:
        table.add_column("algorithm", no_wrap=True)
    for col in ("p", "v", "m", "step time", "bubble", "steady", "peak mem", "vs best"):
        table.add_column(col, justify="right", no_wrap=True)
    if show_fits:
        table.add_column("fits", justify="center", no_wrap=True)
    for r in rows:
        ratio = r["step_time"] / best if best else float("nan")
        style = "bold green" if best is not None and r["step_time"] == best and r.get("fits", True) else None
        cells = [r["name"], *([r["algorithm"]] if show_algo else [])]
        cells += [
            str(r["pp"]),
            str(r["vpp"]),
            str(r["micro_batches"]),
            _num(r["step_time"]),
            f"{r['bubble_rate']:.2%}",
            f"{r['steady_bubble_rate']:.2%}",
            f"{r['peak_memory']:.4g}",
            f"{ratio:.3f}x",
        ]
        if show_fits:
            cells.append("yes" if r["fits"] else "[red]no[/red]")
        table.add_row(*cells, style=style)
    return table
