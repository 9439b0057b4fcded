"""The algorithm registry: names and aliases to generators, and `build_schedule`, the one way to get a
validated ScheduleTable from an algorithm name."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from primuspp.algorithms.base import Algorithm, GenerationRequest
from primuspp.algorithms.classic import gpipe, interleaved, one_f_one_b
from primuspp.algorithms.dualpipe import dualpipe
from primuspp.algorithms.v import family as v_family
from primuspp.algorithms.zero_bubble import zb_h2 as zero_bubble_h2
from primuspp.algorithms.zero_bubble import zb_optimal as optimal
from primuspp.algorithms.zero_bubble import zero_bubble
from primuspp.algorithms.zero_bubble import zero_bubble_heuristic as heuristic
from primuspp.errors import ConfigError, ScheduleError, ValidationError
from primuspp.inputs import parse_json, read_text
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import from_csv, from_json_dict, from_text
from primuspp.schedule.limits import (
    DEFAULT_MAX_NODES,
    MAX_COST,
    MAX_MB,
    MAX_PP,
    MAX_VPP,
    check_nodes,
    estimate_nodes,
)
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from primuspp.suggest import did_you_mean

ALGORITHMS: dict[str, Algorithm] = {}
_ALIASES: dict[str, str] = {}
FILE_PREFIX = "file:"


def register(algorithm: Algorithm) -> None:
    for name in (algorithm.name, *algorithm.aliases):
        if name in _ALIASES:
            raise ValueError(f"algorithm name {name!r} registered twice")
        _ALIASES[name] = algorithm.name
    ALGORITHMS[algorithm.name] = algorithm


for _algorithm in (
    gpipe.ALGORITHM,
    one_f_one_b.ALGORITHM,
    *interleaved.ALGORITHMS,
    *(m.ALGORITHM for m in (zero_bubble, zero_bubble_h2, heuristic, optimal)),
    *v_family.ALGORITHMS,
    *dualpipe.ALGORITHMS,
):
    register(_algorithm)


def algorithm_names() -> list[str]:
    return list(ALGORITHMS)


def get_algorithm(name: str) -> Algorithm:
    canonical = _ALIASES.get(name.strip().lower())
    if canonical is None:
        raise ScheduleError(
            f"unknown algorithm {name!r}{did_you_mean(name, ALGORITHMS, _ALIASES)} "
            f"(allowed: {', '.join(ALGORITHMS)}, or file:PATH)",
            key="algorithm",
        )
    return ALGORITHMS[canonical]


def refusal(
    algorithm: str, pp: int | None, vpp: int | None, micro_batches: int | None, params: dict[str, Any]
) -> str | None:
    """The one-line reason `algorithm` refuses these sizes (its own domain rule, e.g. dualpipe's m >= 2p),
    or None: sweeps skip and list what this names, `build_schedule` raises the same reason. Input errors
    (bad v, bad parameters, p or m below 1) are not refusals: `build_schedule` reports them."""
    if algorithm.startswith(FILE_PREFIX) or pp is None or micro_batches is None:
        return None
    if pp < 1 or micro_batches < 1:
        return None
    algo = get_algorithm(algorithm)
    vpp = algo.vpp_default if vpp is None else vpp
    if not algo.vpp_ok(vpp):
        return None
    return algo.refuse(pp, vpp, micro_batches, _resolve_params(algo, params)) or None


def resolve_name(name: str) -> str:
    """Canonical registry name of `name`, or `name` itself for file: tables."""
    return name if name.startswith(FILE_PREFIX) else get_algorithm(name).name


def build_schedule(
    algorithm: str,
    pp: int | None = None,
    vpp: int | None = None,
    micro_batches: int | None = None,
    costs: CostModel | None = None,
    *,
    max_nodes: int | None = None,
    **params: Any,
) -> ScheduleTable:
    """Generate, lower and validate a schedule, or raise ScheduleError with a one-line reason.

    p, v and m are bounded (schedule.limits) and the table's estimated node count must stay within
    `max_nodes` (default DEFAULT_MAX_NODES), checked before anything is generated."""
    if algorithm.startswith(FILE_PREFIX):
        return load_table(algorithm[len(FILE_PREFIX) :], pp, vpp, micro_batches)
    algo = get_algorithm(algorithm)
    if pp is None or micro_batches is None:
        raise ScheduleError(f"{algo.name}: pp and micro_batches are required", key="pp")
    if pp < 1:
        raise ScheduleError(f"pp must be >= 1 (got {pp})", key="pp")
    if micro_batches < 1:
        raise ScheduleError(f"micro_batches must be >= 1 (got {micro_batches})", key="micro_batches")
    vpp = algo.vpp_default if vpp is None else vpp
    for key, value, high in (
        ("pp", pp, MAX_PP),
        ("vpp", vpp, MAX_VPP),
        ("micro_batches", micro_batches, MAX_MB),
    ):
        if not 1 <= value <= high:
            raise ScheduleError(f"{key}={value}: expected an integer from 1 to {high:,}", key=key)
    if not algo.vpp_ok(vpp):
        raise ScheduleError(f"vpp={vpp} is not allowed for {algo.name} (allowed: {algo.vpp_rule})", key="vpp")
    check_nodes(
        f"{algo.name} with pp={pp}, vpp={vpp}, micro_batches={micro_batches}",
        estimate_nodes(algo.placement, pp, vpp, micro_batches),
        DEFAULT_MAX_NODES if max_nodes is None else max_nodes,
        flag=max_nodes is not None,
    )
    resolved = _resolve_params(algo, params)
    reason = algo.refuse(pp, vpp, micro_batches, resolved)
    if reason:
        raise ScheduleError(reason, key="micro_batches")
    costs = costs or CostModel()
    placement = make_placement(algo.placement, pp, vpp)
    request = GenerationRequest(pp, vpp, micro_batches, costs, resolved)
    order = algo.generate(request)
    ranks = lower_comms(placement, micro_batches, order)
    info = {**resolved, "report": request.report} if request.report else resolved
    table = ScheduleTable(placement, micro_batches, ranks, algo.name, info)
    try:
        validate(table)
    except ValidationError as err:  # a generator bug, not a user error: say so
        raise ValidationError(
            f"{algo.name} produced an invalid table for pp={pp}, vpp={vpp}, "
            f"micro_batches={micro_batches}: {err}"
        ) from None
    return table


def _resolve_params(algo: Algorithm, params: dict[str, Any]) -> dict[str, Any]:
    known = {p.name: p for p in algo.params}
    resolved = {}
    for key, value in params.items():
        if value is None:
            continue
        if key not in known:
            allowed = ", ".join(known) or "none"
            raise ScheduleError(f"{algo.name}: unknown parameter {key!r} (allowed: {allowed})", key=key)
        spec = known[key]
        try:
            value = spec.type(value)
        except (TypeError, ValueError):
            raise ScheduleError(
                f"{algo.name}: parameter {key}={value!r} must be {spec.type.__name__}", key=key
            ) from None
        if isinstance(value, float) and not abs(value) <= MAX_COST:  # NaN, inf, 1e308 (doubles to inf)
            raise ScheduleError(
                f"{algo.name}: parameter {key}={value!r} must be a finite number of magnitude ≤ {MAX_COST:g}",
                key=key,
            )
        if spec.choices and value not in spec.choices:
            choices = ", ".join(map(str, spec.choices))
            raise ScheduleError(f"{algo.name}: {key}={value!r} not allowed (allowed: {choices})", key=key)
        resolved[key] = value
    for spec in algo.params:
        resolved.setdefault(spec.name, spec.default)
    return {k: v for k, v in resolved.items() if v is not None}


def load_table(
    path: str | Path, pp: int | None = None, vpp: int | None = None, micro_batches: int | None = None
) -> ScheduleTable:
    """Read a table as `primuspp dump` writes it (text, JSON, or torch's compute_only CSV) and validate it.
    A compute-only order (no SEND/RECV nodes: torch's CSV, sail-sg's and Primus' exports) is lowered first.

    The file goes through primuspp.inputs: a regular file (a FIFO is refused, not waited on) of at most
    MAX_INPUT_BYTES, UTF-8, JSON without NaN/Infinity and nested at most MAX_NESTING deep."""
    path = Path(path)
    where = f"file:{path}"
    try:
        text = read_text(path)
    except ConfigError as err:  # "PATH: not a regular file ..." -> "file:PATH: ..."
        raise ConfigError(f"file:{err}", key="algorithm") from None
    if text.lstrip()[:1] in ("{", "["):
        table = from_json_dict(parse_json(text, where, "algorithm"), where)
    else:
        try:
            table = from_text(text) if text.startswith("# primuspp schedule") else from_csv(text, where)
        except (ValidationError, ScheduleError) as err:
            raise ValidationError(f"{where}: {str(err).removeprefix(where + ': ')}") from None
    try:
        if not any(n.kind.is_comm for nodes in table.ranks for n in nodes):
            table = replace(table, ranks=lower_comms(table.placement, table.num_microbatches, table.ranks))
        validate(table)
    except ValidationError as err:
        raise ValidationError(f"{where}: {err}") from None
    for key, given, actual in (
        ("pp", pp, table.pp),
        ("vpp", vpp, table.vpp),
        ("micro_batches", micro_batches, table.num_microbatches),
    ):
        if given is not None and given != actual:
            raise ScheduleError(f"file:{path}: table has {key}={actual}, asked for {given}", key=key)
    return table
