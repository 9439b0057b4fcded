"""Layer layouts: which transformer layers each model part (virtual stage) holds.

A layout is a tuple of layer counts, one per model part in model order (part 0 holds the embedding, the
last part the final norm, output layer and loss). Megatron's `--pipeline-model-parallel-layout` string
(`E` embedding, `t` a transformer layer, `L` the loss, `|` between virtual stages, `X*n` and `(...)*n`
repetition) and `--decoder-first/last-pipeline-num-layers` are parsed into one and emitted from one; the
balancer cuts the layers so that the slowest part is as fast as it can be.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from primuspp.errors import ConfigError

Layout = tuple[int, ...]

_REPEAT = re.compile(r"\(([^()]*)\)\*(\d{1,9})(?!\d)")
_ATOM = re.compile(r"([EtLm])\*(\d{1,9})(?!\d)")


def even_layout(layers: int, parts: int, key: str = "--layout") -> Layout:
    """Megatron's default: layers / parts each (an error when it does not divide)."""
    if layers % parts:
        raise ConfigError(f"{key} even: {layers} layers do not divide into {parts} pipeline stages", key=key)
    return (layers // parts,) * parts


def ends_layout(layers: int, parts: int, key: str = "--layout") -> Layout:
    """The embedding and the loss head counted as one layer each, the layers + 2 cut evenly, the first parts
    taking one more when it does not divide (`primuspp train --backend torch`'s cut; Megatron's
    --account-for-embedding/loss-in-pipeline-split when it divides). Layers per part."""
    if layers + 2 < parts:
        raise ConfigError(
            f"{key} even-ends: {layers} layers + embedding + head do not fill {parts} pipeline stages",
            key=key,
        )
    base, extra = divmod(layers + 2, parts)
    sizes = [base + (1 if i < extra else 0) for i in range(parts)]
    sizes[0] -= 1
    sizes[-1] -= 1
    if min(sizes) < 0 or (parts == 1 and sizes[0] != layers):
        raise ConfigError(f"{key} even-ends: cannot cut {layers} layers into {parts} stages", key=key)
    return tuple(sizes)


def _expand(text: str, key: str, limit: int) -> str:
    """Repetitions expanded from the inside out; refused once the text would outgrow `limit` symbols (more
    than any layout of the model holds), before it is built."""
    size, given = [len(text)], text if len(text) <= 60 else text[:57] + "..."

    def repeat(m: re.Match) -> str:
        size[0] += len(m.group(1)) * int(m.group(2)) - len(m.group(0))
        if size[0] > limit:
            raise ConfigError(f"{key} {given!r}: expands to over {limit:,} symbols", key=key)
        return m.group(1) * int(m.group(2))

    for _ in range(64):  # nested groups expand from the inside out
        new = _REPEAT.sub(repeat, text)
        if new == text:
            break
        text = new
    return _ATOM.sub(repeat, text)


def parse_layout(text: str, layers: int, parts: int, key: str = "--layout") -> Layout:
    """Megatron's layout string -> layer counts per part; it must name `parts` stages, E first, L last,
    and exactly `layers` transformer layers."""
    flat = _expand(text.replace(" ", "").replace(",", ""), key, 2 * (layers + parts) + 8)
    bad = set(flat) - set("EtL|")
    if bad:
        what = (
            "m (multi-token prediction) is not modelled" if "m" in bad else f"unknown symbols {sorted(bad)}"
        )
        raise ConfigError(f"{key} {text!r}: {what}; use E, t, L, |, X*n and (...)*n", key=key)
    stages = flat.split("|")
    if flat.endswith("|") and len(stages) == parts + 1 and stages[-1] == "":
        stages = stages[:-1]
    if len(stages) != parts:
        raise ConfigError(
            f"{key} {text!r}: names {len(stages)} stages, the schedule has {parts} (pp x vpp model parts)",
            key=key,
        )
    counts = []
    for i, stage in enumerate(stages):
        body = stage
        if i == 0:
            if not body.startswith("E"):
                raise ConfigError(
                    f"{key} {text!r}: the first stage must start with E (the embedding)", key=key
                )
            body = body[1:]
        if i == parts - 1:
            if not body.endswith("L"):
                raise ConfigError(f"{key} {text!r}: the last stage must end with L (the loss)", key=key)
            body = body[:-1]
        if set(body) - {"t"}:
            raise ConfigError(
                f"{key} {text!r}: stage {i} {stage!r}: E only opens the first stage, L only closes the last",
                key=key,
            )
        counts.append(len(body))
    if sum(counts) != layers:
        raise ConfigError(
            f"{key} {text!r}: holds {sum(counts)} transformer layers, the model has {layers}", key=key
        )
    return tuple(counts)


def emit_layout(layout: Sequence[int]) -> str:
    """The Megatron layout string of `layout` (e.g. `Et*3|t*4|t*4|t*3L`)."""
    out = []
    for i, n in enumerate(layout):
        body = "" if n == 0 else ("t" if n == 1 else f"t*{n}")
        out.append(("E" if i == 0 else "") + body + ("L" if i == len(layout) - 1 else ""))
    return "|".join(out)


def first_last_layout(layers: int, parts: int, first: int | None, last: int | None, vpp: int = 1) -> Layout:
    """`--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers` (loop placements):
    the first (last) pipeline rank holds `first` (`last`) layers split evenly over its `vpp` chunks, the
    other ranks the rest evenly."""
    pp = parts // vpp
    key = "--decoder-first-pipeline-num-layers"
    for value in (first, last):
        if value is not None and value < 1:
            raise ConfigError(f"{key} / --decoder-last-pipeline-num-layers {value}: must be >= 1", key=key)
    rank_layers = [None] * pp
    if first is not None:
        rank_layers[0] = first
    if last is not None:
        rank_layers[-1] = last
    fixed = [n for n in rank_layers if n is not None]
    if pp == 1 and first is not None and last is not None and first != last:
        raise ConfigError(
            "--decoder-last-pipeline-num-layers: with pp=1 it must equal the first", key="layout"
        )
    rest_ranks = sum(n is None for n in rank_layers)
    rest = layers - sum(fixed)
    if rest < 0 or (rest_ranks and rest % rest_ranks) or (not rest_ranks and rest):
        raise ConfigError(
            f"--decoder-first/last-pipeline-num-layers {first}/{last}: the other {rest_ranks} ranks cannot "
            f"hold the remaining {rest} of {layers} layers evenly",
            key=key,
        )
    per_rank = [n if n is not None else rest // rest_ranks for n in rank_layers]
    for r, n in enumerate(per_rank):
        if n % vpp:
            raise ConfigError(
                f"layout: rank {r}'s {n} layers do not split over vpp={vpp} chunks", key="layout"
            )
    # loop placement: part c*pp + r is chunk c of rank r
    return tuple(per_rank[s % pp] // vpp for s in range(parts))


def balance(layer_costs: Sequence[float], parts: int, first_extra: float, last_extra: float) -> Layout:
    """Contiguous cut of layers (costs `layer_costs`) into `parts` non-empty parts minimising the largest
    part's cost, with `first_extra` added to part 0 and `last_extra` to the last (embedding, head + loss).
    Binary search on the bottleneck with a greedy check: exact up to the search tolerance."""
    n = len(layer_costs)
    if parts > n:
        raise ConfigError(f"layout: {parts} pipeline stages for {n} layers (each needs one)", key="layout")

    def cut(limit: float) -> list[int] | None:
        counts, load, i = [], first_extra, 0
        for p in range(parts):
            extra_end = last_extra if p == parts - 1 else 0.0
            start = i
            load = (first_extra if p == 0 else 0.0) + extra_end
            # at least one layer; leave at least one for each later part
            while i < n - (parts - 1 - p) and (i == start or load + layer_costs[i] <= limit):
                load += layer_costs[i]
                i += 1
            if load > limit:
                return None
            counts.append(i - start)
        return counts if i == n else None

    lo = max(max(layer_costs), first_extra, last_extra)
    hi = (sum(layer_costs) + first_extra + last_extra) * (1 + 1e-9)  # summation order: a hair of slack
    best = cut(hi)
    for _ in range(50):
        mid = (lo + hi) / 2
        counts = cut(mid)
        if counts is None:
            lo = mid
        else:
            hi, best = mid, counts
        if hi - lo <= 1e-9 * hi:
            break
    assert best is not None
    # the greedy cut fills early parts up to the bottleneck; a second pass aims each part at the average of
    # what remains (same bottleneck, spread evenly) and is kept when it is no worse
    even = _even_cut(layer_costs, parts, first_extra, last_extra, hi)
    return tuple(even if even is not None else best)


def _even_cut(
    costs: Sequence[float], parts: int, first: float, last: float, limit: float
) -> list[int] | None:
    n, i, counts = len(costs), 0, []
    remaining = sum(costs) + first + last
    for p in range(parts):
        load = (first if p == 0 else 0.0) + (last if p == parts - 1 else 0.0)
        target = remaining / (parts - p)
        start = i
        while i < n - (parts - 1 - p):
            c = costs[i]
            if i > start and (load + c > limit * (1 + 1e-9) or load + c / 2 > target):
                break
            load += c
            i += 1
        if p == parts - 1 and i < n:
            return None
        if load > limit * (1 + 1e-9):
            return None
        remaining -= load
        counts.append(i - start)
    return counts
