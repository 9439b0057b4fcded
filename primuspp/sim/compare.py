"""Rank results by step time, optionally under a per-rank memory limit, and name the best; one ranking per
set of choices (runs of one kind at one size: a recommendation never weighs a simulation against a
measurement, nor a run of p 4 against one of p 8)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.errors import ConfigError

GIB = 2**30


@dataclass(frozen=True)
class Ranking:
    rows: list[dict[str, Any]]  # result summaries, fastest first, each with "fits" added
    best: str | None
    reason: str
    title: str = ""  # the set's kind and size, e.g. "Simulated at p 8, m 32"


def ms(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def limit_unit(row: dict[str, Any]) -> str:
    """What `--mem-limit` means for this run: microbatch units for simulations (abstract activations),
    GiB where the run knows bytes (a real or emulated run, a projection)."""
    unit = row.get("memory_unit", "microbatches")
    return "GiB" if unit in ("bytes", "GiB") else unit


def peak(row: dict[str, Any]) -> float:
    """The run's peak memory in `limit_unit(row)`."""
    return row["peak_memory"] / GIB if row.get("memory_unit") == "bytes" else row["peak_memory"]


def check_limit_unit(rows: list[dict[str, Any]], mem_limit: float | None) -> str:
    """The one unit of `--mem-limit` for these runs; refused when they count memory in different units."""
    units = list(dict.fromkeys(limit_unit(r) for r in rows))
    if mem_limit is not None and len(units) > 1:
        raise ConfigError(
            f"--mem-limit {mem_limit:g}: ambiguous unit, these runs count memory in {' and '.join(units)}; "
            "give --mem-limit with runs of one kind (microbatches for simulations, GiB for measured runs)",
            key="mem-limit",
        )
    return units[0] if units else "microbatches"


def _budget_driven(summary: dict[str, Any]) -> bool:
    """Ties go to schedules that do not depend on the memory budget (zbv over v-auto at zbv's budget)."""
    algo = ALGORITHMS.get(str(summary.get("algorithm")))
    return bool(algo and algo.budget_param and algo.budget_param in summary.get("params", {}))


def _title(row: dict[str, Any]) -> str:
    source = str(row.get("source", "simulated"))
    return f"{source[:1].upper()}{source[1:]} at p {row['pp']}, m {row['micro_batches']}"


def rank_results(summaries: list[dict[str, Any]], mem_limit: float | None = None) -> Ranking:
    """One set of choices ranked (see `group_rows`)."""
    unit = check_limit_unit(summaries, mem_limit)
    rows = []
    for s in summaries:
        fits = mem_limit is None or peak(s) <= mem_limit + 1e-9
        rows.append({**s, "fits": fits})
    rows.sort(key=lambda s: (not s["fits"], s["step_time"], peak(s), _budget_driven(s), s["name"]))
    title = _title(rows[0]) if rows else ""
    limit = f"a per-rank limit of {mem_limit:g} {unit}" if mem_limit is not None else ""
    fitting = [s for s in rows if s["fits"]]
    if len(rows) == 1 and mem_limit is None:
        return Ranking(rows, None, "one run: nothing to choose between", title)
    if not fitting:
        lowest = min(rows, key=peak) if rows else None
        hint = f"; the lowest peak is {lowest['name']} at {peak(lowest):.3g} {unit}" if lowest else ""
        return Ranking(rows, None, f"nothing fits {limit}{hint}", title)
    best = fitting[0]
    return Ranking(
        rows,
        best["name"],
        f"{best['name']} has the shortest step time{' within ' + limit if limit else ''} "
        f"({ms(best['step_time'])} ms, peak {peak(best):.3g} {unit})",
        title,
    )


def group_rows(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Rows by kind of run (`source`) and size (p, m), in the order first seen: each group is one set of
    choices, ranked on its own."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("source", "simulated")), r["pp"], r["micro_batches"]), []).append(r)
    return list(groups.values())
