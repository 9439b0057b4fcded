"""Post-pass: re-place the weight-gradient (W) nodes of a compute order, keeping its F/B order.

A W depends only on its own B and produces nothing another rank waits for, so where it runs changes the
timing of its own rank alone: run it where the rank would idle and it costs nothing; run it just before an
F or B that another rank waits for and it delays the whole pipeline. Generators that place W's by slot
counting (unit costs) put them in the wrong places once W is cheaper than B or transfers take time.

`replace_w` keeps each rank's F/B sequence and the relative order of its W's, and re-inserts the W's while
timing the order with the simulator's model (a node starts when its rank is free and its inputs have
arrived, `comm` after the producer's end across ranks: `timing.input_delays`; the pass decides each W's
place as it times, a list scheduler, so it keeps its own loop): a pending W runs when the rank would
otherwise wait for the next F/B's input (`fill` says how much of the wait it must fit), when memory requires
it (each rank's activation stays within `caps[r]`, by default the rank's peak in the input order, so no
rank's peak rises), when the input order had it there already (`keep`, which makes the result never slower
than the input: a W only moves earlier, into a wait it fits), or at the end. Every output has the same
nodes, each W after its B, so it lowers and validates as the input does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search.portfolio import array_rank_peaks, memory_units
from primuspp.errors import ValidationError
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import kind_durations, order_memory
from primuspp.schedule.timing import input_delays

_F, _B, _W = NodeKind.F, NodeKind.B, NodeKind.W
FILLS = ("fit", "half", "eager", "lazy")

#: the variants `variants` tries: (name, fill, keep)
VARIANTS = (
    ("w-fit-keep", "fit", True),
    ("w-fit", "fit", False),
    ("w-half", "half", False),
    ("w-lazy", "lazy", False),
)


def _durations(costs: StageCosts) -> tuple:
    """F's, B's and W's per-stage durations, from the semantics table."""
    dur = kind_durations(costs)
    return dur[NodeKind.F], dur[NodeKind.B], dur[NodeKind.W]


def only_fbw(order: Sequence[Sequence[Node]]) -> bool:
    """Whether every node is an F, B or W (identity tests: a set of kinds would hash every node's Enum; an
    ArrayOrder: its kind column)."""
    if isinstance(order, ArrayOrder):
        from primuspp.algorithms.search.bounds import kinds_within

        return kinds_within(order, (_F, _B, _W))
    return all(n.kind is _F or n.kind is _B or n.kind is _W for seq in order for n in seq)


def rank_peaks(placement: Placement, order: Sequence[Sequence[Node]], costs: StageCosts) -> list[float]:
    """Each rank's peak activation in microbatch units (the simulator's memory model; an ArrayOrder's as
    array passes)."""
    units = memory_units(placement, costs.activation)
    fractions = costs.fractions()
    if isinstance(order, ArrayOrder):
        peaks = array_rank_peaks(order, units, fractions)
        if peaks is not None:
            return peaks
    return [order_memory(seq, units, fractions, keep_curve=False)[1] for seq in order]


def replace_w(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    fill: str = "fit",
    keep: bool = False,
    caps: Sequence[float] | None = None,
) -> ComputeOrder | None:
    """The order with its W's re-placed (see `replace_w_peaks`), or None."""
    placed = replace_w_peaks(placement, m, order, costs, fill, keep, caps)
    return None if placed is None else placed[0]


def replace_w_peaks(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    fill: str = "fit",
    keep: bool = False,
    caps: Sequence[float] | None = None,
) -> tuple[ComputeOrder, list[float]] | None:
    """(the order with its W's re-placed (see the module docstring), each rank's peak in it), or None when
    the order holds other kinds than F, B and W (BW, FB, OFFLOAD/RELOAD: left alone) or the result would
    exceed a cap.

    `fill`: a pending W runs in a wait before the next F/B when it ends by the F/B's input ("fit"), when
    the wait is at least half the W ("half"), whenever there is a wait ("eager"), or never ("lazy": W's run
    only where memory calls for one, or at the end, which leaves every wait to the F/B's)."""
    if fill not in FILLS:
        raise ValueError(f"fill={fill!r} (allowed: {', '.join(FILLS)})")
    if not only_fbw(order):
        return None
    n_stages, p = placement.num_stages, placement.pp
    srank, nxt, prv = placement.stage_rank, placement.next_stage, placement.prev_stage
    fwd, bwd, wgr, comm = *_durations(costs), costs.comm
    f_hop, g_hop = input_delays(placement, comm)
    units = memory_units(placement, costs.activation)
    fractions = costs.fractions()
    grow_f = list(units)
    grow_b = [-units[s] * fractions[s] for s in range(n_stages)]
    drop_w = [units[s] * (1.0 - fractions[s]) for s in range(n_stages)]
    if caps is None:
        caps = rank_peaks(placement, order, costs)
    scale = max(max(fwd), max(bwd), max(wgr), comm, 1e-300)
    eps = 1e-9 * scale

    skel = [[n for n in seq if n.kind is not _W] for seq in order]
    wseq = [[n for n in seq if n.kind is _W] for seq in order]
    deadline: list[list[int]] = []  # W i must run before F/B number deadline[r][i] (its place in `order`)
    for seq in order:
        marks, k = [], 0
        for n in seq:
            if n.kind is _W:
                marks.append(k)
            else:
                k += 1
        deadline.append(marks)

    f_end = [-1.0] * (m * n_stages)
    g_end = [-1.0] * (m * n_stages)
    out: list[list[Node]] = [[] for _ in range(p)]
    ptr = [0] * p
    wptr = [0] * p
    free = [0.0] * p
    level = [0.0] * p
    work = deque(range(p))
    queued = [True] * p

    def run_w(r: int) -> None:
        node = wseq[r][wptr[r]]
        wptr[r] += 1
        out[r].append(node)
        free[r] += wgr[node.stage]
        level[r] -= drop_w[node.stage]

    while work:
        r = work.popleft()
        queued[r] = False
        seq, ws, marks, cap = skel[r], wseq[r], deadline[r], caps[r] + 1e-9
        while True:
            k, wi = ptr[r], wptr[r]
            has_w = wi < len(ws)
            w_ok = has_w and g_end[ws[wi].microbatch * n_stages + ws[wi].stage] >= 0
            if k == len(seq):
                if has_w:  # every B of this rank has run: the rest of its W's
                    run_w(r)
                    continue
                break
            if keep and has_w and marks[wi] <= k:
                if not w_ok:  # cannot happen: the input order had this W after its B
                    return None
                run_w(r)
                continue
            x = seq[k]
            s, mb = x.stage, x.microbatch
            key = mb * n_stages + s
            grow = grow_f[s] if x.kind is _F else grow_b[s]
            if w_ok and level[r] + grow > cap:
                run_w(r)
                continue
            if x.kind is _F:
                q = prv[s]
                if q < 0:
                    ready = 0.0
                else:
                    e = f_end[mb * n_stages + q]
                    if e < 0:
                        break  # its input is not produced yet: wait to be woken
                    ready = e + f_hop[s]
            else:
                ready = f_end[key]
                if ready < 0:
                    return None  # B before its own F: not a valid order
                q = nxt[s]
                if q >= 0:
                    e = g_end[mb * n_stages + q]
                    if e < 0:
                        break
                    ready = max(ready, e + g_hop[s])
            gap = ready - free[r]
            if w_ok and gap > eps:
                wd = wgr[ws[wi].stage]
                if (
                    fill == "eager"
                    or (fill == "fit" and wd <= gap + eps)
                    or (fill == "half" and 2 * gap >= wd)
                ):
                    run_w(r)
                    continue
            start = ready if ready > free[r] else free[r]
            end = start + (fwd[s] if x.kind is _F else bwd[s])
            free[r] = end
            level[r] += grow
            out[r].append(x)
            ptr[r] += 1
            if x.kind is _F:
                f_end[key] = end
                q = nxt[s]
            else:
                g_end[key] = end
                q = prv[s]
            if q >= 0:
                r2 = srank[q]
                if r2 != r and not queued[r2]:
                    queued[r2] = True
                    work.append(r2)
    if any(ptr[r] < len(skel[r]) or wptr[r] < len(wseq[r]) for r in range(p)):
        return None  # the input order's F/B sequence does not run (not a valid order)
    peaks = rank_peaks(placement, out, costs)
    if any(peaks[r] > caps[r] + 1e-9 for r in range(p)):
        return None
    return out, peaks


def variants(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    caps: Sequence[float] | None = None,
) -> list[tuple[str, ComputeOrder]]:
    """The W-pass variants of `order` that exist (see `VARIANTS`), named after them."""
    if caps is None:
        caps = rank_peaks(placement, order, costs)
    out = []
    for name, fill, keep in VARIANTS:
        new = replace_w(placement, m, order, costs, fill, keep, caps)
        if new is not None:
            out.append((name, new))
    return out


def fill_gaps(
    placement: Placement,
    m: int,
    order: ComputeOrder,
    costs: StageCosts,
    caps: Sequence[float] | None = None,
    rounds: int = 4,
) -> ComputeOrder | None:
    """Pull later F, B and W nodes into the idle gaps of their rank where they fit; None if nothing moved.

    A gap is the wait before a node X (its rank is free at `a`, X starts at `b`). A later node Y of the same
    rank — the next one of its kind and stage, so each stage's F's, B's and W's keep their order — moves
    into it when its inputs arrive early enough that it ends by `b`. Judged on the times before the move,
    every node then ends no later than before (X still starts by `b`, Y and its consumers earlier, the
    rest unchanged or earlier), and that holds for all moves of a round together; each rank's first
    node stays, so no span grows. A rank whose moves would raise its peak above `caps[r]` (default: its
    peak in `order`) keeps only its W moves, which free memory. Rounds repeat on the new times."""
    from primuspp.schedule.timing import node_times  # imported here: keeps this module's import light

    if not only_fbw(order):
        return None
    n_stages = placement.num_stages
    fwd, bwd, wgr, comm = *_durations(costs), costs.comm
    dur = {_F: fwd, _B: bwd, _W: wgr}
    hops = input_delays(placement, comm)
    units = memory_units(placement, costs.activation)
    fractions = costs.fractions()
    if caps is None:
        caps = rank_peaks(placement, order, costs)
    scale = max(max(fwd), max(bwd), max(wgr), comm, 1e-300)
    eps = 1e-9 * scale
    current = [list(seq) for seq in order]
    changed = False
    timing = node_times(placement, m, current, costs)
    for _ in range(rounds):
        f_end, g_end = timing.forward_end, timing.grad_end

        moved_any = False
        nxt_order: list[list[Node]] = []
        for r, seq in enumerate(current):
            starts, ends = timing.starts[r], timing.ends[r]
            # positions of each (kind, stage) on this rank, in order, and a pointer past the placed ones
            slot: dict[int, int] = {}
            where: list[list[int]] = []
            # each node's position by (kind code * stages + stage, microbatch): int keys hash fast
            at: dict[tuple[int, int], int] = {}
            for i, node in enumerate(seq):
                code = (0 if node.kind is _F else 1 if node.kind is _B else 2) * n_stages + node.stage
                at[code, node.microbatch] = i
                k = slot.get(code)
                if k is None:
                    k = slot[code] = len(where)
                    where.append([])
                where[k].append(i)
            head = [0] * len(where)
            moved = [False] * len(seq)
            into: dict[int, list[int]] = {}  # gap before position i -> moved positions, in order
            moved_to: dict[int, int] = {}  # moved position -> the gap it went into
            for i in range(1, len(seq)):
                a, b = ends[i - 1], starts[i]
                if moved[i] or b - a <= eps:
                    continue
                for k, pos in enumerate(where):  # advance past nodes at or before i, and moved ones
                    h = head[k]
                    while h < len(pos) and (pos[h] <= i or moved[pos[h]]):
                        h += 1
                    head[k] = h
                cursor = a
                while True:
                    best = None
                    for k, pos in enumerate(where):
                        h = head[k]
                        if h == len(pos):
                            continue
                        j = pos[h]
                        y = seq[j]
                        start = max(cursor, ready(y, placement, f_end, g_end, hops))
                        end = start + dur[y.kind][y.stage]
                        if end > b + eps or (best is not None and end >= best[0]):
                            continue
                        if _inputs_before(y, i, at, moved_to, placement, r):
                            best = (end, j, k)  # (a zero-length producer may end in time, yet come later)
                    if best is None:
                        break
                    end, j, k = best
                    moved[j] = True
                    moved_to[j] = i
                    into.setdefault(i, []).append(j)
                    head[k] += 1
                    cursor = end
            if not into:
                nxt_order.append(seq)
                continue
            new = _apply_moves(seq, into, moved, None)
            if order_memory(new, units, fractions, keep_curve=False)[1] > caps[r] + 1e-9:
                keep_w = {j for js in into.values() for j in js if seq[j].kind is _W}
                if not keep_w:
                    nxt_order.append(seq)
                    continue
                new = _apply_moves(seq, into, moved, keep_w)
            moved_any = True
            nxt_order.append(new)
        if not moved_any:
            break
        try:  # zero-length nodes can meet at one instant on two ranks and wait for each other
            timing = node_times(placement, m, nxt_order, costs)
        except ValidationError:
            break
        current = nxt_order
        changed = True
    return current if changed else None


def _inputs_before(y: Node, i: int, at: dict, moved_to: dict[int, int], placement: Placement, r: int) -> bool:
    """Whether every producer of `y` on rank `r` runs before the gap at position `i` (or was moved into
    it already, so it precedes `y` there)."""
    s, mb, n = y.stage, y.microbatch, placement.num_stages  # `at` keys: (kind code * n + stage, mb)
    if y.kind is _F:
        q = placement.prev_stage[s]
        producers = [(q, mb)] if q >= 0 and placement.stage_rank[q] == r else []
    elif y.kind is _B:
        q = placement.next_stage[s]
        producers = [(s, mb)] + ([(n + q, mb)] if q >= 0 and placement.stage_rank[q] == r else [])
    else:
        producers = [(n + s, mb)]
    for key in producers:
        j = at.get(key)
        if j is None:
            continue
        gap = moved_to.get(j)
        if gap != i and (j if gap is None else gap) >= i:
            return False
    return True


def ready(node: Node, placement: Placement, f_end, g_end, hops: tuple) -> float:
    """When `node`'s inputs are on its rank under the times `f_end`/`g_end` (see `timing.Timing`), by the
    clock's rule: `hops` is `timing.input_delays(placement, comm)`, which the caller looks up once."""
    f_hop, g_hop = hops
    s = node.stage
    key = node.microbatch * placement.num_stages + s
    if node.kind is _F:
        q = placement.prev_stage[s]
        return 0.0 if q < 0 else f_end[key - s + q] + f_hop[s]
    if node.kind is _B:
        t = f_end[key]
        q = placement.next_stage[s]
        return t if q < 0 else max(t, g_end[key - s + q] + g_hop[s])
    return g_end[key]


def _apply_moves(
    seq: list[Node], into: dict[int, list[int]], moved: list[bool], take: set[int] | None
) -> list[Node]:
    """`seq` with the moves `into` (gap position -> moved positions) applied; only those in `take`
    (None: all)."""
    out = []
    for i, node in enumerate(seq):
        for j in into.get(i, ()):
            if take is None or j in take:
                out.append(seq[j])
        if moved[i] and (take is None or i in take):
            continue
        out.append(node)
    return out
