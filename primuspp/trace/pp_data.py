"""Primus' pp_data layout: `config.json` + `pp_rank_<r>.json` = {"<iteration>": {...}}, times in ms.

Written for simulated and real runs alike; read back from ours and from Primus' own files, including its
older format without minibatch/chunk/wgrad keys (those intervals get microbatch/chunk -1).

Reading checks before it builds anything: `config.json` against the pp_rank files present (`pp_size`, then
`micro_batches` x `vpp_size` against each rank's forwards), every file regular and bounded (primuspp.inputs),
and every interval sane: no negative start, no end before its start, no overlap on one rank. A measured
trace's small overlaps (timer jitter: at most CLIP_MS and CLIP_FRACTION of the shorter interval) are clipped
with one warning line on stderr naming them; anything else is one error naming the file, rank, iteration
and key.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from primuspp.errors import ConfigError
from primuspp.inputs import check_regular, finite, load_json
from primuspp.trace.columns import CurveColumns, IntervalColumns
from primuspp.trace.timeline import Interval, RankTimeline, Timeline

_RANK_FILE = re.compile(r"^pp_rank_(\d+)\.json$")


#: the pp_data group of each interval kind, and the groups in the order their keys are written
_GROUP = {"F": "fwd", "B": "bwd", "BW": "bwd", "W": "wgrad", "FB": "fb"}
_GROUPS = ("fwd", "bwd", "wgrad", "fb")


def rank_record(rt: RankTimeline) -> dict[str, Any]:
    """One rank's record in Primus' layout (`_record_columns`) as a dict of lists."""
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in _record_columns(rt)}


def rank_text(rt: RankTimeline, vocab: Vocab | None = None) -> str:
    """`json.dumps(rank_record(rt))`, written column by column: a float column through `vocab` (the repr of
    each of a timeline's distinct times and levels, made once) where it holds the column's values."""
    parts = []
    for key, v in _record_columns(rt):
        text = vocab.text(v) if vocab is not None and isinstance(v, np.ndarray) else None
        if text is None:
            text = json.dumps(v.tolist() if isinstance(v, np.ndarray) else v)
        parts.append(f'"{key}": {text}')
    return "{" + ", ".join(parts) + "}"


class Vocab:
    """The JSON text of each distinct float of a timeline's columns, written once. A simulated timeline's
    times and memory levels repeat across ranks and keys (a few thousand distinct values among millions), so
    gathering their texts is a fraction of `json.dumps` formatting every float."""

    __slots__ = ("int_texts", "texts", "values")

    def __init__(self, values: Any, top: int) -> None:
        self.values = values
        self.texts = np.array([repr(v) for v in values.tolist()], dtype=object)
        #: the texts of the integer labels -1 .. top (microbatch, stage, chunk)
        self.int_texts = np.array([str(i) for i in range(-1, top + 1)], dtype=object)

    @classmethod
    def of(cls, timelines: list[Timeline]) -> Vocab | None:
        """The vocabulary of `timelines`' ranks held as columns (gathered rank by rank: no copy of all at
        once), or None when most floats are distinct or one is not finite or is -0.0 (whose texts differ
        from `repr`'s or from 0.0's)."""
        parts, count, top = [], 0, 0
        for tl in timelines:
            for rt in tl.ranks:
                ivs, curve = rt.intervals, rt.memory
                cols = [ivs.start, ivs.end] if isinstance(ivs, IntervalColumns) else []
                if cols and len(ivs):
                    top = max(top, *(int(c.max()) for c in (ivs.mb, ivs.stage, ivs.chunk)))
                if isinstance(curve, CurveColumns):
                    cols += [curve.level, curve.time]
                if cols:
                    part = _distinct(np.concatenate(cols))
                    if not np.isfinite(part).all() or np.signbit(part[part == 0]).any():
                        return None
                    parts.append(part)
                    count += sum(len(c) for c in cols)
        values = _distinct(np.concatenate(parts)) if parts else None
        return cls(values, top) if values is not None and len(values) * 4 <= count else None

    def text(self, col: Any) -> str | None:
        """The JSON list of `col`, or None when its values are not all held here."""
        if not len(col):
            return None
        if col.dtype.kind == "i":
            if col.min() < -1 or col.max() >= len(self.int_texts) - 1:
                return None
            return "[" + ", ".join(self.int_texts[col + 1].tolist()) + "]"
        if col.dtype != np.float64:
            return None
        at = np.minimum(np.searchsorted(self.values, col), len(self.values) - 1)
        if not (self.values[at] == col).all():
            return None
        return "[" + ", ".join(self.texts[at].tolist()) + "]"


def _distinct(col: Any) -> Any:
    values = np.sort(col)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _record_columns(rt: RankTimeline) -> list[tuple[str, Any]]:
    """One rank's record in Primus' layout, its keys in order, each with a numpy column or a list (times in
    ms; our extensions after Primus' keys, which its readers ignore). Read from the rank's columns
    (`trace.columns`: a simulated rank's own, else built from its Interval objects)."""
    ivs = _columns(rt.intervals)
    of_kind = [_GROUPS.index(_GROUP[k]) if k in _GROUP else -1 for k in ivs.kinds]
    group = np.array(of_kind, dtype=np.int64)[ivs.kind]
    rows = {prefix: np.flatnonzero(group == g) for g, prefix in enumerate(_GROUPS)}
    rec: list[tuple[str, Any]] = [
        ("total", ivs.end.max().item() if len(ivs.end) else 0.0),
        ("memory", rt.peak_memory),
    ]
    for prefix in ("fwd", "bwd", "wgrad"):
        rec += [(f"{prefix}_start", ivs.start[rows[prefix]]), (f"{prefix}_end", ivs.end[rows[prefix]])]
    for prefix in ("fwd", "bwd", "wgrad"):
        rec += [(f"{prefix}_minibatch", ivs.mb[rows[prefix]]), (f"{prefix}_chunk", ivs.chunk[rows[prefix]])]
    curve = rt.memory
    if isinstance(curve, CurveColumns):
        levels, times = curve.level, curve.time
    else:
        levels, times = [level for _, level in curve[1:]], [t for t, _ in curve[1:]]
    rec.append(("activation_memory_usage", levels))
    # primuspp extensions (Primus' readers ignore unknown keys): exact kinds, stages and memory times
    rec.append(("bwd_kind", [ivs.kinds[k] for k in ivs.kind[rows["bwd"]].tolist()]))
    rec += [(f"{prefix}_stage", ivs.stage[rows[prefix]]) for prefix in ("fwd", "bwd", "wgrad")]
    rec.append(("activation_memory_time", times))
    fb = rows["fb"]
    if len(fb):
        rec += [("fb_start", ivs.start[fb]), ("fb_end", ivs.end[fb]), ("fb_minibatch", ivs.mb[fb])]
        rec += [("fb_chunk", ivs.chunk[fb]), ("fb_stage", ivs.stage[fb])]
        back: dict[int, list[Any]] = {}
        if ivs.backward is not None:
            where, kind, mb, stage, chunk = (col.tolist() for col in ivs.backward)
            for i, k, b_mb, b_s, b_c in zip(where, kind, mb, stage, chunk, strict=True):
                back[i] = [ivs.kinds[k], b_mb, b_s, b_c]
        rec.append(("fb_backward", [back.get(i, []) for i in fb.tolist()]))
    return rec


def _columns(intervals: Any) -> IntervalColumns:
    """A rank's intervals as columns: a simulated rank's own, or built from Interval objects."""
    if isinstance(intervals, IntervalColumns):
        return intervals
    kinds = sorted({iv.kind for iv in intervals})
    code = {k: i for i, k in enumerate(kinds)}
    backs = [(i, iv.backward) for i, iv in enumerate(intervals) if iv.backward is not None]
    backward = None
    if backs:
        kinds += sorted({b[0] for _, b in backs} - set(kinds))
        code = {k: i for i, k in enumerate(kinds)}
        backward = tuple(
            np.array(col, dtype=np.int64)
            for col in zip(*((i, code[b[0]], b[1], b[2], b[3]) for i, b in backs), strict=True)
        )
    return IntervalColumns(
        kinds,
        np.array([code[iv.kind] for iv in intervals], dtype=np.int64),
        np.array([iv.microbatch for iv in intervals], dtype=np.int64),
        np.array([iv.stage for iv in intervals], dtype=np.int64),
        np.array([iv.chunk for iv in intervals], dtype=np.int64),
        np.array([iv.start for iv in intervals], dtype=np.float64),
        np.array([iv.end for iv in intervals], dtype=np.float64),
        backward,  # type: ignore[arg-type]
    )


def config_record(timeline: Timeline, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    rec = {"pp_size": timeline.pp, "vpp_size": timeline.vpp, "micro_batches": timeline.micro_batches}
    rec.update({"name": timeline.name, "algorithm": timeline.algorithm, "source": timeline.source})
    rec["memory_unit"] = timeline.memory_unit
    rec.update(extra or {})
    return rec


def write_pp_data(timelines: list[Timeline], directory: Path, extra: dict[str, Any] | None = None) -> None:
    """Write one or more iterations of the same run (same pp) into `directory` (which must exist), one rank
    file at a time (a large run's text is never held whole)."""
    first = timelines[0]
    (directory / "config.json").write_text(json.dumps(config_record(first, extra), indent=2) + "\n")
    vocab = Vocab.of(timelines)
    for r in range(first.pp):
        texts = (f"{json.dumps(str(tl.iteration))}: {rank_text(tl.ranks[r], vocab)}" for tl in timelines)
        text = ", ".join(texts)
        (directory / f"pp_rank_{r}.json").write_text("{" + text + "}\n")


def _source_and_unit(config: dict) -> tuple[str, str]:
    """Ours say; Primus' real-run dumps (`num_mbs`, `train_iters`) hold measured times and
    `torch.cuda.max_memory_reserved()` in GiB; Primus' simulator output (`micro_batches`) is simulated, in
    activation units."""
    measured = "num_mbs" in config or "train_iters" in config
    source = str(config.get("source", "measured" if measured or not config else "simulated"))
    unit = str(config.get("memory_unit", "GiB" if source == "measured" else "microbatches"))
    return source, unit


# -- reading -----------------------------------------------------------------------------------------------

#: Overlaps of two intervals on one rank that a measured trace may show from timer jitter and that are
#: clipped (the later interval starts where the earlier ends) with a warning: at most `CLIP_MS` and at most
#: `CLIP_FRACTION` of the shorter interval. Larger overlaps, and any in a simulated run beyond float
#: rounding (`EXACT_MS`), are refused.
CLIP_MS = 1.0
CLIP_FRACTION = 0.1
EXACT_MS = 1e-6
#: Most warnings listed by name in the one warning line of a dump with clipped overlaps.
_SHOWN_CLIPS = 3

_KIND_OF = {"fwd": "F", "wgrad": "W", "fb": "FB"}
_BACKWARD_KINDS = ("B", "BW")


def _int_value(value: Any, where: str, key: str, minimum: int = 1) -> int:
    """A config count: an integer (an integral float such as 8.0 too) >= `minimum`."""
    ok = (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )
    if not ok or value < minimum:
        raise ConfigError(f"{where}: {key}={value!r}: expected an integer >= {minimum}", key=key)
    return int(value)


def _floats(rec: dict, key: str, where: str) -> list[float]:
    value = rec.get(key, [])
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise ConfigError(f"{where}: '{key}' must be a list of numbers", key=key)
    return [finite(x, f"{where}: {key}") for x in value]


def _ints(rec: dict, key: str, n: int, where: str) -> list[int]:
    """Integer labels (`*_minibatch`, `*_chunk`, `*_stage`), -1 for each when absent or empty."""
    value = rec.get(key)
    if not value:
        return [-1] * n
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ConfigError(f"{where}: '{key}' must be a list of integers", key=key)
    if len(value) != n:
        raise ConfigError(f"{where}: '{key}' has {len(value)} entries, its intervals {n}", key=key)
    return value


def _bwd_kinds(rec: dict, n: int, default: str, where: str) -> list[str]:
    value = rec.get("bwd_kind")
    if not value:
        return [default] * n
    if not isinstance(value, list) or any(k not in _BACKWARD_KINDS for k in value):
        raise ConfigError(f'{where}: \'bwd_kind\' must be a list of "B" or "BW"', key="bwd_kind")
    if len(value) != n:
        raise ConfigError(f"{where}: 'bwd_kind' has {len(value)} entries, bwd intervals {n}", key="bwd_kind")
    return value


def _fb_backward(rec: dict, n: int, where: str) -> list[tuple[str, int, int, int] | None]:
    """The backward part of each FB interval: [kind, microbatch, stage, chunk] (or [] when unknown)."""
    value = rec.get("fb_backward")
    if not value:
        return [None] * n
    if not isinstance(value, list) or len(value) != n:
        raise ConfigError(f"{where}: 'fb_backward' must be a list of {n} entries", key="fb_backward")
    backs: list[tuple[str, int, int, int] | None] = []
    for item in value:
        if item == []:
            backs.append(None)
            continue
        ok = isinstance(item, list) and len(item) == 4 and item[0] in _BACKWARD_KINDS
        ok = ok and all(isinstance(x, int) and not isinstance(x, bool) for x in item[1:])
        if not ok:
            raise ConfigError(
                f'{where}: \'fb_backward\' entries must be ["B"|"BW", microbatch, stage, chunk], '
                f"not {item!r}",
                key="fb_backward",
            )
        backs.append((item[0], item[1], item[2], item[3]))
    return backs


def _parse_rank(rec: Any, rank: int, where: str) -> tuple[list[Interval], dict[int, str], RankTimeline]:
    """One rank's record of one iteration: its intervals (unsorted, unchecked), where each came from
    (`fwd_start[3]`, for messages) and the rank's timeline."""
    if not isinstance(rec, dict) or "fwd_start" not in rec or "fwd_end" not in rec:
        raise ConfigError(f"{where}: expected an object with fwd_start/fwd_end lists (Primus pp_data format)")
    intervals: list[Interval] = []
    origin: dict[int, str] = {}
    has_w = bool(rec.get("wgrad_start"))
    for prefix in ("fwd", "bwd", "wgrad", "fb"):
        starts, ends = _floats(rec, f"{prefix}_start", where), _floats(rec, f"{prefix}_end", where)
        if len(starts) != len(ends):
            raise ConfigError(
                f"{where}: {prefix}_start has {len(starts)} entries, {prefix}_end {len(ends)}",
                key=f"{prefix}_end",
            )
        n = len(starts)
        mbs = _ints(rec, f"{prefix}_minibatch", n, where)
        chunks = _ints(rec, f"{prefix}_chunk", n, where)
        stages = _ints(rec, f"{prefix}_stage", n, where)
        if prefix == "bwd":
            kinds = _bwd_kinds(rec, n, "B" if has_w else "BW", where)
        else:
            kinds = [_KIND_OF[prefix]] * n
        backs = _fb_backward(rec, n, where) if prefix == "fb" else [None] * n
        for i in range(n):
            iv = Interval(kinds[i], mbs[i], stages[i], chunks[i], starts[i], ends[i], backs[i])
            intervals.append(iv)
            origin[id(iv)] = f"{prefix}_start[{i}]"
    levels = _floats(rec, "activation_memory_usage", where) if "activation_memory_usage" in rec else []
    times = _floats(rec, "activation_memory_time", where) if "activation_memory_time" in rec else []
    if levels and not times:
        # Primus writes no times: its levels follow each forward and backward event in time order
        events = sorted((iv for iv in intervals if iv.kind != "W"), key=lambda iv: (iv.start, iv.kind != "F"))
        times = [iv.end for iv in events] if len(events) == len(levels) else []
    sampled = list(zip(times, levels, strict=True)) if times and len(times) == len(levels) else []
    intervals = _merge_combined(intervals, origin)
    memory = [(0.0, 0.0), *sampled]
    peak = rec.get("memory", max(levels, default=0.0))
    peak = finite(peak, f"{where}: memory") if peak is not None else 0.0
    return intervals, origin, RankTimeline(rank, intervals, memory, peak)


def _merge_combined(intervals: list[Interval], origin: dict[int, str]) -> list[Interval]:
    """Primus records a combined forward+backward call (its FB overlap) as an fwd and a bwd event with the
    same [start, end]: make those one FB interval instead of two boxes on top of each other."""
    backward = {}
    for iv in intervals:
        if iv.kind in _BACKWARD_KINDS and iv.end > iv.start:
            backward.setdefault((iv.start, iv.end), iv)
    if not backward:
        return intervals
    merged, absorbed = [], set()
    for iv in intervals:
        twin = backward.pop((iv.start, iv.end), None) if iv.kind == "F" else None
        if twin is None:
            merged.append(iv)
            continue
        absorbed.add(id(twin))
        back = (twin.kind, twin.microbatch, twin.stage, twin.chunk)
        fb = Interval("FB", iv.microbatch, iv.stage, iv.chunk, iv.start, iv.end, back)
        origin[id(fb)] = origin[id(iv)]
        merged.append(fb)
    return [iv for iv in merged if id(iv) not in absorbed]


@dataclass
class _Clips:
    """Overlaps clipped in measured traces, reported in one warning line per directory."""

    count: int = 0
    largest: float = 0.0
    shown: list[str] = field(default_factory=list)


def _checked(
    intervals: list[Interval], origin: dict[int, str], where: str, measured: bool, clips: _Clips
) -> list[Interval]:
    """The intervals in time order, after the sanity checks: no negative start, no end before start, no
    overlap (see CLIP_MS)."""
    for iv in intervals:
        if iv.start < 0:
            key = origin[id(iv)]
            raise ConfigError(
                f"{where}: {key} = {iv.start:g} is negative (times are ms from the iteration start)", key=key
            )
        if iv.end < iv.start:
            key = origin[id(iv)]
            raise ConfigError(
                f"{where}: {key.replace('_start', '_end')} = {iv.end:g} is before its start {iv.start:g}",
                key=key.replace("_start", "_end"),
            )
    ordered = sorted(intervals, key=lambda iv: (iv.start, iv.end))
    for i in range(1, len(ordered)):
        prev, iv = ordered[i - 1], ordered[i]
        overlap = prev.end - iv.start
        if overlap <= EXACT_MS:
            continue
        a, b = origin[id(prev)], origin[id(iv)]
        shorter = min(prev.duration, iv.duration)
        if not measured or overlap > CLIP_MS or overlap > CLIP_FRACTION * shorter:
            raise ConfigError(
                f"{where}: {b} [{iv.start:g}, {iv.end:g}] overlaps {a} [{prev.start:g}, {prev.end:g}] by "
                f"{overlap:g} ms (one rank runs one node at a time; a measured trace's overlaps of at most "
                f"{CLIP_MS:g} ms and {CLIP_FRACTION:.0%} of the shorter interval are clipped)",
                key=b,
            )
        clipped = replace(iv, start=prev.end, end=max(iv.end, prev.end))
        origin[id(clipped)] = b
        ordered[i] = clipped
        clips.count += 1
        clips.largest = max(clips.largest, overlap)
        if len(clips.shown) < _SHOWN_CLIPS:
            clips.shown.append(f"{where}: {b} by {overlap:.3g} ms")
    return ordered


def _rank_files(directory: Path) -> dict[int, Path]:
    rank_files = {}
    for p in directory.iterdir():
        match = _RANK_FILE.match(p.name)
        if match:
            rank_files[int(match.group(1))] = p
    if not rank_files:
        raise ConfigError(
            f"{directory}: no pp_rank_<r>.json files (expected Primus pp_data layout)", key="path"
        )
    if sorted(rank_files) != list(range(len(rank_files))):
        raise ConfigError(f"{directory}: pp_rank files must be numbered 0..{len(rank_files) - 1}", key="path")
    return rank_files


@dataclass(frozen=True)
class _Shape:
    """What config.json says, checked against the files present before any rank file is read."""

    pp: int
    vpp: int
    micro_batches: int | None  # None: not given, counted from the forwards
    vkey: str  # the keys config.json gave them under (ours or Primus' real-run names)
    mkey: str


def _shape(config: dict, cfg_path: Path, pp_files: int) -> _Shape:
    where = str(cfg_path)
    if "pp_size" in config:
        pp = _int_value(config["pp_size"], where, "pp_size")
        if pp != pp_files:
            raise ConfigError(
                f"{where}: pp_size={config['pp_size']!r} but {cfg_path.parent} holds {pp_files} pp_rank "
                f"files (pp_rank_0..{pp_files - 1}.json): expected pp_size {pp_files}",
                key="pp_size",
            )
    vkey = "vpp_size" if "vpp_size" in config else "vp_size"
    vpp = _int_value(config[vkey], where, vkey) if config.get(vkey) is not None else 1
    mkey = "micro_batches" if "micro_batches" in config else "num_mbs"
    mbs = _int_value(config[mkey], where, mkey) if config.get(mkey) is not None else None
    return _Shape(pp_files, vpp, mbs, vkey, mkey)


def _check_counts(shape: _Shape, cfg_path: Path, ranks: list[RankTimeline], where: str) -> int:
    """The microbatch count, checked against every rank's forwards: m × v of them (m with a bidirectional
    placement, where each rank holds one stage of each direction's copy)."""
    forwards = [sum(iv.kind in ("F", "FB") for iv in rt.intervals) for rt in ranks]
    if shape.micro_batches is None:
        if shape.vpp > max(forwards[0], 1):
            raise ConfigError(
                f"{cfg_path}: {shape.vkey}={shape.vpp} but rank 0 ran {forwards[0]} forwards in {where}",
                key=shape.vkey,
            )
        return forwards[0] // shape.vpp
    m, v = shape.micro_batches, shape.vpp
    allowed = {m * v} | ({m} if v == 2 else set())
    for rank, count in enumerate(forwards):
        if count not in allowed:
            raise ConfigError(
                f"{cfg_path}: {shape.mkey}={m} with {shape.vkey}={v} means {m * v} forwards per rank, "
                f"but rank {rank} ran {count} in {where}",
                key=shape.mkey,
            )
    return m


def read_pp_data(directory: str | Path) -> list[Timeline]:
    """All iterations of a pp_data directory, as timelines (one per iteration, in file order).

    `config.json` is checked against the pp_rank files present before any is read; every interval is
    checked (no negative start, no end before start, no overlap on a rank beyond what `_checked` clips,
    with one warning line on stderr naming the clipped intervals)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory", key="path")
    rank_files = _rank_files(directory)
    config: dict = {}
    cfg_path = directory / "config.json"
    if cfg_path.exists() or cfg_path.is_symlink():
        config = load_json(cfg_path)
        if not isinstance(config, dict):
            raise ConfigError(f"{cfg_path}: expected a JSON object", key="path")
    shape = _shape(config, cfg_path, len(rank_files))
    for path in rank_files.values():
        check_regular(path)  # every file before reading any: a FIFO among them must not block
    per_rank = []
    for r in range(shape.pp):
        data = load_json(rank_files[r])
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"{rank_files[r]}: expected an object keyed by iteration", key="path")
        per_rank.append(data)
    source, memory_unit = _source_and_unit(config)
    measured = source != "simulated"
    clips = _Clips()
    timelines = []
    for it in per_rank[0]:
        ranks = []
        for r in range(shape.pp):
            if it not in per_rank[r]:
                raise ConfigError(f"{rank_files[r]}: iteration {it!r} missing", key="path")
            where = f"{rank_files[r]} iteration {it}"
            intervals, origin, rt = _parse_rank(per_rank[r][it], r, where)
            rt.intervals = _checked(intervals, origin, f"{where} (rank {r})", measured, clips)
            ranks.append(rt)
        mbs = _check_counts(shape, cfg_path, ranks, f"iteration {it}")
        timelines.append(
            Timeline(
                name=str(config.get("name", directory.name)),
                pp=shape.pp,
                vpp=shape.vpp,
                micro_batches=mbs,
                ranks=ranks,
                algorithm=str(config.get("algorithm", "")),
                source=source,
                iteration=str(it),
                memory_unit=memory_unit,
            )
        )
    if clips.count:
        more = f" and {clips.count - len(clips.shown)} more" if clips.count > len(clips.shown) else ""
        print(
            f"warning: {directory}: clipped {clips.count} overlapping interval(s) "
            f"(largest {clips.largest:.3g} ms; each now starts where the previous ends): "
            + "; ".join(clips.shown)
            + more,
            file=sys.stderr,
        )
    return timelines
