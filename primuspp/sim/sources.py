"""Result summaries from directories: simulate output (summary.json) or pp_data dumps (measured)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError
from primuspp.inputs import finite, load_json
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data


def summaries_from_dir(path: str | Path) -> list[dict[str, Any]]:
    """A simulate output root (several runs), one run directory, or a pp_data directory."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory", key="path")
    if not path.is_dir():
        raise ConfigError(f"{path}: expected a result or pp_data directory", key="path")
    if (path / "summary.json").exists():
        return [_read_summary(path / "summary.json")]
    if any(path.glob("pp_rank_*.json")):
        return [summary_from_pp_data(path)]
    runs = sorted(p for p in path.iterdir() if (p / "summary.json").exists())
    if not runs:
        raise ConfigError(f"{path}: no summary.json or pp_rank_<r>.json files found", key="path")
    return [_read_summary(p / "summary.json") for p in runs]


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
    steady = timelines[1:] if len(timelines) > 2 else timelines
    metrics = [timeline_metrics(t) for t in steady]
    order = sorted(range(len(steady)), key=lambda i: metrics[i].step_time)
    pick = order[(len(order) - 1) // 2]
    tl, m = steady[pick], metrics[pick]
    n = len(steady)
    return {
        "name": tl.name,
        "algorithm": tl.algorithm or "measured",
        "pp": tl.pp,
        "vpp": tl.vpp,
        "micro_batches": tl.micro_batches,
        "step_time": statistics.median(x.step_time for x in metrics),
        "bubble_rate": statistics.median(x.bubble_rate for x in metrics),
        "steady_bubble_rate": statistics.median(x.steady_bubble_rate for x in metrics),
        "peak_memory": statistics.median(x.peak_memory for x in metrics),
        "statistic": f"median of {n} iteration{'s' * (n != 1)}" if n > 1 else f"iteration {tl.iteration}",
        "iteration": tl.iteration,
        "source": tl.source,
        "memory_unit": tl.memory_unit,
        "has_memory_curve": any(len(rt.memory) > 1 for rt in tl.ranks),
        "per_rank": [
            {"rank": r.rank, "busy": r.busy, "span": r.span, "total": r.total, "peak_memory": r.peak_memory}
            for r in m.per_rank
        ],
    }
