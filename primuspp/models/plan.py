"""The planner's sweep: every admissible TP x CP x PP x VPP x EP x micro-batch size x algorithm for a model
on N GPUs, each projected (`project`), ranked by tokens/s per GPU among those that fit; the rest counted by
why they were dropped."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from primuspp.algorithms.registry import get_algorithm, refusal
from primuspp.errors import ConfigError, ScheduleError, ValidationError
from primuspp.models.hardware import Hardware, gib
from primuspp.models.memory import state_bytes
from primuspp.models.parallel import Parallel, check_parallel
from primuspp.models.project import Projection, one_microbatch_peak, placement_for, project, stage_plan
from primuspp.models.spec import ModelSpec

#: Algorithms swept by default: one of each family a user would run (the searching planners — zb-h2,
#: zero-bubble-heuristic, zb-optimal — are slower; name them with --algo).
DEFAULT_ALGORITHMS = ("1f1b", "1f1b-interleaved", "zero-bubble", "zbv", "v-half", "v-min", "dualpipe-v")
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4)
INTERLEAVED_VPP = (2, 3, 4)
#: Context-parallel sizes swept by default (those that cut the sequence into 2 x CP equal chunks and divide
#: the GPUs left by TP x PP).
DEFAULT_CP = (1, 2, 4, 8)

#: the one candidate of each PP 1 configuration: no pipeline, so no schedule to choose (it runs 1F1B's order,
#: each microbatch's forward then its backward: the least memory), named NO_PIPELINE in what is shown
PP1_ALGORITHM = "1f1b"
NO_PIPELINE = "none (pp1)"
#: throughputs within this fraction of a better one tie with it; a tie is broken toward less memory
TIE = 0.01

NOT_DIVISIBLE = "not divisible"
REFUSED = "refused by the algorithm"
NO_FIT = "does not fit"


@dataclass(frozen=True)
class Candidate:
    algorithm: str
    par: Parallel
    gpus: int

    def __str__(self) -> str:
        p = self.par
        cp = f" cp{p.cp}" if p.cp > 1 else ""
        text = f"{shown(self.algorithm, p.pp)} tp{p.tp}{cp} pp{p.pp} vpp{p.vpp} ep{p.ep} dp{p.dp}"
        text += f" mbs{p.micro_batch_size}"
        return text if p.recompute == "none" else f"{text} recompute={p.recompute}"


@dataclass
class PlanResult:
    evaluated: int = 0
    fits: list[Projection] = field(default_factory=list)
    no_fit: list[Projection] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # one message per reason

    def ranked(self, include_unfit: bool = False) -> list[Projection]:
        """Best first: those that fit, or (`include_unfit`) every projected one (`ties`, flattened)."""
        return [p for tie in self.ties(include_unfit) for p in tie]

    def ties(self, include_unfit: bool = False) -> list[list[Projection]]:
        """By tokens/s per GPU, best first, in groups: the best left and those within TIE of it, ordered by
        peak memory (a tie is broken toward less memory)."""
        pool = sorted(self.fits + self.no_fit if include_unfit else self.fits, key=_rate, reverse=True)
        out = []
        while pool:
            n = next((i for i, p in enumerate(pool) if _rate(p) < _rate(pool[0]) * (1 - TIE)), len(pool))
            out.append(sorted(pool[:n], key=lambda p: p.peak_memory_bytes))
            pool = pool[n:]
        return out


def _rate(p: Projection) -> float:
    return p.tokens_per_s_per_gpu


def shown(algorithm: str, pp: int) -> str:
    """The schedule as tables and pages name it: NO_PIPELINE at PP 1."""
    return NO_PIPELINE if pp == 1 else algorithm


def _divisors(n: int) -> list[int]:
    """The divisors of `n`, ascending (trial division up to its square root)."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def candidates(
    spec: ModelSpec,
    hw: Hardware,
    gpus: int,
    base: Parallel,
    algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
    tps: Sequence[int] | None = None,
    pps: Sequence[int] | None = None,
    vpps: Sequence[int] | None = None,
    eps: Sequence[int] | None = None,
    micro_batch_sizes: Sequence[int] = DEFAULT_MICRO_BATCH_SIZES,
    cps: Sequence[int] | None = None,
) -> list[Candidate]:
    """Every combination to evaluate (admissibility is checked when evaluated, so that refusals count).
    TP: powers of two within a node; PP: divisors of gpus / TP up to the layer count; CP: 1, 2, 4, 8 where
    the sequence splits into 2 x CP chunks and TP x CP x PP divides the GPUs (not CP 2c with micro-batch
    size 2k when c, k is swept: `_halved`); EP: powers of two dividing the experts (MoE only); VPP: the
    algorithm's (interleaved: 2, 3, 4). PP 1 has no pipeline: one candidate (PP1_ALGORITHM), whatever the
    algorithms."""
    tps = tps or [t for t in (1, 2, 4, 8, 16) if t <= hw.gpus_per_node and gpus % t == 0]
    eps = eps or ([e for e in (1, 2, 4, 8, 16, 32, 64) if e <= spec.experts] if spec.moe else [1])
    cp_given = bool(cps)
    cps = cps or [c for c in DEFAULT_CP if c == 1 or base.seq_len % (2 * c) == 0]
    out = []

    def add(algorithm: str, tp: int, pp: int, algo_vpps: Sequence[int]) -> None:
        for cp in cps:
            # 0: TP x CP x PP does not divide the GPUs (counted as not divisible when evaluated)
            dp = gpus // (tp * cp * pp) if gpus % (tp * cp * pp) == 0 else 0
            if dp == 0 and cp > 1 and not cp_given:
                continue
            for vpp in algo_vpps:
                for ep in eps:
                    for mbs in micro_batch_sizes:
                        if not cp_given and _halved(cp, mbs, cps, micro_batch_sizes):
                            continue
                        par = replace(base, tp=tp, cp=cp, pp=pp, dp=dp, vpp=vpp, ep=ep, micro_batch_size=mbs)
                        out.append(Candidate(algorithm, par, gpus))

    pp_sizes = {tp: pps or [d for d in _divisors(gpus // tp or 1) if d <= spec.layers] for tp in tps}
    for algorithm in algorithms:
        algo = get_algorithm(algorithm)
        if vpps:
            algo_vpps = [v for v in vpps if algo.vpp_ok(v)]
        elif algo.placement == "loop" and algo.vpp_ok(2):
            algo_vpps = [v for v in INTERLEAVED_VPP if algo.vpp_ok(v)]
        else:
            algo_vpps = [algo.vpp_default]
        for tp in tps:
            for pp in pp_sizes[tp]:
                if pp > 1:
                    add(algo.name, tp, pp, algo_vpps)
    for tp in tps:
        if 1 in pp_sizes[tp]:
            add(PP1_ALGORITHM, tp, 1, [1])
    return out


def _halved(cp: int, mbs: int, cps: Sequence[int], micro_batch_sizes: Sequence[int]) -> bool:
    """CP 2c with micro-batch size 2k is CP c with micro-batch size k on twice the ranks: the same tokens
    per rank, microbatch count (DP halves), memory and gradient group, and a longer ring: never faster.
    True when the sweep has (c, k) too, so (2c, 2k) need not be evaluated."""
    return cp > 1 and mbs % 2 == 0 and cp // 2 in cps and mbs // 2 in micro_batch_sizes


def _cannot_fit(spec: ModelSpec, hw: Hardware, par: Parallel) -> bool:
    """Weights + gradients + optimizer state of the average rank alone exceed HBM: no rank layout fits."""
    expert = spec.moe_layers * spec.experts * spec.mlp_params(spec.expert_ffn)
    dense = (spec.parameters - expert) / (par.tp * par.pp)
    experts = expert / (par.tp * par.ep * par.pp)
    return state_bytes(dense, experts, par).total + hw.reserved_bytes > hw.hbm_bytes


#: a sweep this small runs in the calling process whatever `jobs` says (starting workers costs more)
MIN_PARALLEL = 64
CHUNK = 8


def evaluate(
    spec: ModelSpec,
    hw: Hardware,
    items: Iterable[Candidate],
    layout: str = "balanced",
    on_each: Callable[[Candidate], None] | None = None,
    first_last: tuple[int | None, int | None] | None = None,
    project_unfit: bool = False,
    jobs: int = 1,
) -> PlanResult:
    """Project every candidate, or drop it with its reason. A candidate whose TP x CP x PP does not divide
    the GPUs is dropped first; one that cannot fit whatever the schedule (its state alone, or with one
    microbatch in flight, exceeds HBM: `one_microbatch_peak`) is dropped before its schedule is built,
    unless `project_unfit` (plan --all, which ranks those too). `jobs` > 1: evaluated in that many forked
    processes, in chunks grouped by schedule table, merged in the candidates' order (the same result as one
    process; `on_each` then sees them as they finish)."""
    items = list(items)
    todo = [(i, c) for i, c in enumerate(items) if c.par.dp]  # the others divide no GPUs: nothing to group
    args = (spec, hw, layout, first_last, project_unfit)
    run = _evaluate_parallel if jobs > 1 and len(todo) >= MIN_PARALLEL else _evaluate
    done = dict(run(args, todo, on_each, jobs))
    result = PlanResult()
    for i, cand in enumerate(items):  # in the candidates' order: the same result in either mode
        if i not in done and on_each is not None:
            on_each(cand)
        _add(result, done[i] if i in done else _not_dividing(cand))
    _refine(spec, hw, result, layout, first_last, project_unfit)
    return result


#: the sweep builds every table with its algorithm's fast search (`effort="fast"`: the preferred candidate
#: only); the REFINE_TOP best projections are then built again with the default search (`effort="auto"`:
#: every candidate and the cost-aware refinement up to a size), and each keeps the better of the two
REFINE_TOP = 30


def sweep_params(algorithm: str) -> dict[str, Any] | None:
    """The parameters the sweep builds `algorithm`'s tables with: its fast search where it has a choice."""
    return {"effort": "fast"} if any(p.name == "effort" for p in get_algorithm(algorithm).params) else None


def _refine(
    spec: ModelSpec,
    hw: Hardware,
    result: PlanResult,
    layout: str,
    first_last: tuple[int | None, int | None] | None,
    project_unfit: bool,
) -> None:
    for old in result.ranked(project_unfit)[:REFINE_TOP]:
        if sweep_params(old.algorithm) is None:
            continue  # built with its one search already
        try:
            params = {"offload": True} if old.offload else None
            new = project(spec, hw, old.par, old.algorithm, layout, params, first_last=first_last)
        except (ScheduleError, ValidationError, ConfigError):
            continue
        new = replace(new, result=None)
        if (new.fits, new.tokens_per_s_per_gpu) <= (old.fits, old.tokens_per_s_per_gpu):
            continue
        (result.fits if old.fits else result.no_fit).remove(old)
        (result.fits if new.fits else result.no_fit).append(new)
        if new.fits and not old.fits:
            result.dropped[NO_FIT] -= 1
            if not result.dropped[NO_FIT]:
                del result.dropped[NO_FIT]


#: what evaluating one candidate gave: its projection (or None) and why it was dropped (or None), a message
Outcome = tuple[Projection | None, str | None, str]


def _outcome(args: tuple, cand: Candidate, tables: dict) -> Outcome:
    """`_evaluate_one` of `args` (spec, hw, layout, first_last, project_unfit), its refusals counted."""
    spec, hw, layout, first_last, project_unfit = args
    try:
        return _evaluate_one(spec, hw, cand, layout, first_last, project_unfit, tables)
    except (ScheduleError, ValidationError) as err:  # a generator's invalid table: refused, reported
        return None, REFUSED, f"{cand}: {err}"
    except ConfigError as err:
        return None, NOT_DIVISIBLE, f"{cand}: {err}"


def _add(result: PlanResult, outcome: Outcome) -> None:
    projection, reason, message = outcome
    result.evaluated += 1
    if projection is not None:
        (result.fits if projection.fits else result.no_fit).append(projection)
    if reason:
        result.dropped[reason] += 1
        result.examples.setdefault(reason, message)


Job = tuple[int, Candidate]


def _not_dividing(cand: Candidate) -> Outcome:
    p = cand.par
    cp = f" x --cp {p.cp}" if p.cp > 1 else ""
    return None, NOT_DIVISIBLE, f"{cand}: --tp {p.tp}{cp} x --pp {p.pp}: does not divide {cand.gpus} GPUs"


def _evaluate(
    args: tuple, todo: list[Job], on_each: Callable[[Candidate], None] | None, jobs: int = 1
) -> list[tuple[int, Outcome]]:
    tables: dict = {}
    done = []
    for i, cand in todo:
        done.append((i, _outcome(args, cand, tables)))
        if on_each is not None:
            on_each(cand)
    return done


_WORKER: dict[str, Any] = {}


def _worker_init(*args: Any) -> None:
    _WORKER["args"] = args


def _worker_chunk(chunk: list[Job]) -> list[tuple[int, Outcome]]:
    return _evaluate(_WORKER["args"], chunk, None)


def _chunks(todo: list[Job]) -> list[list[Job]]:
    """Chunks of about CHUNK candidates, each (algorithm, pp, vpp, m) in as few chunks as it fills: the
    candidates that share a schedule table share a worker, which generates it once."""
    groups: dict[tuple, list[Job]] = {}
    for i, c in todo:
        groups.setdefault((c.algorithm, c.par.pp, c.par.vpp, c.par.micro_batches), []).append((i, c))
    out: list[list[Job]] = [[]]
    for group in groups.values():
        if len(out[-1]) + len(group) > CHUNK and out[-1]:
            out.append([])
        out[-1].extend(group)
    return out


def _evaluate_parallel(
    args: tuple, todo: list[Job], on_each: Callable[[Candidate], None] | None, jobs: int
) -> list[tuple[int, Outcome]]:
    import multiprocessing

    chunks, by_index = _chunks(todo), dict(todo)
    done = []
    with multiprocessing.get_context("fork").Pool(min(jobs, len(chunks)), _worker_init, args) as pool:
        for part in pool.imap_unordered(_worker_chunk, chunks):
            done += part
            if on_each is not None:
                for i, _ in part:
                    on_each(by_index[i])
    return done


def _evaluate_one(
    spec: ModelSpec,
    hw: Hardware,
    cand: Candidate,
    layout: str,
    first_last: tuple[int | None, int | None] | None,
    project_unfit: bool,
    tables: dict,
) -> Outcome:
    """Project `cand`, or say why it is dropped; raises the ConfigError / ScheduleError of a
    configuration that cannot run."""
    p = cand.par
    _, parts = placement_for(cand.algorithm, p)
    check_parallel(spec, p, parts)
    hbm = hw.hbm_bytes
    if not project_unfit and _cannot_fit(spec, hw, p):
        return None, NO_FIT, f"{cand}: weights and optimizer state alone exceed HBM"
    why = refusal(cand.algorithm, p.pp, p.vpp, p.micro_batches, {})
    if why:
        raise ScheduleError(why, key="micro_batches")
    plan = stage_plan(spec, hw, p, cand.algorithm, layout, first_last)
    # keep the numbers, not the timeline: hundreds of timelines would only slow the sweep
    params = sweep_params(cand.algorithm) or {}

    def run(extra: dict) -> Projection:
        pr = project(spec, hw, p, cand.algorithm, layout, params | extra, tables, first_last, plan)
        return replace(pr, result=None)

    pr = None
    if project_unfit or (low := one_microbatch_peak(spec, hw, p, plan)) <= hbm:
        pr = run({})
        if pr.fits:
            return pr, None, ""
    # a V-family schedule that does not fit: offload may make it (slower by the transfers)
    if offloads(cand.algorithm) and (project_unfit or one_microbatch_peak(spec, hw, p, plan, True) <= hbm):
        off = run({"offload": True})
        if off.fits:
            return off, None, ""
        pr = pr or off
    if pr is None:
        return None, NO_FIT, f"{cand}: {gib(low)} GiB > {gib(hbm)} GiB with one microbatch in flight"
    return pr, NO_FIT, f"{cand}: {gib(pr.peak_memory_bytes)} GiB > {gib(hbm)} GiB"


def offloads(algorithm: str) -> bool:
    """Whether `algorithm` takes the `offload` param (the V family)."""
    return any(p.name == "offload" for p in get_algorithm(algorithm).params)


def plan_record(
    spec: ModelSpec, hw: Hardware, gpus: int, result: PlanResult, top: int, include_unfit: bool = False
) -> dict[str, Any]:
    """The `plan --json` document (`results`: the top ones that fit, or with `include_unfit` the top ones
    projected, `fits` telling which; `rank` shared by a tie, `tie` telling which: `PlanResult.ties`)."""
    results = []
    for tie in result.ties(include_unfit):
        rank = len(results) + 1
        for p in tie:
            results.append(
                p.record() | {"algorithm": shown(p.label, p.par.pp), "rank": rank, "tie": len(tie) > 1}
            )
    return {
        "model": spec.identity(),
        "gpu": hw.name,
        "gpus": gpus,
        "configurations_evaluated": result.evaluated,
        "fitting": len(result.fits),
        "dropped": dict(result.dropped),
        "dropped_examples": dict(result.examples),
        "results": results[:top],
    }
