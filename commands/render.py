"""Rich renderings of results."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def results_table(rows: list[dict[str, Any]], title: str, show_fits: bool = False) -> Table:
    best = min((r["step_time"] for r in rows if r.get("fits", True)), default=None)
    table = Table(title=title, title_justify="left")
    for col, justify in (
        ("name", "left"),
        ("algorithm", "left"),
        ("p", "right"),
        ("v", "right"),
        ("m", "right"),
        ("step time", "right"),
        ("bubble", "right"),
        ("steady bubble", "right"),
        ("peak mem", "right"),
        ("vs best", "right"),
    ):
        table.add_column(col, justify=justify)
    if show_fits:
        table.add_column("fits", justify="center")
    for r in rows:
        ratio = r["step_time"] / best if best else float("nan")
        style = "bold green" if best is not None and r["step_time"] == best and r.get("fits", True) else None
        cells = [
            r["name"],
            r["algorithm"],
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
