"""Self-contained HTML pages: plotly.js inlined, every figure's data embedded; they open offline."""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from primuspp.trace.timeline import Timeline
from primuspp.viz.compare_figure import compare_figure, compare_table_html
from primuspp.viz.sources import Source, shown_iterations
from primuspp.viz.style import IDLE_COLOR, KIND_COLORS, KIND_NAMES
from primuspp.viz.summary import summary_html
from primuspp.viz.timeline_figure import box_count, time_span, timeline_figure

#: iterations of one run embedded beyond the shown one only while the run stays under this many boxes
EMBED_BOXES = 300_000

_ERROR_HOOK = (
    "window.ppErrors=[];"
    'window.addEventListener("error",function(e){window.ppErrors.push(String(e.message||e));});'
    'window.addEventListener("unhandledrejection",function(e){'
    'window.ppErrors.push("unhandled rejection: "+String(e.reason));});'
)


def timeline_page(sources: list[Source], iteration: str | None = None, title: str = "primuspp viz") -> str:
    """One section per source, all on one time axis; runs with several iterations get a selector that
    starts at `iteration` (default: a typical one, `trace.metrics.typical`)."""
    picks = shown_iterations(sources, iteration)
    shown_end = max(time_span(s.timelines[i])[1] for s, i in zip(sources, picks, strict=True))
    x_range = (0.0, shown_end * 1.005 if shown_end > 0 else 1.0)
    sections, payload = [], []
    for n, (source, pick) in enumerate(zip(sources, picks, strict=True)):
        embedded = _embedded(source, pick)
        figures, summaries = {}, {}
        for tl in embedded:
            end = time_span(tl)[1]
            figures[tl.iteration] = timeline_figure(tl, (0.0, max(x_range[1], end * 1.005)))
            summaries[tl.iteration] = summary_html(tl)
        payload.append(
            {
                "label": source.label,
                "selected": source.timelines[pick].iteration,
                "figures": figures,
                "summaries": summaries,
            }
        )
        sections.append(_section_html(n, source, source.timelines[pick], embedded))
    data = {"sections": payload, "xRange": list(x_range)}
    return page(title, "".join(sections), data, _asset("page.js"), intro=_legend_html())


def compare_page(
    rows: list[dict[str, Any]], best: str | None, reason: str, mem_limit: float | None = None
) -> str:
    """Bar charts of step time, bubble and peak memory per run (`compare --html`), above the table."""
    body = (
        f"<section>{compare_table_html(rows, best, reason)}"
        '<div class="plot" id="plot-compare"></div></section>\n'
    )
    data = {"figure": compare_figure(rows, best, mem_limit)}
    return page("primuspp compare", body, data, _asset("compare.js"))


def page(title: str, body: str, data: dict[str, Any], script: str, intro: str = "") -> str:
    """The page skeleton: error hook, plotly.js, CSS, a header (title, `intro`), `body`, then `data` as the
    global PP and `script`."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_asset('page.css')}</style>"
        f"<script>{_ERROR_HOOK}</script>"
        f"<script>{_plotly_js()}</script></head>\n<body>\n"
        f"<header><h1>{escape(title)}</h1>{intro}</header>\n{body}\n"
        '<pre id="pp-status"></pre>\n'
        f"<script>var PP={payload};</script>\n<script>{script}</script>\n</body></html>\n"
    )


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs  # imported only when a page is drawn (start-up time)

    return get_plotlyjs()


def _embedded(source: Source, pick: int) -> list[Timeline]:
    """All iterations when they stay small enough, else only the one shown."""
    if sum(box_count(tl) for tl in source.timelines) <= EMBED_BOXES:
        return list(source.timelines)
    return [source.timelines[pick]]


def _section_html(n: int, source: Source, tl: Timeline, embedded: list[Timeline]) -> str:
    facts = [
        tl.algorithm or "unknown schedule",
        f"p={tl.pp} v={tl.vpp} m={tl.micro_batches}",
        tl.source,
        source.path,
    ]
    if len(source.timelines) > 1:
        facts.append(f"{len(source.timelines)} iterations")
    pick = ""
    if len(embedded) > 1:
        options = "".join(
            f'<option value="{escape(t.iteration)}">{escape(t.iteration)}</option>' for t in embedded
        )
        pick = f'<label class="pick">iteration <select id="pick-{n}">{options}</select></label>'
    notes = [source.note] if source.note else []
    if len(embedded) < len(source.timelines):
        notes.append(
            f"showing iteration {escape(tl.iteration)} only (the run is too large to embed every iteration; "
            "pick another with --iteration)"
        )
    note_html = "".join(f'<p class="note">{escape(x)}</p>' for x in notes)
    return (
        f'<section id="section-{n}">{pick}<h2>{escape(source.label)}</h2>'
        f'<p class="meta">{escape(" · ".join(facts))}</p>{note_html}'
        f'<div class="summary" id="summary-{n}"></div><div class="plot" id="plot-{n}"></div></section>\n'
    )


def _legend_html() -> str:
    kinds = "".join(
        f'<span class="swatch" style="background:{KIND_COLORS[k]}"></span>{k} {KIND_NAMES[k]}'
        for k in KIND_COLORS
    )
    return (
        f'<p>{kinds}<span class="swatch" style="background:{IDLE_COLOR}"></span>idle</p>'
        "<p>Lighter shades are later chunks; numbers on the boxes are microbatches (zoom in to see them on "
        "crowded rows). Drag to zoom: every section follows; double-click to reset.</p>"
    )


def _asset(name: str) -> str:
    return resources.files("primuspp.viz").joinpath(name).read_text(encoding="utf-8")
