"""The summary above each timeline: step time, bubble rates, peak memory, and a per-rank table."""

from __future__ import annotations

from html import escape

from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.timeline import Timeline
from primuspp.viz.style import memory_scale, ms

OPEN_RANKS_UP_TO = 16


def summary_html(timeline: Timeline) -> str:
    m = timeline_metrics(timeline)
    scale, unit = memory_scale(m.peak_memory, timeline.memory_unit)
    unit = escape(unit)
    items = [
        ("step time", f"{ms(m.step_time)} ms"),
        ("bubble", f"{m.bubble_rate:.2%}"),
        ("steady bubble", f"{m.steady_bubble_rate:.2%}"),
        ("peak memory", f"{m.peak_memory / scale:.4g} {unit}"),
    ]
    if m.p2p_transfers:
        items.append(("p2p transfers", f"{m.p2p_transfers:,}"))
    head = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in items)
    ranks = m.per_rank
    rows = [
        ("rank", [str(r.rank) for r in ranks]),
        ("busy (ms)", [ms(r.busy) for r in ranks]),
        ("idle", [f"{(1 - r.busy / m.step_time) if m.step_time else 0:.1%}" for r in ranks]),
        ("last end (ms)", [ms(r.total) for r in ranks]),
        (f"peak memory ({unit})", [f"{r.peak_memory / scale:.4g}" for r in ranks]),
    ]
    body = "".join(
        f"<tr><th>{name}</th>{''.join(f'<td>{c}</td>' for c in cells)}</tr>" for name, cells in rows
    )
    table = f'<div class="scroll"><table class="ranks">{body}</table></div>'
    if len(ranks) > OPEN_RANKS_UP_TO:
        table = f"<details><summary>per rank</summary>{table}</details>"
    return f'<dl class="metrics">{head}</dl>{table}'
