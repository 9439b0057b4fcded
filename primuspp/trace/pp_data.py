"""Primus' pp_data layout: `config.json` + `pp_rank_<r>.json` = {"<iteration>": {...}}, times in ms.

Written for simulated and real runs alike; read back from ours and from Primus' own files, including its
older format without minibatch/chunk/wgrad keys (those intervals get microbatch/chunk -1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError
from primuspp.trace.timeline import Interval, RankTimeline, Timeline

_RANK_FILE = re.compile(r"^pp_rank_(\d+)\.json$")


def rank_record(rt: RankTimeline) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "total": max((iv.end for iv in rt.intervals), default=0.0),
        "memory": rt.peak_memory,
    }
    groups: dict[str, list[Interval]] = {"fwd": [], "bwd": [], "wgrad": [], "fb": []}
    for iv in rt.intervals:
        groups[{"F": "fwd", "B": "bwd", "BW": "bwd", "W": "wgrad", "FB": "fb"}[iv.kind]].append(iv)
    for prefix in ("fwd", "bwd", "wgrad"):
        ivs = groups[prefix]
        rec[f"{prefix}_start"] = [iv.start for iv in ivs]
        rec[f"{prefix}_end"] = [iv.end for iv in ivs]
    for prefix in ("fwd", "bwd", "wgrad"):
        ivs = groups[prefix]
        rec[f"{prefix}_minibatch"] = [iv.microbatch for iv in ivs]
        rec[f"{prefix}_chunk"] = [iv.chunk for iv in ivs]
    rec["activation_memory_usage"] = [level for _, level in rt.memory[1:]]
    # primuspp extensions (Primus' readers ignore unknown keys): exact kinds, stages and memory times
    rec["bwd_kind"] = [iv.kind for iv in groups["bwd"]]
    for prefix in ("fwd", "bwd", "wgrad"):
        rec[f"{prefix}_stage"] = [iv.stage for iv in groups[prefix]]
    rec["activation_memory_time"] = [t for t, _ in rt.memory[1:]]
    if groups["fb"]:
        fb = groups["fb"]
        rec["fb_start"] = [iv.start for iv in fb]
        rec["fb_end"] = [iv.end for iv in fb]
        rec["fb_minibatch"] = [iv.microbatch for iv in fb]
        rec["fb_chunk"] = [iv.chunk for iv in fb]
        rec["fb_stage"] = [iv.stage for iv in fb]
        rec["fb_backward"] = [list(iv.backward or ()) for iv in fb]
    return rec


def config_record(timeline: Timeline, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    rec = {"pp_size": timeline.pp, "vpp_size": timeline.vpp, "micro_batches": timeline.micro_batches}
    rec.update({"name": timeline.name, "algorithm": timeline.algorithm, "source": timeline.source})
    rec["memory_unit"] = timeline.memory_unit
    rec.update(extra or {})
    return rec


def write_pp_data(timelines: list[Timeline], directory: Path, extra: dict[str, Any] | None = None) -> None:
    """Write one or more iterations of the same run (same pp) into `directory` (which must exist)."""
    first = timelines[0]
    (directory / "config.json").write_text(json.dumps(config_record(first, extra), indent=2) + "\n")
    for r in range(first.pp):
        data = {tl.iteration: rank_record(tl.ranks[r]) for tl in timelines}
        (directory / f"pp_rank_{r}.json").write_text(json.dumps(data) + "\n")


def _floats(rec: dict, key: str, where: str) -> list[float]:
    value = rec.get(key, [])
    if not isinstance(value, list) or not all(isinstance(x, int | float) for x in value):
        raise ConfigError(f"{where}: '{key}' must be a list of numbers", key=key)
    return [float(x) for x in value]


def _parse_rank(rec: Any, rank: int, where: str) -> RankTimeline:
    if not isinstance(rec, dict) or "fwd_start" not in rec or "fwd_end" not in rec:
        raise ConfigError(f"{where}: expected an object with fwd_start/fwd_end lists (Primus pp_data format)")
    intervals = []
    has_w = bool(rec.get("wgrad_start"))
    for prefix, default_kind in (("fwd", "F"), ("bwd", "B" if has_w else "BW"), ("wgrad", "W"), ("fb", "FB")):
        starts, ends = _floats(rec, f"{prefix}_start", where), _floats(rec, f"{prefix}_end", where)
        if len(starts) != len(ends):
            raise ConfigError(f"{where}: {prefix}_start and {prefix}_end differ in length")
        n = len(starts)
        mbs = rec.get(f"{prefix}_minibatch") or [-1] * n
        chunks = rec.get(f"{prefix}_chunk") or [-1] * n
        stages = rec.get(f"{prefix}_stage") or [-1] * n
        kinds = rec.get("bwd_kind") if prefix == "bwd" and rec.get("bwd_kind") else [default_kind] * n
        backs = (rec.get("fb_backward") if prefix == "fb" else None) or [None] * n
        if not all(len(x) == n for x in (mbs, chunks, stages, kinds, backs)):
            raise ConfigError(f"{where}: {prefix}_* lists differ in length")
        for i in range(n):
            back = tuple(backs[i]) if prefix == "fb" and backs[i] else None
            intervals.append(
                Interval(kinds[i], int(mbs[i]), int(stages[i]), int(chunks[i]), starts[i], ends[i], back)
            )
    intervals = _merge_combined(intervals)
    intervals.sort(key=lambda iv: (iv.start, iv.end))
    levels = _floats(rec, "activation_memory_usage", where) if "activation_memory_usage" in rec else []
    times = _floats(rec, "activation_memory_time", where) if "activation_memory_time" in rec else []
    memory = [(0.0, 0.0)] + (list(zip(times, levels, strict=False)) if len(times) == len(levels) else [])
    peak = float(rec.get("memory", max(levels, default=0.0)) or 0.0)
    return RankTimeline(rank, intervals, memory, peak)


def _merge_combined(intervals: list[Interval]) -> list[Interval]:
    """Primus records a combined forward+backward call (its FB overlap) as an fwd and a bwd event with the
    same [start, end]: make those one FB interval instead of two boxes on top of each other."""
    backward = {}
    for iv in intervals:
        if iv.kind in ("B", "BW") and iv.end > iv.start:
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
        merged.append(Interval("FB", iv.microbatch, iv.stage, iv.chunk, iv.start, iv.end, back))
    return [iv for iv in merged if id(iv) not in absorbed]


def _source_and_unit(config: dict) -> tuple[str, str]:
    """Ours say; Primus' real-run dumps (`num_mbs`, `train_iters`) hold measured times and
    `torch.cuda.max_memory_reserved()` in GiB; Primus' simulator output (`micro_batches`) is simulated, in
    activation units."""
    measured = "num_mbs" in config or "train_iters" in config
    source = str(config.get("source", "measured" if measured or not config else "simulated"))
    unit = str(config.get("memory_unit", "GiB" if source == "measured" else "microbatches"))
    return source, unit


def read_pp_data(directory: str | Path) -> list[Timeline]:
    """All iterations of a pp_data directory, as timelines (one per iteration, in file order)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory", key="path")
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
    config: dict = {}
    cfg_path = directory / "config.json"
    if cfg_path.exists():
        config = _load_json(cfg_path)
        if not isinstance(config, dict):
            raise ConfigError(f"{cfg_path}: expected a JSON object", key="path")
    per_rank = []
    for r in range(len(rank_files)):
        data = _load_json(rank_files[r])
        if not isinstance(data, dict) or not data:
            raise ConfigError(f"{rank_files[r]}: expected an object keyed by iteration", key="path")
        per_rank.append(data)
    iterations = list(per_rank[0])
    pp = len(per_rank)
    vpp = int(config.get("vpp_size", config.get("vp_size", 1)) or 1)
    mbs = int(config.get("micro_batches", config.get("num_mbs", 0)) or 0)
    source, memory_unit = _source_and_unit(config)
    timelines = []
    for it in iterations:
        ranks = []
        for r in range(pp):
            if it not in per_rank[r]:
                raise ConfigError(f"{rank_files[r]}: iteration {it!r} missing", key="path")
            ranks.append(_parse_rank(per_rank[r][it], r, f"{rank_files[r]} iteration {it}"))
        timelines.append(
            Timeline(
                name=str(config.get("name", directory.name)),
                pp=pp,
                vpp=vpp,
                micro_batches=mbs
                or max((len([iv for iv in ranks[0].intervals if iv.kind in ("F", "FB")]) // vpp), 0),
                ranks=ranks,
                algorithm=str(config.get("algorithm", "")),
                source=source,
                iteration=str(it),
                memory_unit=memory_unit,
            )
        )
    return timelines


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON ({err.msg} at line {err.lineno})", key="path") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})", key="path") from None
