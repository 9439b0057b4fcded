"""The plotly figure of one timeline, as a JSON-ready dict: one row of boxes per rank (rank 0 on top) over
grey bands that make idle time visible, and the per-rank activation-memory curves under it.

Up to `BAR_LIMIT` boxes are SVG bars with microbatch numbers and exact hover. Beyond it (a 64x512 zbv run
has ~200k boxes, which SVG draws in tens of seconds) each box is a thick WebGL line segment, with an
invisible marker at its centre that carries the hover; numbers are left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from primuspp.trace.metrics import has_memory_curve
from primuspp.trace.timeline import Interval, Timeline
from primuspp.viz.arrays import typed, typed_rows
from primuspp.viz.style import (
    IDLE_COLOR,
    KIND_ORDER,
    kind_color,
    memory_scale,
    ms,
    rank_color,
    text_color,
)

BAR_LIMIT = 6000
MEMORY_PX = 180
_TOP, _GAP, _BOTTOM = 40, 55, 45


def box_count(timeline: Timeline) -> int:
    return sum(len(rt.intervals) for rt in timeline.ranks)


def time_span(timeline: Timeline) -> tuple[float, float]:
    """First start and last end over all ranks (0, 0 when nothing ran)."""
    intervals = [iv for rt in timeline.ranks for iv in rt.intervals]
    if not intervals:
        return (0.0, 0.0)
    return (min(iv.start for iv in intervals), max(iv.end for iv in intervals))


def timeline_figure(
    timeline: Timeline, x_range: tuple[float, float] | None = None, bar_limit: int = BAR_LIMIT
) -> dict[str, Any]:
    pp = len(timeline.ranks)
    gl = box_count(timeline) > bar_limit
    first, last = time_span(timeline)
    has_memory = has_memory_curve(timeline)
    row_px = max(12, min(30, 480 // max(pp, 1)))
    timeline_px = max(pp * row_px, 120)
    row_px = timeline_px / max(pp, 1)
    data: list[dict[str, Any]] = []
    for (kind, chunk), items in _groups(timeline):
        name = kind if timeline.vpp <= 1 or chunk < 0 else f"{kind} · chunk {chunk}"
        color = kind_color(kind, chunk, timeline.vpp)
        if gl:
            data.extend(_gl_boxes(kind, name, color, items, row_px, "u1" if pp < 256 else "i2"))
        else:
            data.append(_bar_boxes(name, color, items))
    if has_memory:
        data.extend(_memory_traces(timeline, last, gl))
    memory_px = MEMORY_PX if has_memory else 0
    height = _TOP + timeline_px + (_GAP + memory_px if has_memory else 0) + _BOTTOM
    plot_px = height - _TOP - _BOTTOM
    x_range = x_range or (min(first, 0.0), last * 1.005 if last > 0 else 1.0)
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 64, "r": 24, "t": _TOP, "b": _BOTTOM},
        "barmode": "overlay",
        "hovermode": "closest",
        "plot_bgcolor": "#ffffff",
        "uniformtext": {"minsize": 9, "mode": "hide"},
        "legend": {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom", "font": {"size": 11}},
        "xaxis": {
            "range": list(x_range),
            "anchor": "y",
            "showgrid": True,
            "gridcolor": "#f0f0f0",
            "zeroline": False,
            "title": {"text": "" if has_memory else "time (ms)"},
        },
        "yaxis": {
            "domain": [1 - timeline_px / plot_px, 1],
            "range": [pp - 0.5, -0.5],
            "type": "linear",
            "tickvals": list(range(pp)),
            "ticktext": [str(rt.rank) for rt in timeline.ranks],
            "title": {"text": "rank"},
            "fixedrange": True,  # WebGL box heights are in pixels
            "showgrid": False,
            "zeroline": False,
        },
        "shapes": [
            {
                "type": "rect",
                "xref": "x",
                "yref": "y",
                "x0": first,
                "x1": last,
                "y0": r - 0.42,
                "y1": r + 0.42,
                "fillcolor": IDLE_COLOR,
                "line": {"width": 0},
                "layer": "below",
            }
            for r in range(pp)
        ],
        "meta": {"pp": pp, "boxes": box_count(timeline), "mode": "gl" if gl else "bars"},
    }
    if has_memory:
        layout["xaxis2"] = {
            "matches": "x",
            "anchor": "y2",
            "showgrid": True,
            "gridcolor": "#f0f0f0",
            "zeroline": False,
            "title": {"text": "time (ms)"},
        }
        key = (
            f"activation memory per rank: rank 0 <span style='color:{rank_color(0, pp)}'>━━</span> … "
            f"rank {pp - 1} <span style='color:{rank_color(pp - 1, pp)}'>━━</span>"
        )
        layout["annotations"] = [
            {
                "text": key,
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": memory_px / plot_px,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 11, "color": "#555"},
            }
        ]
        layout["yaxis2"] = {
            "domain": [0, memory_px / plot_px],
            "rangemode": "tozero",
            "title": {"text": f"activation<br>({_memory_unit(timeline)[1]})", "font": {"size": 11}},
            "gridcolor": "#f0f0f0",
        }
    return {"data": data, "layout": layout}


def describe(iv: Interval) -> str:
    """`F mb 3, stage 5 (chunk 1)`; FB names both parts; unknown microbatches say so."""
    if iv.microbatch < 0:
        return f"{iv.kind} (microbatch unknown)"
    if iv.kind == "FB" and iv.backward:
        bkind, bmb, bstage, _ = iv.backward
        return f"FB: F mb {iv.microbatch}, stage {iv.stage} + {bkind} mb {bmb}, stage {bstage}"
    where = f", stage {iv.stage}" if iv.stage >= 0 else ""
    chunk = f" (chunk {iv.chunk})" if iv.chunk > 0 else ""
    return f"{iv.kind} mb {iv.microbatch}{where}{chunk}"


def _groups(timeline: Timeline) -> list[tuple[tuple[str, int], list[tuple[int, Interval]]]]:
    groups: dict[tuple[str, int], list[tuple[int, Interval]]] = defaultdict(list)
    for rt in timeline.ranks:
        for iv in rt.intervals:
            groups[(iv.kind, iv.chunk)].append((rt.rank, iv))
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(groups.items(), key=lambda kv: (rank.get(kv[0][0], 99), kv[0][1]))


def _label(iv: Interval) -> str:
    if iv.microbatch < 0:
        return ""
    if iv.kind == "FB" and iv.backward:
        return f"{iv.microbatch}/{iv.backward[1]}"
    return str(iv.microbatch)


def _hover(rank: int, iv: Interval) -> str:
    span = f"{ms(iv.start)} → {ms(iv.end)} ms ({ms(iv.end - iv.start)} ms)"
    return f"<b>{describe(iv)}</b><br>rank {rank} · {span}"


def _bar_boxes(name: str, color: str, items: list[tuple[int, Interval]]) -> dict[str, Any]:
    return {
        "type": "bar",
        "orientation": "h",
        "name": name,
        "legendgroup": name,
        "y": typed((r for r, _ in items), "i2"),
        "base": typed((iv.start for _, iv in items), "f8"),
        "x": typed((iv.end - iv.start for _, iv in items), "f8"),
        "width": 0.8,
        "marker": {"color": color, "line": {"color": "#ffffff", "width": 0.6}},
        "text": [_label(iv) for _, iv in items],
        "textposition": "inside",
        "insidetextanchor": "middle",
        "textangle": 0,
        "textfont": {"color": text_color(color), "size": 10},
        "hovertext": [_hover(r, iv) for r, iv in items],
        "hoverinfo": "text",
        "meta": {"role": "boxes"},
    }


def _gl_boxes(
    kind: str, name: str, color: str, items: list[tuple[int, Interval]], row_px: float, rank_dtype: str
) -> list[dict[str, Any]]:
    xs: list[float] = []
    ys: list[int] = []
    for r, iv in items:
        pad = (iv.end - iv.start) * 0.03  # a hair of space between touching boxes
        xs += (iv.start + pad, iv.end - pad, math.nan)
        ys += (r, r, r)
    fb = kind == "FB"
    rows = (
        (iv.microbatch, iv.stage, iv.start, iv.end, *((iv.backward or ("", -1, -1, -1))[1:3] if fb else ()))
        for _, iv in items
    )
    what = (
        "FB: F mb %{customdata[0]}, stage %{customdata[1]} + B mb %{customdata[4]}, stage %{customdata[5]}"
        if fb
        else kind + " mb %{customdata[0]}, stage %{customdata[1]}"
    )
    return [
        {
            "type": "scattergl",
            "mode": "lines",
            "name": name,
            "legendgroup": name,
            "x": typed(xs, "f4"),
            "y": typed(ys, rank_dtype),
            "line": {"color": color, "width": max(2.0, row_px * 0.8)},
            "connectgaps": False,
            "hoverinfo": "skip",
        },
        {
            "type": "scattergl",
            "mode": "markers",
            "name": name,
            "legendgroup": name,
            "showlegend": False,
            "x": typed(((iv.start + iv.end) / 2 for _, iv in items), "f4"),
            "y": typed((r for r, _ in items), rank_dtype),
            "marker": {"color": color, "size": max(4.0, row_px * 0.8), "opacity": 0},
            "customdata": typed_rows(rows, "f4", 6 if fb else 4),
            "hovertemplate": f"<b>{what}</b><br>rank %{{y}} · %{{customdata[2]:,.3f}} → "
            "%{customdata[3]:,.3f} ms<extra></extra>",
            "meta": {"role": "boxes"},
        },
    ]


def _memory_unit(timeline: Timeline) -> tuple[float, str]:
    """One unit for a section's curves: bytes shown as KiB/MiB/GiB by the highest level."""
    peak = max((level for rt in timeline.ranks for _, level in rt.memory), default=0.0)
    return memory_scale(peak, timeline.memory_unit)


def _memory_traces(timeline: Timeline, last: float, gl: bool) -> list[dict[str, Any]]:
    pp = len(timeline.ranks)
    scale, unit = _memory_unit(timeline)
    traces = []
    for rt in timeline.ranks:
        if len(rt.memory) <= 1:
            continue
        points: dict[float, float] = {}
        for t, level in rt.memory:
            points[t] = level / scale  # the level after every change at t
        if last > max(points):
            points[last] = rt.memory[-1][1] / scale
        dtype = "f4" if gl else "f8"
        traces.append(
            {
                "type": "scattergl" if gl else "scatter",
                "mode": "lines",
                "name": f"rank {rt.rank}",
                "legendgroup": "memory",
                "showlegend": False,
                "xaxis": "x2",
                "yaxis": "y2",
                "x": typed(points.keys(), dtype),
                "y": typed(points.values(), dtype),
                "line": {"shape": "hv", "width": 1.3, "color": rank_color(rt.rank, pp)},
                "hovertemplate": f"rank {rt.rank}<br>%{{x:,.3f}} ms: %{{y:.4g}} {unit}<extra></extra>",
            }
        )
    return traces
