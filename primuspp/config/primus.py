"""Primus-Pipeline's `pp_simulation.yaml`, read unchanged and mapped onto our schema.

`class:` paths are mapped to registry names by their class name; nothing is imported.
"""

from __future__ import annotations

import re
from typing import Any

from primuspp.config.schema import run_name_problem
from primuspp.errors import ConfigError

TOP_KEYS = (
    "fwd_time",
    "bwd_time",
    "wgrad_time",
    "comm_time",
    "print_simulation_result",
    "output_dir",
    "schedulers",
)
SCHEDULER_KEYS = (
    "name",
    "class",
    "pp_size",
    "vpp_size",
    "micro_batches",
    "memory_config",
    "cost_f",
    "cost_b",
    "cost_w",
    "cost_comm",
    "max_mem",
)

_CLASSES = {
    "Schedule1F1B": "1f1b",
    "ScheduleZeroBubble": "zero-bubble",
    "ScheduleInterleaved1F1B": "1f1b-interleaved",
    "ScheduleZBVFormatted": "zbv",
    "ScheduleZeroBubbleHeuristic": "zero-bubble-heuristic",
    "ScheduleDualPipe": "dualpipe",
    "ScheduleDualPipeV": "dualpipe-v",
}
_GREEDY = {"half": "v-half", "min": "v-min"}
#: our schema's keys -> Primus' (for naming the key the user wrote in an error)
_RUN_KEYS = {"name": "name", "pp": "pp_size", "vpp": "vpp_size", "micro_batches": "micro_batches"}
_COST_KEYS = {"forward": "fwd_time", "backward": "bwd_time", "wgrad": "wgrad_time", "comm": "comm_time"}


def native_key_to_primus(key: str) -> str:
    """`runs[2].pp` -> `schedulers[2].pp_size`, `costs.forward` -> `fwd_time`: the key as a Primus config
    spells it."""
    run = re.fullmatch(r"runs\[(\d+)\]\.(\w+)(.*)", key)
    if run and run.group(2) in _RUN_KEYS:
        return f"schedulers[{run.group(1)}].{_RUN_KEYS[run.group(2)]}{run.group(3)}"
    cost = re.fullmatch(r"costs\.(\w+)(.*)", key)
    if cost and cost.group(1) in _COST_KEYS:
        return f"{_COST_KEYS[cost.group(1)]}{cost.group(2)}"
    return key


def is_primus(data: Any) -> bool:
    return isinstance(data, dict) and "schedulers" in data


def _algorithm(entry: dict, where: str) -> str:
    path = str(entry.get("class", ""))
    cls = path.rsplit(".", 1)[-1]
    if cls == "ScheduleZBVGreedy":
        mode = entry.get("memory_config", "half")
        if mode not in _GREEDY:
            raise ConfigError(
                f"{where}.memory_config={mode!r} (allowed: {', '.join(_GREEDY)})", key="memory_config"
            )
        return _GREEDY[mode]
    if cls not in _CLASSES:
        known = ", ".join([*_CLASSES, "ScheduleZBVGreedy"])
        raise ConfigError(
            f"{where}.class={path!r}: unknown Primus scheduler class (known: {known})", key="class"
        )
    return _CLASSES[cls]


def to_native(data: dict, source: str) -> dict:
    """Translate a Primus config mapping into our SimulationConfig mapping."""
    for key in data:
        if key not in TOP_KEYS:
            raise ConfigError(f"{source}: unknown key '{key}' (allowed: {', '.join(TOP_KEYS)})", key=key)
    costs = {}
    for ours, theirs in (
        ("forward", "fwd_time"),
        ("backward", "bwd_time"),
        ("wgrad", "wgrad_time"),
        ("comm", "comm_time"),
    ):
        if theirs in data:
            costs[ours] = data[theirs]
    schedulers = data.get("schedulers")
    if not isinstance(schedulers, list) or not schedulers:
        raise ConfigError(f"{source}: 'schedulers' must be a non-empty list", key="schedulers")
    runs = []
    for i, entry in enumerate(schedulers):
        where = f"{source}: schedulers[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping", key="schedulers")
        for key in entry:
            if key not in SCHEDULER_KEYS:
                raise ConfigError(
                    f"{where}: unknown key '{key}' (allowed: {', '.join(SCHEDULER_KEYS)})", key=key
                )
        if "class" not in entry:
            raise ConfigError(f"{where}: missing key 'class'", key="class")
        if "name" in entry and (problem := run_name_problem(entry["name"])):
            key = f"schedulers[{i}].name"
            raise ConfigError(f"{source}: {key}={entry['name']!r}: {problem}", key=key)
        params = {k: entry[k] for k in ("cost_f", "cost_b", "cost_w", "cost_comm", "max_mem") if k in entry}
        run = {"algorithm": _algorithm(entry, where), "params": params}
        for ours, theirs in (
            ("name", "name"),
            ("pp", "pp_size"),
            ("vpp", "vpp_size"),
            ("micro_batches", "micro_batches"),
        ):
            if theirs in entry:
                run[ours] = entry[theirs]
        runs.append(run)
    native: dict[str, Any] = {"costs": costs, "runs": runs}
    if "output_dir" in data:
        native["output_dir"] = data["output_dir"]
    return native
