"""Upper bounds on what a run may ask for, and the node-count estimate checked before a table is built.

A table, its simulation and its written result take about 330-410 bytes per node (tracemalloc peak and
RSS of `simulate` plus writing the result, measured on 1f1b, zero-bubble, zbv, 1f1b-interleaved and
dualpipe-v with p=16-32, m=256-512). DEFAULT_MAX_NODES = 10 million nodes keeps one command near 4 GiB,
well inside a 24 GiB machine; `--max-nodes` raises or lowers it. `simulate --pp 4096 --mb 65536` would need
about 1.9 billion nodes (~700 GiB) and is refused at once instead of growing until the machine swaps.
"""

from __future__ import annotations

import math

from primuspp.errors import ConfigError

#: pipeline ranks p
MAX_PP = 65_536
#: chunks per rank v
MAX_VPP = 1_024
#: microbatches per iteration m
MAX_MB = 1_048_576
#: a planned run's GPUs, and any group of them (TP, CP, EP)
MAX_GPUS = 1_048_576
#: tokens per sequence, and per microbatch (micro-batch size x sequence length); sequences per step
MAX_TOKENS = 16_777_216
#: a model's layers and experts (each a loop or a table row), and its widths (hidden, MLP, heads, vocabulary)
MAX_LAYERS = 16_384
MAX_WIDTH = 16_777_216
#: the size flags of a model run, bounded before any work (`bounded_int`)
SIZE_FLAGS = {
    **dict.fromkeys(("--gpus", "--tp", "--cp", "--ep"), MAX_GPUS),
    **dict.fromkeys(("--seq-len", "--micro-batch-size", "--global-batch-size"), MAX_TOKENS),
    **dict.fromkeys(
        ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"), MAX_LAYERS
    ),
    "--pp": MAX_PP,
    "--vpp": MAX_VPP,
}
#: a cost (time, activation, bytes, bandwidth) in a config or flag; sums of millions stay finite
MAX_COST = 1e15
#: `--mem-limit` / `mem_limit` in microbatch units (an algorithm's memory floor is at most a few x p x v)
MAX_MEM_LIMIT = 1e9
#: nodes (compute + p2p) one command may build in all, by default
DEFAULT_MAX_NODES = 10_000_000
#: measured bytes per node (see the module docstring), for the size shown in messages
BYTES_PER_NODE = 400

#: stages a microbatch visits, by placement kind: (pp, vpp) -> route length
_ROUTE = {
    "linear": lambda p, v: p,
    "loop": lambda p, v: p * v,
    "v": lambda p, v: 2 * p,
    "bidirectional": lambda p, v: p,
}


def estimate_nodes(placement: str, pp: int, vpp: int, micro_batches: int) -> int:
    """An upper estimate of a lowered table's nodes: per microbatch and visited stage an F, a B and a W, and
    per hop a SEND and a RECV each way (exact for zero-bubble; 1f1b and dualpipe have ~15-30% fewer)."""
    route = _ROUTE.get(placement, _ROUTE["loop"])(pp, vpp)
    return micro_batches * (3 * route + 4 * max(route - 1, 0))


def bounded_int(value: int, key: str, low: int = 1, high: int | None = None, why: str = "") -> int:
    """`value` if it is an integer (not a bool) from `low` to `high` (default: `SIZE_FLAGS[key]`); otherwise
    one line naming `key` (a flag as `--key VALUE`, a file's key as `key=VALUE`), the range and `why`."""
    high = SIZE_FLAGS[key] if high is None else high
    if type(value) is not int or not low <= value <= high:
        shown = f"{key} {value}" if key.startswith("-") else f"{key}={value!r}"
        raise ConfigError(f"{shown}: expected an integer from {low:,} to {high:,}{why}", key=key)
    return value


def finite_cost(
    value: float, key: str, *, low: float = 0.0, high: float = MAX_COST, open_low: bool = False
) -> float:
    """`value` if it is a finite number in [low, high] ((low, high] with `open_low`); otherwise one line."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    below = number <= low if open_low else number < low
    if not math.isfinite(number) or below or number > high:
        relation = ">" if open_low else "≥"
        shown = (
            f"{key} {value:g}"
            if key.startswith("--") and isinstance(value, float | int)
            else f"{key}={value!r}"
        )
        raise ConfigError(
            f"{shown}: expected a finite number {relation} {low:g} and ≤ {high:g}", key=key.lstrip("-")
        )
    return number


def check_nodes(
    described: str, estimate: int, max_nodes: int, *, total: bool = False, flag: bool = True
) -> None:
    """Refuse a run (or, with `total`, a command's runs together) estimated over `max_nodes` nodes.
    `flag`: the limit came from (or defaults) `--max-nodes`; otherwise it is the built-in default (train)."""
    if estimate <= max_nodes:
        return
    size = estimate * BYTES_PER_NODE
    shown = f"{size / 2**30:,.1f} GiB" if size >= 2**30 else f"{size / 2**20:,.0f} MiB"
    what = "together need" if total else "needs"
    raise ConfigError(
        f"{described} {what} an estimated {estimate:,} nodes (compute + p2p, ~{shown}), over "
        + (
            f"--max-nodes={max_nodes:,}: lower --pp, --vpp or --mb, or raise --max-nodes"
            if flag
            else f"the limit of {max_nodes:,} nodes: lower --pp, --vpp or --mb"
        ),
        key="max-nodes",
    )
