"""Result summaries from directories: simulate output (summary.json), pp_data dumps (measured) and Primus'
simulator output, a root of several runs or one run."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError
from primuspp.inputs import finite, load_json
from primuspp.trace.metrics import has_memory_curve, steady, timeline_metrics, typical
from primuspp.trace.pp_data import read_pp_data

#: the `source` of a run Primus' own simulator wrote (its config.json names no source)
PRIMUS_SIMULATOR = "simulated (Primus' simulator)"


def run_dirs(path: str | Path) -> list[Path]:
    """The run directories at `path`: itself when it holds a run (summary.json or pp_rank files), else its
    subdirectories that do (a simulate output root, ours or Primus')."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory", key="path")
    if not path.is_dir():
        raise ConfigError(f"{path}: expected a result or pp_data directory", key="path")
    if _is_run(path):
        return [path]
    runs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".") and _is_run(p))
    if not runs:
        raise ConfigError(
            f"{path}: no summary.json or pp_rank_<r>.json files, nor run directories holding them", key="path"
        )
    return runs


def _is_run(path: Path) -> bool:
    return (path / "summary.json").exists() or any(path.glob("pp_rank_*.json"))


def summaries_from_dir(path: str | Path) -> list[dict[str, Any]]:
    """One summary per run at `path` (see `run_dirs`), each with its `path`."""
    rows = []
    for d in run_dirs(path):
        row = _read_summary(d / "summary.json") if (d / "summary.json").exists() else summary_from_pp_data(d)
        rows.append({**row, "path": str(d)})
    return rows


def _read_summary(path: Path) -> dict[str, Any]:
    data = load_json(path)
    required = ("name", "step_time", "bubble_rate", "peak_memory", "per_rank")
    if not isinstance(data, dict) or any(k not in data for k in required):
        raise ConfigError(f"{path}: not a primuspp summary (needs {', '.join(required)})", key="path")
    if not isinstance(data["name"], str) or not isinstance(data["per_rank"], list):
        raise ConfigError(f"{path}: 'name' must be a string and 'per_rank' a list", key="name")
    for key in ("step_time", "bubble_rate", "peak_memory"):
        if isinstance(data[key], bool):
            raise ConfigError(f"{path}: {key}={data[key]!r}: expected a finite number", key=key)
        data[key] = finite(data[key], f"{path}: {key}", minimum=0)
    return data


def summary_from_pp_data(path: Path) -> dict[str, Any]:
    """Metrics of a pp_data dump: the median over its iterations, leaving out the first (warm-up) when
    there are more than two — the same figures `compare`'s predicted-vs-measured table shows. Per-rank
    figures are those of the iteration with the median step time (`iteration`); `statistic` says so."""
    timelines = read_pp_data(path)
    counted = steady(timelines)
    metrics = [timeline_metrics(t) for t in counted]
    pick = typical(counted)
    tl, m = counted[pick], metrics[pick]
    n = len(counted)
    source, config = tl.source, path / "config.json"
    if source == "simulated" and not (config.is_file() and "source" in load_json(config)):
        source = PRIMUS_SIMULATOR
    statistic = f"median of {n} iterations" if n > 1 else f"iteration {tl.iteration}"
    return {
        "name": tl.name,
        "algorithm": tl.algorithm,
        "pp": tl.pp,
        "vpp": tl.vpp,
        "micro_batches": tl.micro_batches,
        "step_time": statistics.median(x.step_time for x in metrics),
        "bubble_rate": statistics.median(x.bubble_rate for x in metrics),
        "steady_bubble_rate": statistics.median(x.steady_bubble_rate for x in metrics),
        "peak_memory": statistics.median(x.peak_memory for x in metrics),
        **({"statistic": statistic} if n > 1 or not source.startswith("simulated") else {}),
        "iteration": tl.iteration,
        "source": source,
        "memory_unit": tl.memory_unit,
        "has_memory_curve": has_memory_curve(tl),
        "per_rank": [asdict(r) for r in m.per_rank],
    }
