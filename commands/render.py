"""Rich renderings of results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from primuspp.sim.compare import ms as _num


def _memory(r: dict[str, Any], bare: bool) -> str:
    """A row's peak memory in its own unit (bare when the column header says microbatches): bytes as
    KiB/MiB/GiB, and a dump's framework figure (e.g. Primus' reserved GiB, no activation curve) marked as
    such, so one column never mixes units silently."""
    from primuspp.viz.style import memory_scale

    unit = r.get("memory_unit", "microbatches")
    scale, label = memory_scale(r["peak_memory"], unit)
    shown = _num(r["peak_memory"] / scale) if bare else f"{r['peak_memory'] / scale:.3g} {label}"
    return shown if r.get("has_memory_curve", True) else f"{shown} reserved"


def results_table(rows: list[dict[str, Any]], title: str, show_fits: bool = False) -> Table:
    """One row per result; the fastest (that fits) in bold green, `vs best` against it (against the fastest
    when none fits). The algorithm column appears only when some run's name does not already say its
    algorithm."""
    fitting = [r["step_time"] for r in rows if r.get("fits", True)]
    best = min(fitting or [r["step_time"] for r in rows], default=None)
    show_algo = any(not str(r["name"]).startswith(str(r["algorithm"])) for r in rows)
    bare = all(r.get("memory_unit", "microbatches") == "microbatches" for r in rows)
    table = Table(title=title, title_justify="left")
    table.add_column("name", no_wrap=True)
    if show_algo:
        table.add_column("algorithm", no_wrap=True)
    peak = "peak (microbatches)" if bare else "peak mem"
    for col in ("p", "v", "m", "step ms", "bubble", "steady", peak, "vs best"):
        table.add_column(col, justify="right", no_wrap=True)
    if show_fits:
        table.add_column("fits", justify="center", no_wrap=True)
    for r in rows:
        ratio = r["step_time"] / best if best else float("nan")
        style = "bold green" if fitting and r["step_time"] == best and r.get("fits", True) else None
        name = r["name"] if "statistic" not in r else f"{r['name']} [dim]({r['statistic']})[/dim]"
        cells = [name, *([r["algorithm"] or "-"] if show_algo else [])]
        cells += [
            str(r["pp"]),
            str(r["vpp"]),
            str(r["micro_batches"]),
            _num(r["step_time"]),
            f"{r['bubble_rate']:.2%}",
            f"{r['steady_bubble_rate']:.2%}",
            _memory(r, bare),
            f"{ratio:.3f}x",
        ]
        if show_fits:
            cells.append("yes" if r["fits"] else "[red]no[/red]")
        table.add_row(*cells, style=style)
    return table


def print_refused(refused: list[dict[str, str]], rows: Sequence[dict[str, Any]] = ()) -> None:
    """Under a sweep's table: each solver's lower bound and gap (zb-optimal), then one line per run its
    algorithm refused, with the reason."""
    from primuspp.commands.console import out

    for r in rows:
        if "lower_bound" in (report := r.get("params", {}).get("report") or {}):
            out.print(
                f"{r['name']}: lower bound {_num(report['lower_bound'])}, gap {report['gap']:.2%} "
                f"({report['status']})",
                highlight=False,
            )
    for r in refused:
        out.print(f"[dim]not run: {r['name']}: {r['reason']}[/dim]", highlight=False)


def fidelity_table(pair: dict[str, Any]) -> Table:
    """Predicted vs measured figures of one pair (sim.fidelity.predicted_vs_measured), with the errors."""
    real = pair["measured"]
    title = (
        f"Predicted ({pair['simulated']['name']}) vs {real['source']} ({real['path']}, median of "
        f"{real['iterations']} iteration{'s' if real['iterations'] != 1 else ''}): {pair['algorithm']} "
        f"p={pair['pp']} v={pair['vpp']} m={pair['micro_batches']}"
    )
    if not pair["same_schedule"]:
        title += " [yellow](different schedules)[/yellow]"
    table = Table(title=title, title_justify="left")
    for col in ("", "predicted", "measured", "error"):
        table.add_column(col, justify="right" if col else "left", no_wrap=True)
    for m in pair["metrics"]:
        p, v = m["predicted"], m["measured"]
        if m["metric"] == "bubble_rate":
            table.add_row("bubble", f"{p:.2%}", f"{v:.2%}", f"{(p - v) * 100:+.2f} pts")
            continue
        label = {"step_time": "step time ms", "peak_memory": f"peak memory ({m['unit']})"}[m["metric"]]
        table.add_row(label, _num(p), _num(v), _pct(m["error"]))
    for r in pair["per_rank_peak_memory"]:
        table.add_row(f"  rank {r['rank']} peak", _num(r["predicted"]), _num(r["measured"]), _pct(r["error"]))
    return table


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2%}"
