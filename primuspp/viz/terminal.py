"""A timeline in the terminal: one row per rank, time binned into the columns there are.

Each cell shows what ran longest in its time slice, on the kind's colour (later chunks lighter, odd
microbatches a shade darker so neighbouring boxes stay apart). A box wide enough carries its microbatch
number; narrower ones show the kind's letter (lower case for chunks after the first), so the picture still
reads without colour. Idle time is a dim dot. The right column is each rank's idle share of the step.
"""

from __future__ import annotations

import math

from rich.console import Group
from rich.text import Text

from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.timeline import Interval, Timeline
from primuspp.viz.style import KIND_COLORS, KIND_NAMES, kind_color, mix, ms, text_color
from primuspp.viz.timeline_figure import time_span

_LETTER = {"F": "F", "B": "B", "W": "W", "BW": "B", "FB": "X"}
_IDLE = ("·", "grey42")
MIN_COLUMNS = 10


def render_timeline(timeline: Timeline, width: int) -> Group:
    """The timeline drawn in `width` columns (title, time axis, one row per rank, legend)."""
    metrics = timeline_metrics(timeline)
    first, last = time_span(timeline)
    label_w = len(str(max(len(timeline.ranks) - 1, 0)))
    cols = max(width - label_w - 1 - 7, MIN_COLUMNS)
    span = (last - first) or 1.0
    algorithm = timeline.algorithm or "unknown schedule"
    what = f"p={timeline.pp} v={timeline.vpp} m={timeline.micro_batches}"
    if algorithm != timeline.name:
        what = f"{algorithm}, {what}"
    title = Text.assemble(
        (timeline.name, "bold"),
        f"  {what}: step time {ms(metrics.step_time)} ms, bubble {metrics.bubble_rate:.2%}",
    )
    lines = [title, Text(" " * (label_w + 1) + _axis(first, last, cols), style="grey50")]
    rows = [_runs(_owners(rt.intervals, first, span, cols)) for rt in timeline.ranks]
    widths = sorted(n for runs in rows for iv, n in runs if iv is not None)
    numbers = bool(widths) and widths[len(widths) // 2] >= 3  # most boxes wide enough to be labelled
    for rt, rm, runs in zip(timeline.ranks, metrics.per_rank, rows, strict=True):
        row = Text(f"{rt.rank:>{label_w}} ")
        for iv, n in runs:
            if iv is None:
                row.append(_IDLE[0] * n, style=_IDLE[1])
            else:
                row.append(_box(iv, n, numbers), style=_style(iv, timeline.vpp))
        idle = 1 - rm.busy / metrics.step_time if metrics.step_time else 0.0
        row.append(f" {idle:>6.1%}", style="grey50")
        lines.append(row)
    kinds = {iv.kind for rt in timeline.ranks for iv in rt.intervals}
    chunked = any(iv.chunk > 0 for rt in timeline.ranks for iv in rt.intervals)
    lines.append(_legend(kinds, chunked, label_w + 1))
    return Group(*lines)


def _owners(intervals: list[Interval], first: float, span: float, cols: int) -> list[Interval | None]:
    """Per column, the interval covering most of its time slice (None: idle)."""
    scale = cols / span
    best = [0.0] * cols
    owner: list[Interval | None] = [None] * cols
    for iv in intervals:
        lo, hi = (iv.start - first) * scale, (iv.end - first) * scale
        for c in range(max(int(lo), 0), min(math.ceil(hi), cols)):
            cover = min(hi, c + 1) - max(lo, c)
            if cover > best[c]:
                best[c], owner[c] = cover, iv
    return owner


def _runs(owner: list[Interval | None]) -> list[tuple[Interval | None, int]]:
    """Consecutive columns of one interval (or of idle time) as (interval, width)."""
    runs: list[tuple[Interval | None, int]] = []
    for iv in owner:
        if runs and runs[-1][0] is iv:
            runs[-1] = (iv, runs[-1][1] + 1)
        else:
            runs.append((iv, 1))
    return runs


def _box(iv: Interval, width: int, numbers: bool) -> str:
    """`F12` or `12` centred when it fits and boxes are labelled at this scale, else the kind's letter."""
    letter = _LETTER.get(iv.kind, "?")
    letter = letter if iv.chunk <= 0 else letter.lower()
    if numbers and iv.microbatch >= 0:
        for label in (f"{letter}{iv.microbatch}", str(iv.microbatch)):
            if width >= len(label) + 1:
                return label.center(width)
    return letter * width


def _style(iv: Interval, vpp: int) -> str:
    bg = kind_color(iv.kind, iv.chunk, vpp)
    if iv.microbatch % 2:
        bg = mix(bg, "#000000", 0.18)
    return f"{text_color(bg)} on {bg}"


def _axis(first: float, last: float, cols: int) -> str:
    """Tick labels (ms) at the start, quarters and end of the columns."""
    axis = [" "] * cols
    for q in range(5):
        label = f"{first + (last - first) * q / 4:,.6g}"
        at = min(max(round((cols - 1) * q / 4) - len(label) // 2, 0), cols - len(label))
        if at >= 0 and all(ch == " " for ch in axis[max(at - 1, 0) : at + len(label)]):
            axis[at : at + len(label)] = label
    return "".join(axis) + f"{'idle':>7}"


def _legend(kinds: set[str], chunked: bool, indent: int) -> Text:
    legend = Text(" " * indent)
    for kind in KIND_COLORS:
        if kind in kinds:
            swatch = f"{text_color(KIND_COLORS[kind])} on {KIND_COLORS[kind]}"
            legend.append(f" {_LETTER[kind]} ", style=swatch)
            legend.append(f" {kind} {KIND_NAMES[kind]}  ")
    legend.append(f"{_IDLE[0]} idle", style=_IDLE[1])
    if chunked:
        legend.append("   later chunks: lighter, lower-case", style="grey50")
    return legend
