"""`plan --html`: memory against throughput for every projected configuration (the Pareto front of those
that fit marked), above the winner's simulated timeline (the viewer's own page)."""

from __future__ import annotations

import json
from dataclasses import replace
from html import escape

from primuspp.models.hardware import GIB, Hardware, gib
from primuspp.models.plan import Candidate, PlanResult
from primuspp.models.project import Projection
from primuspp.viz.html import timeline_page
from primuspp.viz.sources import Source


def label(p: Projection) -> str:
    return str(Candidate(p.label, p.par, p.par.gpus))


def pareto(points: list[Projection]) -> list[Projection]:
    """Those no other point beats on both peak memory (lower) and tokens/s per GPU (higher)."""
    front, best = [], -1.0
    for p in sorted(points, key=lambda p: (p.peak_memory_bytes, -p.tokens_per_s_per_gpu)):
        if p.tokens_per_s_per_gpu > best:
            front.append(p)
            best = p.tokens_per_s_per_gpu
    return front


def _trace(points: list[Projection], name: str, color: str, mode: str = "markers") -> dict:
    return {
        "type": "scatter",
        "mode": mode,
        "name": name,
        "x": [p.peak_memory_bytes / GIB for p in points],
        "y": [p.tokens_per_s_per_gpu for p in points],
        "text": [label(p) for p in points],
        "hovertemplate": "%{text}<br>%{x:.1f} GiB, %{y:.0f} tokens/s/GPU<extra></extra>",
        "marker": {"color": color, "size": 7},
        "line": {"color": color},
    }


def plan_page(title: str, hw: Hardware, result: PlanResult, winner: Projection | None) -> str:
    """The page: the scatter (fits, does not fit, the front of those that fit, HBM), then the winner."""
    fits, no_fit = result.fits, result.no_fit
    figure = {
        "data": [
            _trace(no_fit, "does not fit", "#bbbbbb"),
            _trace(fits, "fits", "#1f77b4"),
            _trace(pareto(fits), "Pareto front (fits)", "#d62728", "lines+markers"),
        ],
        "layout": {
            "title": {"text": "peak memory per GPU vs throughput"},
            "xaxis": {"title": {"text": "peak memory of the most loaded rank (GiB)"}},
            "yaxis": {"title": {"text": "tokens/s per GPU"}},
            "shapes": [
                {
                    "type": "line",
                    "x0": hw.hbm_bytes / GIB,
                    "x1": hw.hbm_bytes / GIB,
                    "y0": 0,
                    "y1": 1,
                    "yref": "paper",
                    "line": {"dash": "dot", "color": "#555555"},
                }
            ],
            "height": 480,
        },
    }
    payload = json.dumps(figure, allow_nan=False).replace("</", "<\\/")
    section = (
        f"<section><h2>{escape(title)}</h2>"
        f"<p>{result.evaluated} configurations evaluated, {len(fits)} fit; dotted line: {escape(hw.name)}'s "
        f"HBM ({gib(hw.hbm_bytes)} GiB). Below: the winner's simulated timeline.</p>"
        '<div class="plot" id="plot-pareto"></div>'
        f'<script>(function(){{var f={payload};Plotly.newPlot("plot-pareto",f.data,f.layout);}})();</script>'
        "</section>\n"
    )
    if winner is None or winner.result is None:
        sources: list[Source] = []
    else:
        timeline = replace(winner.result.timeline, memory_unit="bytes")  # the projection's memory is bytes
        sources = [Source(f"#1 {label(winner)}", "", (timeline,))]
    if not sources:
        from primuspp.viz.html import page

        return page("primuspp plan", section, {}, "")
    html = timeline_page(sources, title="primuspp plan")
    return html.replace("</header>\n", "</header>\n" + section, 1)
