"""The JSON text of a simulated rank's pp_data record, written from the simulator's columns.

`pp_data.rank_record` is the readable definition: one dict of lists built from `Interval` objects, then
`json.dumps`. A simulated timeline holds its intervals and memory curve as numpy columns
(`trace.columns`); at p=64, m=512 building the Interval objects and the lists from them cost more than the
simulation. `file_texts` writes the same bytes straight from the columns, with what `json.dumps` writes
for a finite number (`float.__repr__`, `int.__repr__`, separators ", "):
- a timeline's times repeat across ranks and columns (a few thousand distinct values in half a million):
  a `Vocab` holds each distinct value's repr once and a column is its gathered texts, joined;
- otherwise a column is `repr` of its `tolist()` (the same text for a list of finite numbers), a column of
  integral floats written as its integers with ".0" appended (`repr(float(n))` is `str(n) + ".0"` for
  every integer |n| < 2**53).
Anything else (a timeline from a measured run, a non-finite value) is None here and goes through
`rank_record`. tests/trace/test_pp_data_fast.py compares both writers over the registry.
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


class Vocab:
    """The repr of each distinct value of some columns of one dtype, written once; `text(col)` is the JSON
    list of a column whose values are all among them (None otherwise: the caller writes it another way)."""

    __slots__ = ("dtype", "texts", "values")

    def __init__(self, values: Any, texts: Any) -> None:
        self.values, self.texts, self.dtype = values, texts, values.dtype

    @classmethod
    def of(cls, cols: list[Any]) -> Vocab | None:
        """The vocabulary of `cols` (one dtype, finite, no -0.0), None when it would not pay (most values
        distinct) or could not be exact."""
        cols = [c for c in cols if len(c)]
        if not cols or len({c.dtype for c in cols}) != 1 or cols[0].dtype.kind not in "iuf":
            return None
        every = np.concatenate(cols)
        if every.dtype.kind == "f" and (not np.isfinite(every).all() or np.signbit(every[every == 0]).any()):
            return None
        values = distinct(every)
        if len(values) * _FEW_RATIO > len(every):
            return None
        return cls(values, np.array([repr(v) for v in values.tolist()], dtype=object))

    def text(self, col: Any) -> str | None:
        if col.dtype != self.dtype:
            return None
        if not len(col):
            return "[]"
        at = np.minimum(np.searchsorted(self.values, col), len(self.values) - 1)
        if not (self.values[at] == col).all():
            return None
        return "[" + ", ".join(self.texts[at].tolist()) + "]"


def file_texts(timelines: list[Timeline]) -> list[str | None] | None:
    """Per rank, `json.dumps({tl.iteration: rank_record(tl.ranks[r]) for tl in timelines})`, or None for a
    rank not held as columns; None for all when the iterations are not distinct strings."""
    iterations = [tl.iteration for tl in timelines]
    if not all(isinstance(it, str) for it in iterations) or len(set(iterations)) != len(iterations):
        return None
    vocabs = _vocabs(timelines)
    out: list[str | None] = []
    for r in range(timelines[0].pp):
        texts = [rank_text(tl.ranks[r], vocabs) for tl in timelines]
        if any(text is None for text in texts):
            out.append(None)
            continue
        pairs = zip(iterations, texts, strict=True)
        out.append("{" + ", ".join(f"{json.dumps(it)}: {text}" for it, text in pairs) + "}")
    return out


def file_text(timelines: list[Timeline], rank: int) -> str | None:
    """One rank's file text (`file_texts`)."""
    texts = file_texts(timelines)
    return None if texts is None else texts[rank]


def _vocabs(timelines: list[Timeline]) -> dict[str, Vocab | None]:
    """One vocabulary for the float columns (times, levels) and one for the integer ones (microbatch,
    chunk, stage) of every rank held as columns."""
    floats: list[Any] = []
    ints: list[Any] = []
    for tl in timelines:
        for rt in tl.ranks:
            ivs, curve = rt.intervals, rt.memory
            if isinstance(ivs, IntervalColumns):
                floats += [ivs.start, ivs.end]
                ints += [ivs.mb, ivs.chunk, ivs.stage]
            if isinstance(curve, CurveColumns):
                floats += [curve.level, curve.time]
    return {"f": Vocab.of(floats), "i": Vocab.of(ints)}


def rank_text(rt: RankTimeline, vocabs: dict[str, Vocab | None] | None = None) -> str | None:
    """`json.dumps(pp_data.rank_record(rt))`, or None when `rt` is not held as columns. `vocabs` (from
    `_vocabs`): the timeline's shared vocabularies, if any."""
    ivs, curve = rt.intervals, rt.memory
    if not isinstance(ivs, IntervalColumns):
        return None

    def numbers(col: Any) -> str | None:  # through the shared vocabulary when it holds the column
        vocab = (vocabs or {}).get("f" if col.dtype.kind == "f" else "i")
        text = vocab.text(col) if vocab is not None else None
        return text if text is not None else json_numbers(col)

    if isinstance(curve, CurveColumns):
        levels, times = numbers(curve.level), numbers(curve.time)
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
            (f"{prefix}_start", numbers(ivs.start[sel])),
            (f"{prefix}_end", numbers(ivs.end[sel])),
        ]
    for prefix in ("fwd", "bwd", "wgrad"):
        sel = rows[prefix]
        parts += [
            (f"{prefix}_minibatch", numbers(ivs.mb[sel])),
            (f"{prefix}_chunk", numbers(ivs.chunk[sel])),
        ]
    parts.append(("activation_memory_usage", levels))
    names = ivs.kinds
    parts.append(("bwd_kind", json.dumps([names[k] for k in ivs.kind[rows["bwd"]].tolist()])))
    for prefix in ("fwd", "bwd", "wgrad"):
        parts.append((f"{prefix}_stage", numbers(ivs.stage[rows[prefix]])))
    parts.append(("activation_memory_time", times))
    fb = rows["fb"]
    if len(fb):
        parts += [
            ("fb_start", numbers(ivs.start[fb])),
            ("fb_end", numbers(ivs.end[fb])),
            ("fb_minibatch", numbers(ivs.mb[fb])),
            ("fb_chunk", numbers(ivs.chunk[fb])),
            ("fb_stage", numbers(ivs.stage[fb])),
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
