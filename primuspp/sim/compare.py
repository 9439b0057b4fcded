"""Rank results by step time, optionally under a per-rank activation limit, and name the best; find what a
bare `primuspp compare` compares (the latest measured run and the simulated run of its schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primuspp.algorithms.registry import ALGORITHMS


@dataclass(frozen=True)
class Ranking:
    rows: list[dict[str, Any]]  # result summaries, fastest first, each with "fits" added
    best: str | None
    reason: str


def _budget_driven(summary: dict[str, Any]) -> bool:
    """Ties go to schedules that do not depend on the memory budget (zbv over v-auto at zbv's budget)."""
    algo = ALGORITHMS.get(str(summary.get("algorithm")))
    return bool(algo and algo.budget_param and algo.budget_param in summary.get("params", {}))


def rank_results(summaries: list[dict[str, Any]], mem_limit: float | None = None) -> Ranking:
    rows = []
    for s in summaries:
        fits = mem_limit is None or s["peak_memory"] <= mem_limit + 1e-9
        rows.append({**s, "fits": fits})
    rows.sort(key=lambda s: (not s["fits"], s["step_time"], s["peak_memory"], _budget_driven(s), s["name"]))
    fitting = [s for s in rows if s["fits"]]
    if not fitting:
        lowest = min(rows, key=lambda s: s["peak_memory"]) if rows else None
        hint = f"; the lowest peak is {lowest['name']} at {lowest['peak_memory']:g}" if lowest else ""
        return Ranking(rows, None, f"nothing fits a per-rank activation limit of {mem_limit:g}{hint}")
    best = fitting[0]
    limit = f" within a per-rank activation limit of {mem_limit:g}" if mem_limit is not None else ""
    return Ranking(
        rows,
        best["name"],
        f"{best['name']} has the shortest step time{limit} "
        f"({best['step_time']:g}, peak {best['peak_memory']:g})",
    )


@dataclass(frozen=True)
class Latest:
    """What a bare `primuspp compare` compares: the latest measured run and, when the latest simulation has
    it, the simulated run of the same schedule."""

    measured: Path  # the pp_data dump of the latest `primuspp train`
    key: tuple[str, int, int, int]  # its schedule: algorithm, p, v, m
    simulated: Path | None  # the run directory of the same schedule in the simulate output, if any
    held: list[str]  # what the simulate output holds (names), for the note when nothing matches


def describe_key(key: tuple[str, int, int, int]) -> str:
    algo, p, v, m = key
    return f"{algo or 'unknown schedule'} p={p} v={v} m={m}"


def find_latest(sim_root: Path, measured: Path) -> Latest | None:
    """The measured run in `measured` (a pp_data dump) and the newest run directory under `sim_root` (a
    simulate output) of the same algorithm, p, v and m; None when there is no measured run."""
    from primuspp.inputs import load_json
    from primuspp.sim.fidelity import load_runs

    if not measured.is_dir() or not any(measured.glob("pp_rank_*.json")):
        return None
    real = load_runs(measured)[0]
    key = real.key
    held: list[str] = []
    matches: list[tuple[float, Path]] = []
    if sim_root.is_dir():
        for d in sorted(sim_root.iterdir()):
            path = d / "summary.json"
            if d.name.startswith(".") or not path.is_file():
                continue
            s = load_json(path)
            if not isinstance(s, dict):
                continue
            held.append(str(s.get("name", d.name)))
            if (s.get("algorithm"), s.get("pp"), s.get("vpp"), s.get("micro_batches")) == key:
                matches.append((path.stat().st_mtime, d))
    simulated = max(matches)[1] if matches else None
    return Latest(measured, key, simulated, held)
