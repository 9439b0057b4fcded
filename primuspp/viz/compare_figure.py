"""`compare --html`: step time, bubble and peak memory per run as bar charts, side by side."""

from __future__ import annotations

from html import escape
from typing import Any

from primuspp.viz.style import ms

BEST, OTHER, UNFIT = "#59a14f", "#4e79a7", "#bab0ac"
_PANELS = (
    ("step_time", "step time (ms)", "x"),
    ("bubble_rate", "bubble (step / steady)", "x2"),
    ("peak_memory", "peak activation memory", "x3"),
)


def compare_figure(rows: list[dict[str, Any]], best: str | None, mem_limit: float | None = None) -> dict:
    """`rows`: result summaries in ranking order (fastest first, each with "fits"); `best`: the
    recommended run's name."""
    names = [r["name"] for r in rows]
    colors = [BEST if r["name"] == best else OTHER if r.get("fits", True) else UNFIT for r in rows]
    data = []
    for key, title, axis in _PANELS:
        values = [r[key] * (100 if key == "bubble_rate" else 1) for r in rows]
        text = [
            f"{v:.2f}%" if key == "bubble_rate" else ms(v) if key == "step_time" else f"{v:.4g}"
            for v in values
        ]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": title,
                "y": names,
                "x": values,
                "xaxis": axis,
                "yaxis": "y",
                "marker": {"color": colors},
                "text": text,
                "textposition": "auto",
                "hovertemplate": f"%{{y}}<br>{title}: %{{text}}<extra></extra>",
                "showlegend": False,
            }
        )
    data.append(  # the steady bubble, as a marker on the bubble bars
        {
            "type": "scatter",
            "mode": "markers",
            "name": "steady bubble",
            "y": names,
            "x": [r["steady_bubble_rate"] * 100 for r in rows],
            "xaxis": "x2",
            "yaxis": "y",
            "marker": {"symbol": "line-ns-open", "size": 16, "color": "#222", "line": {"width": 2}},
            "hovertemplate": "%{y}<br>steady bubble: %{x:.2f}%<extra></extra>",
            "showlegend": False,
        }
    )
    gap = 0.06
    width = (1 - 2 * gap) / 3
    layout: dict[str, Any] = {
        "height": 110 + 30 * len(rows),
        "margin": {"l": 10, "r": 20, "t": 50, "b": 40},
        "plot_bgcolor": "#ffffff",
        "bargap": 0.25,
        "yaxis": {"autorange": "reversed", "automargin": True, "type": "category"},
        "annotations": [],
        "meta": {"bars": len(rows) * len(_PANELS)},
    }
    for i, (_, title, axis) in enumerate(_PANELS):
        key = "xaxis" if axis == "x" else f"xaxis{axis[1:]}"
        layout[key] = {
            "domain": [i * (width + gap), i * (width + gap) + width],
            "anchor": "y",
            "rangemode": "tozero",
            "gridcolor": "#eeeeee",
            "ticksuffix": "%" if axis == "x2" else "",
        }
        layout["annotations"].append(
            {
                "text": f"<b>{title}</b>",
                "xref": f"{axis} domain",
                "yref": "paper",
                "x": 0,
                "y": 1,
                "yanchor": "bottom",
                "xanchor": "left",
                "showarrow": False,
            }
        )
    if mem_limit is not None:
        layout["shapes"] = [
            {
                "type": "line",
                "xref": "x3",
                "yref": "paper",
                "x0": mem_limit,
                "x1": mem_limit,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#e15759", "dash": "dash", "width": 2},
            }
        ]
    return {"data": data, "layout": layout}


def compare_table_html(rows: list[dict[str, Any]], best: str | None, reason: str) -> str:
    columns = ("name", "algorithm", "p", "v", "m", "step time (ms)", "bubble", "steady bubble", "peak mem")
    head = "".join(f"<th>{c}</th>" for c in columns)
    body = []
    for r in rows:
        css = "best" if r["name"] == best else "" if r.get("fits", True) else "unfit"
        cells = (
            escape(r["name"]),
            escape(str(r["algorithm"])),
            r["pp"],
            r["vpp"],
            r["micro_batches"],
            ms(r["step_time"]),
            f"{r['bubble_rate']:.2%}",
            f"{r['steady_bubble_rate']:.2%}",
            f"{r['peak_memory']:.4g}",
        )
        body.append(f'<tr class="{css}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = f'<table class="compare"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f'<p class="meta"><b>recommendation:</b> {escape(reason)}</p><div class="scroll">{table}</div>'
