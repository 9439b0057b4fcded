"""What each node kind means: the one table that timing, lowering, the simulator and the planners read.

For every `NodeKind` the table says what the node consumes, what it produces (and so what is sent, to which
neighbour on the microbatch's route), what it does to the stage's activation memory and how long it takes
under a cost model. An `FB` node is the composition of its two parts (an F and a B/BW run overlapped); its
inputs, outputs and memory are those of its parts, its duration `fb_overlap` x the sum of theirs.

Data (route terms; `prev`/`next` are the neighbouring stages on the microbatch's route):

- `ACT_PREV`: the activation of (mb, prev) — F's input, received from prev's rank when that is another rank;
- `GRAD_NEXT`: the input grad of (mb, next) — the output grad B and BW consume;
- `SAVED`: this (mb, stage)'s own saved activation, made by its F (never crosses ranks);
- `OWN_GRAD`: this (mb, stage)'s own backward having run (W needs the output grad B kept);
- produced: `ACT` (the activation of (mb, stage), sent to next's rank as SEND_F / RECV_F) and `GRAD` (the
  input grad of (mb, stage), sent to prev's rank as SEND_B / RECV_B). W produces only weight gradients.

Memory, in fractions of the stage's activation `a` per microbatch: F allocates `a` at its start; B frees
`b_free_fraction * a` at its end, W the rest (what is still resident), BW all of it; OFFLOAD moves what is
resident to host (freed at its end) and RELOAD brings it back (held from its start). `order_memory` is the
one memory model: the simulator draws its curve from it and every planner under a cap counts its peak with it.

Validation reads the rest: what each kind `leaves` on its rank for later nodes of the same (mb, stage),
`COMPLETION` (what every (mb, stage) must run, and the ways to do it) and `STASHES` (which memory effect
takes a saved activation off the device and which brings it back). `NodeKind`'s role flags are set from the
table. Adding a kind: its member in nodes.py and its row here (docs/design.md, "How to extend").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from primuspp.schedule.nodes import Node, NodeKind

if TYPE_CHECKING:  # costs and placement import nothing from here, but keep this module a leaf
    from primuspp.schedule.costs import StageCosts
    from primuspp.schedule.placement import Placement

ACT_PREV, GRAD_NEXT, SAVED, OWN_GRAD = "act_prev", "grad_next", "saved", "own_grad"
ACT, GRAD = "act", "grad"

#: memory effects
ALLOC, FREE_B, FREE_REST, FREE_ALL = "alloc", "free_b", "free_rest", "free_all"
TO_HOST, FROM_HOST = "to_host", "from_host"


@dataclass(frozen=True)
class KindSemantics:
    """One kind's row of the table.

    `consumes`/`produces`: the data above. `at_start`/`at_end`: memory effects at the node's start and end.
    `cost`: the StageCosts fields whose per-stage values add up to its duration. `carries`: for a comm
    kind, the datum it moves and whether this rank is the producer's (SEND) or the consumer's (RECV).
    `parts`: for a composite kind, the kinds of its parts (their semantics apply part by part)."""

    kind: NodeKind
    role: str  # "compute" | "comm" | "memory"
    consumes: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
    at_start: tuple[str, ...] = ()
    at_end: tuple[str, ...] = ()
    cost: tuple[str, ...] = ()
    carries: str | None = None
    parts: tuple[tuple[NodeKind, ...], ...] = ()
    #: for a composite kind: the StageCosts field scaling the sum of its parts' durations
    overlap: str | None = None
    #: what it leaves on its rank for later nodes of the same (mb, stage): F its saved activation (`SAVED`),
    #: B the output grad W needs (`OWN_GRAD`)
    leaves: tuple[str, ...] = ()


_K = NodeKind
SEMANTICS: dict[NodeKind, KindSemantics] = {
    _K.F: KindSemantics(_K.F, "compute", (ACT_PREV,), (ACT,), (ALLOC,), (), ("forward",), leaves=(SAVED,)),
    _K.B: KindSemantics(
        _K.B, "compute", (SAVED, GRAD_NEXT), (GRAD,), (), (FREE_B,), ("backward",), leaves=(OWN_GRAD,)
    ),
    _K.W: KindSemantics(_K.W, "compute", (OWN_GRAD,), (), (), (FREE_REST,), ("wgrad",)),
    _K.BW: KindSemantics(
        _K.BW, "compute", (SAVED, GRAD_NEXT), (GRAD,), (), (FREE_ALL,), ("backward", "wgrad")
    ),
    # the composition of an F and a B/BW of other (mb, stage)s: everything is taken from the parts
    _K.FB: KindSemantics(_K.FB, "compute", parts=((_K.F,), (_K.B, _K.BW)), overlap="fb_overlap"),
    _K.SEND_F: KindSemantics(_K.SEND_F, "comm", carries=ACT),
    _K.RECV_F: KindSemantics(_K.RECV_F, "comm", carries=ACT_PREV),
    _K.SEND_B: KindSemantics(_K.SEND_B, "comm", carries=GRAD),
    _K.RECV_B: KindSemantics(_K.RECV_B, "comm", carries=GRAD_NEXT),
    _K.OFFLOAD: KindSemantics(_K.OFFLOAD, "memory", (SAVED,), at_end=(TO_HOST,), cost=("offload",)),
    _K.RELOAD: KindSemantics(_K.RELOAD, "memory", at_start=(FROM_HOST,), cost=("offload",)),
}
#: the comm kind that sends / receives each produced datum
SEND_OF = {ACT: _K.SEND_F, GRAD: _K.SEND_B}
RECV_OF = {ACT: _K.RECV_F, GRAD: _K.RECV_B}

#: What every (microbatch, stage) on a route must get done, each exactly once: a name and the ways to do it,
#: each way the kinds that run (in this order; a composite node's parts count as themselves). Validation
#: checks every table against it and words its "missing ..." messages from it.
COMPLETION: tuple[tuple[str, tuple[tuple[NodeKind, ...], ...]], ...] = (
    ("forward", ((_K.F,),)),
    ("backward", ((_K.BW,), (_K.B, _K.W))),
)

#: Memory effects that take a (mb, stage)'s saved activation off the device -> the effect that brings it
#: back. A kind with the first opens the pair, one with the second closes it: validation requires every
#: opening to be closed on the same rank, nothing that uses the saved activation to run in between, and
#: something still resident to take away (after the stage's F, before a node frees it).
STASHES = {TO_HOST: FROM_HOST}
#: the effects that free (part of) the saved activation: nothing is left to take away after them
FREES = (FREE_B, FREE_REST, FREE_ALL)


def _mark_kinds() -> None:
    """The per-member flags and part kinds of `NodeKind` (read for every node in every pass), set from the
    table: the package imports this module first (`schedule/__init__.py` via `costs`), so they are set
    before any node is read."""
    for kind in NodeKind:
        sem = SEMANTICS[kind]
        kind.is_compute = sem.role == "compute"
        kind.is_comm = sem.role == "comm"
        kind.is_memory = sem.role == "memory"
        kind.is_send = sem.role == "comm" and sem.carries in SEND_OF
        kind.parts = sem.parts


_mark_kinds()


def simple_parts(node: Node) -> tuple[Node, ...]:
    """The non-composite nodes `node` stands for: its parts for FB, else itself."""
    return node.parts if SEMANTICS[node.kind].parts else (node,)


# -- durations -------------------------------------------------------------------------------------------


def duration(node: Node, costs: StageCosts) -> float:
    """Reference: the node's time under `costs` (a StageCosts). Composite nodes: `fb_overlap` x the parts'."""
    sem = SEMANTICS[node.kind]
    if sem.parts:
        return getattr(costs, sem.overlap) * sum(duration(p, costs) for p in node.parts)
    total = 0.0
    for field in sem.cost:
        total += getattr(costs, field)[node.stage]
    return total


def kind_durations(costs: StageCosts) -> dict[NodeKind, tuple[float, ...]]:
    """Fast-path form of `duration` for the simple kinds that take time: per kind, its time on each stage."""
    out = {}
    for kind, sem in SEMANTICS.items():
        if sem.parts or not sem.cost:
            continue
        rows = [getattr(costs, field) for field in sem.cost]
        out[kind] = tuple(sum(vals, 0.0) if len(vals) > 1 else vals[0] for vals in zip(*rows, strict=True))
    return out


# -- data flow -------------------------------------------------------------------------------------------


def inputs(node: Node, placement: Placement) -> list[tuple[str, int, int]]:
    """(datum, microbatch, stage of its producer) a compute node waits for: ("act", mb, s) = the activation
    of (mb, s) (its F's end), ("grad", mb, s) = the input grad of (mb, s) (its B/BW's end). Inputs one part
    of a composite node produces for the other are left out."""
    out: list[tuple[str, int, int]] = []
    made = set()
    for part in simple_parts(node):
        mb, s = part.microbatch, part.stage
        for need in SEMANTICS[part.kind].consumes:
            if need == ACT_PREV:
                q = placement.prev_stage[s]
                if q >= 0:
                    out.append((ACT, mb, q))
            elif need == GRAD_NEXT:
                q = placement.next_stage[s]
                if q >= 0:
                    out.append((GRAD, mb, q))
            elif need == SAVED:
                out.append((ACT, mb, s))
            elif need == OWN_GRAD:
                out.append((GRAD, mb, s))
        made.update((what, mb, s) for what in SEMANTICS[part.kind].produces)
    return [x for x in out if x not in made]


def outputs(node: Node) -> list[tuple[str, int, int]]:
    """(datum, microbatch, stage) a compute node produces."""
    return [(what, p.microbatch, p.stage) for p in simple_parts(node) for what in SEMANTICS[p.kind].produces]


def consumer_stage(what: str, stage: int, placement: Placement) -> int:
    """The stage that consumes datum `what` of `stage` on another node: next for ACT, prev for GRAD (-1)."""
    return placement.next_stage[stage] if what == ACT else placement.prev_stage[stage]


def sends(node: Node, placement: Placement) -> list[tuple[Node, int, Node]]:
    """The cross-rank hand-offs a compute node starts: (SEND on this rank, peer rank, matching RECV there)."""
    srank = placement.stage_rank
    out = []
    for what, mb, s in outputs(node):
        q = consumer_stage(what, s, placement)
        if q < 0 or srank[q] == srank[s]:
            continue
        r, peer = srank[s], srank[q]
        out.append((Node(SEND_OF[what], mb, s, peer), peer, Node(RECV_OF[what], mb, q, r)))
    return out


# -- the memory model ------------------------------------------------------------------------------------


def _apply(effect: str, node: Node, amount, b_free, resident: dict, offloaded: dict) -> float:
    s = node.stage
    key = (node.microbatch, s)
    if effect == ALLOC:
        return amount[s]
    if effect == FREE_B:
        freed = amount[s] * b_free[s]
        resident[key] = resident.get(key, amount[s]) - freed
        return -freed
    if effect == FREE_REST:
        return -resident.pop(key, amount[s] * (1 - b_free[s]))
    if effect == FREE_ALL:
        return -amount[s]
    if effect in STASHES:  # TO_HOST: what is resident leaves the device
        moved = resident.get(key, amount[s])
        offloaded[key] = moved
        resident[key] = 0.0
        return -moved
    if effect in STASHES.values():  # FROM_HOST: and comes back
        moved = offloaded.pop(key, 0.0)
        resident[key] = moved
        return moved
    raise ValueError(f"unknown memory effect {effect!r}")


# Fast path of the memory model: the table's effects as plans of (phase, part index or -1 for the node
# itself, effect), built once per kind (per combination of part kinds for a composite). Keyed by the kind's
# text: an Enum member hashes in Python, a str in C.
_PLANS: dict[object, tuple[tuple[int, int, str], ...]] = {
    k.text: tuple((0, -1, e) for e in sem.at_start) + tuple((1, -1, e) for e in sem.at_end)
    for k, sem in SEMANTICS.items()
    if not sem.parts
}


#: the kinds whose effects `order_memory` writes out, as long as the table says just that (else None: the
#: plans run for them too)
_WRITTEN_OUT = tuple(
    kind if _PLANS[kind.text] == plan else None
    for kind, plan in (
        (_K.F, ((0, -1, ALLOC),)),
        (_K.B, ((1, -1, FREE_B),)),
        (_K.W, ((1, -1, FREE_REST),)),
        (_K.BW, ((1, -1, FREE_ALL),)),
    )
)


def _composite_plan(node: Node) -> tuple[tuple[int, int, str], ...]:
    """Its parts' effects, all starts before all ends (an FB's F allocates as it begins, its B frees at the
    end), cached by the part kinds."""
    key = (node.kind.text, *(p.kind.text for p in node.parts))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = tuple(
            (ph, j, e)
            for ph in (0, 1)
            for j, part in enumerate(node.parts)
            for e in (SEMANTICS[part.kind].at_start if ph == 0 else SEMANTICS[part.kind].at_end)
        )
    return plan


def order_memory(
    nodes: Sequence[Node],
    amount: Sequence[float],
    b_free: Sequence[float],
    starts: Sequence[float] | None = None,
    ends: Sequence[float] | None = None,
    keep_curve: bool = True,
) -> tuple[list[tuple[float, float]], float]:
    """(curve, peak) of one rank's order: after each memory effect of the table, (when, level). `when` is the
    node's start or end time from `starts`/`ends` (the simulator's curve), or without them its position in
    the order. The common effects are inlined (`tests/oracles/memory.py` reads them one by one; a test holds
    the two equal): the simulator calls this for every rank, planners for every candidate (with
    `keep_curve=False`: the peak alone, the curve left empty). Host transfers run beside compute (the
    clock), so with times their effects may land after later nodes' starts: the curve is then put in time
    order and its levels and peak recounted."""
    timed = starts is not None and ends is not None
    if not timed:
        starts = ends = range(len(nodes))
    keep_curve = keep_curve or timed
    level, peak = 0.0, 0.0
    curve: list[tuple[float, float]] = []
    add = curve.append
    resident: dict[tuple[int, int], float] = {}
    offloaded: dict[tuple[int, int], float] = {}
    plans = _PLANS
    # the simple kinds' effects written out (F allocates at its start; B frees its part, W the rest, BW
    # all at their ends): the same arithmetic as the plans below, without walking a plan per node
    f_kind, b_kind, w_kind, bw_kind = _WRITTEN_OUT
    for i, node in enumerate(nodes):
        kind = node.kind
        if kind is f_kind:
            level += amount[node.stage]
            when = starts[i]
        elif kind is b_kind:
            s = node.stage
            key = (node.microbatch, s)
            freed = amount[s] * b_free[s]
            resident[key] = resident.get(key, amount[s]) - freed
            level -= freed
            when = ends[i]
        elif kind is w_kind:
            s = node.stage
            level -= resident.pop((node.microbatch, s), amount[s] * (1 - b_free[s]))
            when = ends[i]
        elif kind is bw_kind:
            level -= amount[node.stage]
            when = ends[i]
        else:
            plan = plans.get(kind.text)
            if plan is None:
                plan = _composite_plan(node)
            for ph, j, e in plan:
                part = node if j < 0 else node.parts[j]
                s = part.stage
                if e is ALLOC:
                    level += amount[s]
                elif e is FREE_B:
                    key = (part.microbatch, s)
                    freed = amount[s] * b_free[s]
                    resident[key] = resident.get(key, amount[s]) - freed
                    level -= freed
                elif e is FREE_REST:
                    level -= resident.pop((part.microbatch, s), amount[s] * (1 - b_free[s]))
                elif e is FREE_ALL:
                    level -= amount[s]
                else:
                    level += _apply(e, part, amount, b_free, resident, offloaded)
                if -1e-9 < level < 1e-9:
                    level = 0.0
                if keep_curve:
                    add(((ends if ph else starts)[i], level))
                if level > peak:
                    peak = level
            continue
        if -1e-9 < level < 1e-9:
            level = 0.0
        if keep_curve:
            add((when, level))
        if level > peak:
            peak = level
    if timed and any(b[0] < a[0] for a, b in pairwise(curve)):
        return _in_time_order(curve)
    return curve, peak


def _in_time_order(curve: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], float]:
    """A curve whose events are out of time order (a host transfer ending after later nodes started), its
    changes replayed in time order (ties kept in order): (curve, peak)."""
    changes = [(t, level - (curve[i - 1][1] if i else 0.0)) for i, (t, level) in enumerate(curve)]
    changes.sort(key=lambda c: c[0])
    out, level, peak = [], 0.0, 0.0
    for t, change in changes:
        level += change
        if -1e-9 < level < 1e-9:
            level = 0.0
        out.append((t, level))
        peak = max(peak, level)
    return out, peak


def order_peak(order: Sequence[Sequence[Node]], amount: Sequence[float], b_free: Sequence[float]) -> float:
    """The highest level any rank's activation memory reaches (the simulator's peak, from the order alone)."""
    return max((order_memory(seq, amount, b_free, keep_curve=False)[1] for seq in order), default=0.0)


def per_stage(b_free: float | Sequence[float], n_stages: int) -> Sequence[float]:
    """A scalar fraction as one value per stage; a sequence as is."""
    return (float(b_free),) * n_stages if isinstance(b_free, int | float) else b_free
