"""The JSON text of a simulated rank's pp_data record, written from the simulator's columns.

`pp_data.rank_record` is the readable definition: one dict of lists built from `Interval` objects, then
`json.dumps`. A simulated timeline holds its intervals and memory curve as numpy columns
(`trace.columns`); at p=64, m=512 building the Interval objects and the lists from them cost more than the
simulation. `rank_text` writes the same bytes straight from the columns: each list is `repr` of the
column's `tolist()` (for finite numbers the very text `json.dumps` writes: same separators, `float.__repr__`
and `int.__repr__`), and a column of integral floats is written as its integers with `.0` appended
(`repr(float(n))` is `str(n) + ".0"` for every integer |n| < 2**53). Anything else (a timeline from a
measured run, a non-finite value) is None here and goes through `rank_record`.
tests/trace/test_pp_data_fast.py compares both writers over the registry.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from primuspp.trace.columns import CurveColumns, IntervalColumns
from primuspp.trace.timeline import RankTimeline, Timeline

_GROUP = {"F": "fwd", "B": "bwd", "BW": "bwd", "W": "wgrad", "FB": "fb"}
_PREFIXES = ("fwd", "bwd", "wgrad", "fb")
_EXACT = 2.0**53
_FEW_MIN, _SAMPLE, _FEW_RATIO = 64, 256, 4  # `_few_values`: worth it when distinct values are under 1/4


def json_numbers(col: Any) -> str | None:
    """`json.dumps(col.tolist())` for a numeric column (None when the column is not one this can write).

    Three exact routes, cheapest first: a column of few distinct values writes each value's repr once and
    gathers them; a column of integral floats is its integers with ".0" appended; anything else finite is
    `repr` of the list."""
    kind = col.dtype.kind
    if kind not in "iuf":
        return None
    if len(col) == 0:
        return "[]"
    if kind == "f":
        if not np.isfinite(col).all():
            return None
        if np.signbit(col[col == 0]).any():  # -0.0: equal to 0.0 below, but it reads "-0.0"
            return repr(col.tolist())
    text = _few_values(col)
    if text is not None:
        return text
    if kind == "f" and (np.abs(col) < _EXACT).all():
        ints = col.astype(np.int64)
        if (ints == col).all():
            return repr(ints.tolist()).replace(", ", ".0, ")[:-1] + ".0]"
    return repr(col.tolist())


def _few_values(col: Any) -> str | None:
    """The list text of a column with few distinct values (no -0.0): each one's repr, once."""
    n = len(col)
    if n < _FEW_MIN or len(distinct(col[:: max(1, n // _SAMPLE)])) * _FEW_RATIO > min(n, _SAMPLE):
        return None  # short, or the sample says most values differ
    values = distinct(col)
    if len(values) * _FEW_RATIO > n:
        return None
    texts = np.array([repr(v) for v in values.tolist()], dtype=object)
    return "[" + ", ".join(texts[np.searchsorted(values, col)].tolist()) + "]"


def distinct(col: Any) -> Any:
    """The sorted distinct values of a finite column (np.unique without its import of numpy.ma)."""
    values = np.sort(col)
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


def file_text(timelines: list[Timeline], rank: int) -> str | None:
    """`json.dumps({tl.iteration: rank_record(tl.ranks[rank]) for tl in timelines})`, or None when a rank
    is not held as columns (or the iterations are not distinct strings)."""
    iterations = [tl.iteration for tl in timelines]
    if not all(isinstance(it, str) for it in iterations) or len(set(iterations)) != len(iterations):
        return None
    texts = [rank_text(tl.ranks[rank]) for tl in timelines]
    if any(text is None for text in texts):
        return None
    return (
        "{" + ", ".join(f"{json.dumps(it)}: {text}" for it, text in zip(iterations, texts, strict=True)) + "}"
    )


def rank_text(rt: RankTimeline) -> str | None:
    """`json.dumps(pp_data.rank_record(rt))`, or None when `rt` is not held as columns."""
    ivs, curve = rt.intervals, rt.memory
    if not isinstance(ivs, IntervalColumns):
        return None
    if isinstance(curve, CurveColumns):
        levels, times = json_numbers(curve.level), json_numbers(curve.time)
    else:  # a curve the simulator wrote as a list (a table with memory nodes: OFFLOAD, RELOAD)
        levels = json.dumps([level for _, level in curve[1:]])
        times = json.dumps([t for t, _ in curve[1:]])
    group_of = np.array(
        [_PREFIXES.index(_GROUP[k]) if k in _GROUP else -1 for k in ivs.kinds], dtype=np.int64
    )
    group = group_of[ivs.kind] if len(ivs.kind) else np.zeros(0, dtype=np.int64)
    if (group < 0).any():
        return None
    rows = {p: np.flatnonzero(group == g) for g, p in enumerate(_PREFIXES)}
    total = ivs.end.max().item() if len(ivs.end) else 0.0  # .item(): the Python number tolist() gives
    parts: list[tuple[str, str | None]] = [
        ("total", json.dumps(total)),
        ("memory", json.dumps(rt.peak_memory)),
    ]
    for prefix in ("fwd", "bwd", "wgrad"):
        sel = rows[prefix]
        parts += [
            (f"{prefix}_start", json_numbers(ivs.start[sel])),
            (f"{prefix}_end", json_numbers(ivs.end[sel])),
        ]
    for prefix in ("fwd", "bwd", "wgrad"):
        sel = rows[prefix]
        parts += [
            (f"{prefix}_minibatch", json_numbers(ivs.mb[sel])),
            (f"{prefix}_chunk", json_numbers(ivs.chunk[sel])),
        ]
    parts.append(("activation_memory_usage", levels))
    names = ivs.kinds
    parts.append(("bwd_kind", json.dumps([names[k] for k in ivs.kind[rows["bwd"]].tolist()])))
    for prefix in ("fwd", "bwd", "wgrad"):
        parts.append((f"{prefix}_stage", json_numbers(ivs.stage[rows[prefix]])))
    parts.append(("activation_memory_time", times))
    fb = rows["fb"]
    if len(fb):
        parts += [
            ("fb_start", json_numbers(ivs.start[fb])),
            ("fb_end", json_numbers(ivs.end[fb])),
            ("fb_minibatch", json_numbers(ivs.mb[fb])),
            ("fb_chunk", json_numbers(ivs.chunk[fb])),
            ("fb_stage", json_numbers(ivs.stage[fb])),
            ("fb_backward", json.dumps(_fb_backward(ivs, fb))),
        ]
    if any(text is None for _, text in parts):
        return None
    return "{" + ", ".join(f'"{key}": {text}' for key, text in parts) + "}"


def _fb_backward(ivs: IntervalColumns, fb: np.ndarray) -> list[list[Any]]:
    """Each FB interval's backward part as [kind, microbatch, stage, chunk], [] when it has none."""
    back: dict[int, list[Any]] = {}
    if ivs.backward is not None:
        where, kind, mb, stage, chunk = (col.tolist() for col in ivs.backward)
        for i, k, b_mb, b_s, b_c in zip(where, kind, mb, stage, chunk, strict=True):
            back[i] = [ivs.kinds[k], b_mb, b_s, b_c]
    return [back.get(i, []) for i in fb.tolist()]
