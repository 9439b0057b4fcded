"""Event-driven list scheduling under a per-rank activation cap.

A list scheduler decides each node as time goes, so it keeps its own loop; when a node's inputs arrive is
the clock's rule (`timing.input_delays`), as `timing.resume` applies it.

The engine behind the memory-aware generators (`zero-bubble-heuristic`, `zb-h2`, the V family). Time moves
forward through one heap of decision events; a rank that becomes free picks one node among those whose
inputs have arrived, by a `Policy`, and a rank with nothing ready waits until a producer wakes it. Each rank
runs the forwards of a stage in microbatch order, its B's in the same order and its W's first-in-first-out,
so a decision looks at a handful of candidates, never at the whole table.

Memory is counted in microbatch units per rank (1 = one microbatch's activations for a whole rank; a V
chunk holds half), by the simulator's rules (`schedule.semantics`, each stage with its own
`b_free_fraction`): an F allocates its stage's share at its start, B frees its fraction of it, W the rest.
When B keeps more than F saved (a negative fraction) a microbatch is counted at the most it will hold from
its F on, so the cap holds at every instant, not only when an F starts. An F that brings a new microbatch
onto a rank whose route returns to it later (the V turn) needs room
left for that return; this reservation is what keeps a capped V schedule from filling a rank with chunk-0
activations and deadlocking.

The engine plans with the simulator's model (asynchronous sends, `comm` latency across ranks). Its times
are one feasible timing of the order it emits; the simulator's as-soon-as-possible timing of that order is
the same unless a W started after its rank stood idle (the "fit" rule can do that), then earlier. Where the
sums are exact and no W started late, the planned step time and longest span are the order's own
(`asap_exact`; the peak too, `peak_exact`): `schedule` notes them in `score_memo`, so a generator scoring
the order does not time it again.

The order comes out as an `ArrayOrder` (integer columns: one int per decision while planning, the columns
built once at the end), so a pass builds no Node; the tests hold it equal to the same decisions as
Node lists (`tests/oracles/constructions.py`). On one route, with costs whose sums are exact (multiples of
a power of two), a pass appends the repeats of its steady phase at once instead of deciding them again
(`greedy_period`); the reference decides every node.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from itertools import chain
from typing import Any

from primuspp.algorithms.search import greedy_period, score_memo
from primuspp.algorithms.search.portfolio import memory_units
from primuspp.errors import ScheduleError
from primuspp.schedule.array_order import KINDS, ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import kind_durations
from primuspp.schedule.timing import input_delays

_F, _B, _W = 0, 1, 2
_KINDS = (NodeKind.F, NodeKind.B, NodeKind.W)
#: ArrayOrder kind codes of _F, _B, _W
_CODES = tuple(KINDS.index(k) for k in _KINDS)


@dataclass(frozen=True)
class Policy:
    """Tie-break rules of one greedy pass.

    A ready B runs before a ready F unless `alternate`. `fill`: what an idle rank does with pending W's —
    "eager" runs one whenever nothing else is ready, "fit" only when it ends before the next input already
    known to be on its way (memory pressure and the end of the work force one either way). `deep_first`:
    among a rank's stages, prefer the one later on the route (V: chunk 1), else the older microbatch.
    """

    name: str
    fill: str = "eager"
    deep_first: bool = True
    #: a rank r keeps at most `w_lag * r` W's pending (ZB-H1 keeps r); beyond that W runs before anything
    w_lag: float | None = None
    #: after a B prefer an F and after an F a B (the 1F1B rhythm), whatever `backward_first` says
    alternate: bool = False
    #: wait for a preferred F/B that arrives within this fraction of its own duration rather than run a
    #: less preferred one now (absorbs small comm latencies that would break the rhythm)
    patience: float = 0.0


POLICIES = (
    Policy("b-eager-deep"),
    Policy("b-eager-old", deep_first=False),
    Policy("alt-eager", alternate=True),
    Policy("alt-fit", fill="fit", alternate=True),
    Policy("alt-lag", fill="fit", w_lag=1.0, alternate=True),
    Policy("alt-fit-wait", fill="fit", alternate=True, patience=0.5),
    Policy("alt-lag-wait", fill="fit", w_lag=1.0, alternate=True, patience=0.5),
    Policy("b-fit-wait", fill="fit", patience=0.5),
)


@dataclass(frozen=True)
class Plan:
    """A greedy result: the compute order and its planned figures (`schedule`: an ArrayOrder, which reads
    as a tuple of per-rank Node tuples; the tests' oracle: Node lists)."""

    policy: str
    order: ArrayOrder | list[list[Node]]
    makespan: float
    max_span: float
    peak: float
    #: makespan and max_span are exactly the simulator's figures for the order (`asap_exact`)
    timed: bool = False


_PLANS = score_memo.BlockMemo("greedy_shared_plans")


def shared_plans():
    """Within the block, `schedule` computes each distinct pass once: a generator whose candidates run the
    same pass twice (zero-bubble-heuristic's policies, then the same policies inside the zero-bubble search
    it also runs) gets the first result again (its order, an ArrayOrder nobody can change, shared). The plans
    are dropped on exit."""
    return _PLANS.block()


def schedule(
    placement: Placement,
    m: int,
    costs: StageCosts,
    cap: float,
    policy: Policy,
) -> Plan:
    """One greedy pass. `cap` is the per-rank activation budget in microbatch units (>= 1)."""
    key = (placement, m, costs, cap, policy)
    return _PLANS.once(key, lambda: _schedule(placement, m, costs, cap, policy))


def _schedule(placement: Placement, m: int, costs: StageCosts, cap: float, policy: Policy) -> Plan:
    """One pass, its order as columns: each decision is one int, (mb * stages + stage) * 3 + kind."""
    import numpy as np

    decisions, makespan, max_span, peak, _, timed, blocks = _plan(
        placement, m, costs, cap, policy, blocks=True
    )
    lengths = [len(seq) for seq in decisions]
    flat = np.fromiter(chain.from_iterable(decisions), dtype=np.int64, count=sum(lengths))
    if blocks:  # a skipped steady phase: its decisions as they came, each rank's between its lists' parts
        at = {r: (where, codes) for r, where, codes in blocks}
        pieces, lo = [], 0
        for r, n_r in enumerate(lengths):
            if r in at:
                where, codes = at[r]
                pieces += (flat[lo : lo + where], codes, flat[lo + where : lo + n_r])
                lengths[r] += len(codes)
            else:
                pieces.append(flat[lo : lo + n_r])
            lo += n_r
        flat = np.concatenate(pieces)
    order = decision_order(flat, lengths, placement.num_stages)
    if timed:  # the candidate's timing is known: a search scoring it need not time it (`score_memo`)
        known_peak = peak if peak_exact(placement, costs, peak) else None
        score_memo.note_timing(placement, m, order, costs, makespan, max_span, known_peak)
    return Plan(policy.name, order, makespan, max_span, peak, timed)


def decision_order(flat: Any, lengths: list[int], n_stages: int) -> ArrayOrder:
    """Decisions, one int each ((mb * stages + stage) * 3 + kind, rank r's the next `lengths[r]` of
    `flat`), as an ArrayOrder."""
    import numpy as np

    key, kind = np.divmod(flat, 3)
    mb, stage = np.divmod(key, n_stages)
    return ArrayOrder.from_flat(np.array(_CODES, dtype=np.int8)[kind], mb, stage, lengths)


def asap_exact(quantum: float | None, top: float, late: bool) -> bool:
    """Whether a pass's planned times are exactly the simulator's (`node_times`: each node as soon as its
    rank is free and its inputs have arrived) for the order it emits, so its step time and longest span are
    the order's own figures without timing it.

    They are when every sum is exact (`greedy_period.quantum`, every time below `LIMIT` quanta: then `eps`
    changes no comparison and any order of additions gives the same value) and no W started `late` (after
    its rank had stood idle: the "fit" rule keeps a W back while an input is on its way, and a cap-blocked F
    can then make it run later than it could). Every other node starts at the later of its rank's previous
    end and its inputs' arrival, whatever the policy: a rank is popped when it becomes free and whenever an
    input for it arrives, and at each pop it places a B or an unblocked F whose inputs are in (or waits for
    a preferred one arriving within its patience, which it then places on arrival); an F held back by the
    cap stays held until the rank itself runs something, and a W's input is made on its own rank before it.
    That is the simulator's rule, so by induction over the order the planned times are its times. The eager
    fill never starts a W late (an idle rank with a W pending runs it)."""
    return quantum is not None and top < greedy_period.LIMIT * quantum and not late


def peak_exact(placement: Placement, costs: StageCosts, peak: float) -> bool:
    """Whether a pass's planned peak is exactly the simulator's peak of its order (`portfolio.order_peak`).

    The pass counts what the simulator counts (an F allocates its stage's share at its start, B frees its
    fraction, W the rest, in the rank's order) where every B frees a part within [0, 1] of its activation
    (else the pass counts a microbatch at the most it will hold). The two add the changes in the same order
    but write W's as `unit * (1 - b_free)` and `unit - unit * b_free`: equal when every share and part is a
    multiple of 2^-20 and the levels stay below 2^32 (every sum exact; an exact level never comes within
    1e-9 of zero, which the simulator would snap, unless it is zero)."""
    bfree = costs.fractions()
    if not all(0.0 <= b <= 1.0 for b in bfree) or not 0.0 <= peak < 2.0**32:
        return False
    values = []
    for u, b in zip(memory_units(placement, costs.activation), bfree, strict=True):
        values += (u, u * b, u * (1.0 - b), u - u * b)
    return all(math.isfinite(v) and (v * 2.0**20).is_integer() and abs(v) < 2.0**32 for v in values)


def _plan(
    placement: Placement,
    m: int,
    costs: StageCosts,
    cap: float,
    policy: Policy,
    skip: bool = True,
    blocks: bool = False,
) -> tuple[list[list[int]], float, float, float, int, bool, list]:
    """The pass itself: per rank, its decisions in order ((mb * stages + stage) * 3 + kind), then the
    planned step time, longest span and peak, how many microbatches of a steady phase it skipped, whether
    the planned figures are the simulator's (`asap_exact`) and, with `blocks`, the skipped decisions apart
    (`greedy_period.Period.blocks`: the lists then lack them; without `blocks` they are in the lists). On
    one route it skips the repeats of its steady phase (`greedy_period`) unless not `skip`."""
    n_stages, p = placement.num_stages, placement.pp
    srank, nxt, prv = placement.stage_rank, placement.next_stage, placement.prev_stage
    dur = tuple(kind_durations(costs)[k] for k in _KINDS)  # the semantics table's durations
    comm = costs.comm
    f_hop, g_hop = input_delays(placement, comm)  # the clock's input rule
    unit = memory_units(placement, costs.activation)
    bfree = costs.fractions()  # per stage, as the simulator frees them (one memory model)
    # what one microbatch's activation on stage s can reach: more than F allocated when B keeps more than
    # F saved (b_free < 0). `mem` counts it from the F on, so the cap holds at every instant, not only when
    # an F starts; with b_free >= 0 it is the F's allocation and `mem` is the simulator's level.
    foot = [unit[s] * max(1.0, 1.0 - bfree[s]) for s in range(n_stages)]
    b_drop = [unit[s] * bfree[s] if bfree[s] > 0 else 0.0 for s in range(n_stages)]  # what B frees of it
    w_drop = [unit[s] * (1.0 - bfree[s]) if bfree[s] >= 0 else foot[s] for s in range(n_stages)]
    scale = max(max(dur[0]), max(dur[1]), max(dur[2]), comm, 1e-300)
    eps = 1e-9 * scale
    cap_eps = cap + 1e-9

    # per stage: the microbatches visiting it, in order, and the reservation an opening F needs
    route_of = [0] * n_stages
    for k, route in enumerate(placement.routes):
        for s in route:
            route_of[s] = k
    n_routes = len(placement.routes)
    stage_mbs = [list(range(route_of[s], m, n_routes)) for s in range(n_stages)]
    reserve = [0.0] * n_stages  # activation still needed on this rank by a microbatch this F opens
    opens = [False] * n_stages
    for route in placement.routes:
        seen: set[int] = set()
        for i, s in enumerate(route):
            r = srank[s]
            if r not in seen:
                seen.add(r)
                opens[s] = True
                later = [foot[q] for q in route[i + 1 :] if srank[q] == r]
                reserve[s] = max(later, default=0.0)
    worst = max(foot[s] + (reserve[s] if opens[s] else 0.0) for s in range(n_stages))
    if worst > cap_eps:  # generators pass a cap from `fit_cap`, which is never below this
        raise ScheduleError(f"activation cap {cap:g} is below one microbatch's {worst:g}", key="max_mem")
    # stages of each rank, deepest (latest on its route) first
    rank_stages: list[list[int]] = [[] for _ in range(p)]
    for route in placement.routes:
        for s in reversed(route):
            rank_stages[srank[s]].append(s)
    if n_routes > 1:
        for r in range(p):
            rank_stages[r].sort(key=lambda s: -placement.routes[route_of[s]].index(s))

    f_end = [-1.0] * (m * n_stages)
    g_end = [-1.0] * (m * n_stages)
    nf = [0] * n_stages
    nb = [0] * n_stages
    nw = [0] * n_stages
    n_of = [len(stage_mbs[s]) for s in range(n_stages)]
    mem = [0.0] * p
    peak = 0.0
    late = False  # a W started after its rank stood idle (`asap_exact`)
    free = [0.0] * p
    first = [-1.0] * p
    left = [sum(3 * n_of[s] for s in rank_stages[r]) for r in range(p)]
    order: list[list[int]] = [[] for _ in range(p)]
    heap = [(0.0, r) for r in range(p)]
    fill, lag, patience = policy.fill, policy.w_lag, policy.patience
    deep = [0] * n_stages  # tie-break among a rank's stages: 0 = deepest (or all equal: oldest first)
    for r in range(p):
        for rank_i, s in enumerate(rank_stages[r]):
            deep[s] = rank_i if policy.deep_first else 0
    inf = float("inf")
    last_kind = [_B] * p
    alternate = policy.alternate
    state = (f_end, g_end, nf, nb, nw, mem, free, first, left, order, heap, last_kind)
    period = None  # the watch over a steady phase (`greedy_period`): on one route, with exact sums
    waits = [policy.patience * d for d in chain(dur[_F], dur[_B])]
    quantum = greedy_period.quantum(chain(dur[_F], dur[_B], dur[_W], (comm,), waits), eps)
    if skip and n_routes == 1 and quantum is not None:
        period = greedy_period.Period(m, nxt, prv, eps, state)
    watch, s0 = period, placement.routes[0][0]

    while heap:
        t, r = heapq.heappop(heap)
        if t < free[r] - eps or not left[r]:
            continue
        if t < free[r]:
            t = free[r]
        best = None  # (priority, kind, stage, mb, ready time)
        best_w = None
        next_known = inf
        blocked_by_memory = False
        more_fb = False
        pending = 0
        for s in rank_stages[r]:
            pending += nb[s] - nw[s]
            i = nw[s]
            if i < nb[s]:
                mb = stage_mbs[s][i]
                pr = (i, deep[s])
                if best_w is None or pr < best_w[0]:
                    best_w = (pr, _W, s, mb, 0.0)
            i = nb[s]
            if i < n_of[s]:
                more_fb = True
            if i < nf[s]:
                mb = stage_mbs[s][i]
                key = mb * n_stages + s
                q = nxt[s]
                if q < 0:
                    ready = f_end[key]
                else:
                    e = g_end[mb * n_stages + q]
                    ready = -1.0 if e < 0 else max(f_end[key], e + g_hop[s])
                if ready >= 0:
                    if ready <= t + eps + patience * dur[_B][s]:
                        pr = (0 if not alternate or last_kind[r] != _B else 1, i, deep[s])
                        if best is None or pr < best[0]:
                            best = (pr, _B, s, mb, ready)
                    elif ready < next_known:
                        next_known = ready
            i = nf[s]
            if i < n_of[s]:
                mb = stage_mbs[s][i]
                q = prv[s]
                if q < 0:
                    ready = 0.0
                else:
                    e = f_end[mb * n_stages + q]
                    ready = -1.0 if e < 0 else e + f_hop[s]
                if ready >= 0:
                    need = foot[s] + (reserve[s] if opens[s] else 0.0)
                    if mem[r] + need > cap_eps:
                        blocked_by_memory = True
                    elif ready <= t + eps + patience * dur[_F][s]:
                        pr = (0 if alternate and last_kind[r] == _B else 1, i, deep[s])
                        if best is None or pr < best[0]:
                            best = (pr, _F, s, mb, ready)
                    elif ready < next_known:
                        next_known = ready
        if best_w is not None:
            if lag is not None and pending > lag * r:
                best = best_w
            elif best is None:
                wd = dur[_W][best_w[2]]
                if (
                    blocked_by_memory
                    or not more_fb
                    or fill == "eager"
                    or (fill == "fit" and t + wd <= next_known + eps)
                ):
                    best = best_w
        if best is None:
            if next_known < inf:
                heapq.heappush(heap, (next_known, r))
            continue
        _, kind, s, mb, ready = best
        if ready > t + eps:  # worth waiting for: it arrives within the policy's patience
            heapq.heappush(heap, (ready, r))
            continue
        key = mb * n_stages + s
        end = t + dur[kind][s]
        if first[r] < 0:
            first[r] = t
        if kind == _F:
            nf[s] += 1
            f_end[key] = end
            mem[r] += foot[s]
            if mem[r] > peak:
                peak = mem[r]
            q = nxt[s]
            if q >= 0:
                heapq.heappush(heap, (end + f_hop[q], srank[q]))
        elif kind == _B:
            nb[s] += 1
            g_end[key] = end
            mem[r] -= b_drop[s]
            q = prv[s]
            if q >= 0:
                heapq.heappush(heap, (end + g_hop[q], srank[q]))
        else:
            if t > free[r]:  # the rank stood idle before it: not as soon as it could (`asap_exact`)
                late = True
            nw[s] += 1
            mem[r] -= w_drop[s]
        order[r].append(key * 3 + kind)
        if kind != _W:
            last_kind[r] = kind
        free[r] = end
        left[r] -= 1
        heapq.heappush(heap, (end, r))
        if watch is not None and s == s0 and kind == _F and watch.check(s0, end):
            watch = None

    top = max(free) + comm + max(waits, default=0.0) + eps  # above every time the loops formed
    if period is not None and period.jumped and top >= greedy_period.LIMIT * quantum:
        # too large for every sum to be exact, which takes millions of nodes: the pass again, unskipped
        return _plan(placement, m, costs, cap, policy, skip=False, blocks=blocks)
    stuck = [r for r in range(p) if left[r]]
    if stuck:  # cannot happen with cap >= 1 (see the module docstring); a bug if it does
        raise RuntimeError(f"greedy schedule stalled on ranks {stuck} (policy {policy.name}, cap {cap})")
    spans = [free[r] - first[r] for r in range(p)]
    jumped = 0 if period is None else period.jumped
    skipped = [] if period is None else period.blocks
    if skipped and not blocks:
        greedy_period.insert_blocks(order, skipped)
        skipped = []
    return order, max(free) - min(first), max(spans), peak, jumped, asap_exact(quantum, top, late), skipped


def least_cap(placement: Placement, costs: StageCosts) -> float:
    """The smallest cap (microbatch units per rank) the greedy can plan under: 1 when B frees part of each
    activation (b_free >= 0); more when B keeps more than F saved, as one microbatch then grows past 1."""
    unit = memory_units(placement, costs.activation)
    bfree = costs.fractions()
    srank = placement.stage_rank
    worst = 0.0
    for route in placement.routes:
        seen: set[int] = set()
        for i, s in enumerate(route):
            if srank[s] in seen:
                continue
            seen.add(srank[s])
            here = [q for q in route[i:] if srank[q] == srank[s]]
            foot = [unit[q] * max(1.0, 1.0 - bfree[q]) for q in here]
            worst = max(worst, foot[0] + max(foot[1:], default=0.0))
    return worst


def fit_cap(placement: Placement, costs: StageCosts, cap: float, given: str | None, report: dict) -> float:
    """The cap to plan under: `cap`, unless one microbatch alone reaches more on a rank (B keeping more than
    F saved). Then a cap the user gave (`given` names its parameter) is refused with one line, and an
    algorithm's own budget is raised to what one microbatch needs, which `report["memory"]` says."""
    least = least_cap(placement, costs)
    if least <= cap + 1e-9:
        return cap
    why = f"what one microbatch reaches on a rank ({least:g}) when B keeps more than F saved"
    why += " (b_free_fraction < 0)"
    if given:
        raise ScheduleError(f"{given}={cap:g} is below {why} (allowed: {given} >= {least:g})", key=given)
    report["memory"] = f"budget raised from {cap:g} to {least:g} microbatches per rank, {why}"
    return least
