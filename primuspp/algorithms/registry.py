"""The algorithm registry: every algorithm's record (names, placement, allowed v, the refusal, parameters,
memory class) and `build_schedule`, the one way to get a validated ScheduleTable from an algorithm name.
Listing, checking and refusing import no generator: its module is imported when the algorithm is built."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from primuspp.algorithms.base import Algorithm, GenerationRequest, Param, boolean
from primuspp.algorithms.effort import EFFORT
from primuspp.errors import ConfigError, ScheduleError, ValidationError
from primuspp.inputs import parse_json, read_text
from primuspp.schedule.costs import CostModel
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

FILE_PREFIX = "file:"
_PKG = "primuspp.algorithms."


def _v1(v: int) -> bool:
    return v == 1


def _v2(v: int) -> bool:
    return v == 2


def _refuse_interleaved(p: int, v: int, m: int, params: dict[str, Any]) -> str | None:
    if m < p:
        return (
            f"1f1b-interleaved: megatron-core needs micro_batches >= pp={p} (got {m}); "
            "1f1b-interleaved-padded runs it"
        )
    n = params.get("group_size")
    if n is None:
        return None
    from primuspp.algorithms.classic.interleaved import group_refusal  # no numpy at import

    return group_refusal(p, m, n)


def _refuse_max_mem(name: str, needs: str):
    def refuse(p: int, v: int, m: int, params: dict[str, Any]) -> str | None:
        value = params.get("max_mem")
        if value is not None and value < 1:
            return f"{name}: max_mem={value:g} is below one microbatch per rank ({needs})"
        return None

    return refuse


_refuse_heuristic = _refuse_max_mem("zero-bubble-heuristic", "needs max_mem >= 1")


def _refuse_optimal(p: int, v: int, m: int, params: dict[str, Any]) -> str | None:
    reason = _refuse_heuristic(p, v, m, params)
    if reason:
        return reason.replace("zero-bubble-heuristic", "zb-optimal")
    if not solver_available():
        return "zb-optimal needs the HiGHS solver: pip install 'primuspp[optimal]' (highspy)"
    if params.get("time_limit", 10.0) <= 0:
        return f"zb-optimal: time_limit={params['time_limit']:g} must be > 0 seconds"
    return None


def solver_available() -> bool:
    """Whether zb-optimal's HiGHS solver (the 'optimal' extra) is installed."""
    try:
        import highspy  # noqa: F401
    except ImportError:
        return False
    return True


def _refuse_dualpipe(p: int, v: int, m: int, params: dict[str, Any]) -> str | None:
    if p % 2:
        return f"dualpipe needs an even pp (got pp={p}): the two directions split the ranks in halves"
    if m % 2 or m < 2 * p:
        return f"dualpipe needs micro_batches even and >= 2*pp = {2 * p} (got {m})"
    return None


def _refuse_dualpipe_v(p: int, v: int, m: int, params: dict[str, Any]) -> str | None:
    return f"dualpipe-v needs micro_batches >= 2*pp = {2 * p} (got {m})" if m < 2 * p else None


_LINEAR = dict(placement="linear", vpp_default=1, vpp_rule="1", vpp_ok=_v1)
_ANY = "any p >= 1, m >= 1"
_LOOP = dict(placement="loop", vpp_default=2, vpp_rule=">= 2", vpp_ok=lambda v: v >= 2)
_V = dict(placement="v", vpp_default=2, vpp_rule="2", vpp_ok=_v2, uses_costs=True)
_OFFLOAD = Param("offload", boolean, False, "move chunk-0 activations to host between their F and B")
_HEURISTIC_PARAMS = (
    Param("max_mem", float, None, "per-rank activation cap in microbatch units (default p, 1F1B's peak)"),
    Param("cost_f", float, None, "planning forward time (default: the cost model's)"),
    Param("cost_b", float, None, "planning input-grad time (default: the cost model's)"),
    Param("cost_w", float, None, "planning weight-grad time (default: the cost model's)"),
    Param("cost_comm", float, None, "planning p2p latency (default: the cost model's)"),
    EFFORT,
)

#: every algorithm's record, in the order `primuspp algorithms` lists them; `generator` names the function
#: `build_schedule` calls (its module imported then)
ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            name="gpipe",
            aliases=(),
            summary="all forwards, then all backwards",
            memory="m",
            constraints=_ANY,
            generator=_PKG + "classic.gpipe:generate",
            **_LINEAR,
        ),
        Algorithm(
            name="1f1b",
            aliases=("basic-1f1b",),
            summary="one forward, one backward after p - r - 1 warm-up forwards",
            memory="p - rank",
            constraints=_ANY,
            generator=_PKG + "classic.one_f_one_b:generate",
            **_LINEAR,
        ),
        Algorithm(
            name="1f1b-interleaved",
            aliases=("interleaved", "interleaved-1f1b"),
            summary="Megatron's virtual-pipeline 1F1B, its order: microbatch groups of N, v chunks per rank",
            memory="N+(2p-1-N)/v",
            constraints="v >= 2, m >= p; group_size N: p <= N <= m, m mod N = 0 or >= p",
            generator=_PKG + "classic.interleaved:generate",
            refuse=_refuse_interleaved,
            params=(
                Param("group_size", int, None, "microbatch_group_size_per_vp_stage (default p or least)"),
            ),
            **_LOOP,
        ),
        Algorithm(
            name="1f1b-interleaved-padded",
            aliases=("interleaved-padded",),
            summary="interleaved 1F1B in groups of p at any m: the order for a multiple of p, extra ones "
            "dropped",
            memory="p + (p-1)/v",
            constraints="v >= 2, any m >= 1",
            generator=_PKG + "classic.interleaved:generate_padded",
            **_LOOP,
        ),
        Algorithm(
            name="zero-bubble",
            aliases=("zerobubble", "zb-h1", "zb1p"),
            summary="ZB-H1: 1F1B with B/W split, W delayed to fill bubbles at 1F1B's memory",
            memory="p",
            constraints=_ANY,
            generator=_PKG + "zero_bubble.zero_bubble:generate_floored",
            uses_costs=True,
            params=(EFFORT,),
            **_LINEAR,
        ),
        Algorithm(
            name="zb-h2",
            aliases=("zb2p", "zbh2", "zero-bubble-h2"),
            summary="ZB-H2: extra warm-up forwards, W fills the waits and the tail; zero bubble at 2p-1 "
            "memory",
            memory="2p - 1",
            constraints=_ANY,
            generator=_PKG + "zero_bubble.zb_h2:generate_floored",
            uses_costs=True,
            params=(EFFORT,),
            **_LINEAR,
        ),
        Algorithm(
            name="zero-bubble-heuristic",
            aliases=("zb-auto", "zb-heuristic", "zerobubble-heuristic"),
            summary="greedy search over the cost model under a per-rank activation cap (best of several "
            "policies)",
            memory="max_mem (default p)",
            constraints="any p >= 1, m >= 1, max_mem >= 1",
            generator=_PKG + "zero_bubble.zero_bubble_heuristic:generate_floored",
            refuse=_refuse_heuristic,
            params=_HEURISTIC_PARAMS,
            uses_costs=True,
            budget_param="max_mem",
            **_LINEAR,
        ),
        Algorithm(
            name="zb-optimal",
            aliases=("zb-milp", "zero-bubble-optimal"),
            summary="exact MILP of the heuristic's problem (HiGHS), warm-started; reports lower bound and "
            "gap",
            memory="max_mem (default p)",
            constraints="any p >= 1, m >= 1, max_mem >= 1; needs the 'optimal' extra (highspy)",
            generator=_PKG + "zero_bubble.zb_optimal:generate",
            refuse=_refuse_optimal,
            params=(*_HEURISTIC_PARAMS, Param("time_limit", float, 10.0, "solver time limit in seconds")),
            uses_costs=True,
            budget_param="max_mem",
            **_LINEAR,
        ),
        Algorithm(
            name="zbv",
            aliases=("zbv-formatted", "zb-v"),
            summary="zero-bubble V: two chunks per rank, B/W split, 1F1B's memory",
            memory="p",
            constraints="v = 2, any p >= 1, m >= 1",
            generator=_PKG + "v.family:generate_zbv",
            params=(_OFFLOAD, EFFORT),
            **_V,
        ),
        Algorithm(
            name="v-half",
            aliases=("vhalf", "zbv-half"),
            summary="V schedule at about half of 1F1B's activation memory",
            memory="floor((p+2)/2)",
            constraints="v = 2, any p >= 1, m >= 1",
            generator=_PKG + "v.family:generate_v_half",
            params=(_OFFLOAD, EFFORT),
            **_V,
        ),
        Algorithm(
            name="v-min",
            aliases=("vmin", "zbv-min"),
            summary="V schedule at about a third of 1F1B's activation memory",
            memory="floor((p+4)/3)",
            constraints="v = 2, any p >= 1, m >= 1",
            generator=_PKG + "v.family:generate_v_min",
            params=(_OFFLOAD, EFFORT),
            **_V,
        ),
        Algorithm(
            name="v-auto",
            aliases=("zbv-auto",),
            summary="V schedule for any activation budget (max_mem, microbatches per rank)",
            memory="max_mem (default p)",
            constraints="v = 2, any p >= 1, m >= 1, max_mem >= 1",
            generator=_PKG + "v.family:generate_v_auto",
            refuse=_refuse_max_mem("v-auto", "a V schedule needs max_mem >= 1"),
            params=(
                Param("max_mem", float, None, "per-rank activation budget in microbatch units (default p)"),
                _OFFLOAD,
                EFFORT,
            ),
            budget_param="max_mem",
            **_V,
        ),
        Algorithm(
            name="dualpipe",
            aliases=("dual-pipe",),
            placement="bidirectional",
            summary="DeepSeek DualPipe: two directions, forward/backward overlap (FB), 2x parameters",
            memory="p + 1 (and 2x parameters)",
            constraints="even p >= 2, m even and >= 2p",
            vpp_default=2,
            vpp_rule="2",
            vpp_ok=_v2,
            generator=_PKG + "dualpipe.dualpipe:generate_dualpipe",
            refuse=_refuse_dualpipe,
        ),
        Algorithm(
            name="dualpipe-v",
            aliases=("dualpipev", "dual-pipe-v"),
            placement="v",
            summary="DualPipe folded onto the V placement: one model copy, FB overlap",
            memory="p + 1 chunks",
            constraints="v = 2, any p >= 1, m >= 2p",
            vpp_default=2,
            vpp_rule="2",
            vpp_ok=_v2,
            generator=_PKG + "dualpipe.dualpipe:generate_dualpipe_v",
            refuse=_refuse_dualpipe_v,
        ),
    )
}
_ALIASES: dict[str, str] = {alias: a.name for a in ALGORITHMS.values() for alias in (a.name, *a.aliases)}
if len(_ALIASES) != sum(1 + len(a.aliases) for a in ALGORITHMS.values()):
    raise ValueError("an algorithm name or alias is registered twice")


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
    from primuspp.schedule.formats import from_csv, from_json_dict, from_text

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
