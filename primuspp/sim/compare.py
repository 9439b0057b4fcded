"""Rank results by step time, optionally under a per-rank activation limit, and name the best."""

from __future__ import annotations

from dataclasses import dataclass
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
