"""Start and end time of every compute node of a compute order under a cost model.

Each rank runs its nodes in order; a node starts when its rank is free and its inputs have arrived (the
producer's end, plus `comm` when the producer lives on another rank). Sends never block: this is the
asynchronous model the simulator uses. One pass in dependency order, no rescans: a rank that meets a missing
input parks on that input and is woken when it is produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from primuspp.errors import ValidationError
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement

_F, _B, _W, _BW, _FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB


@dataclass(frozen=True)
class Timing:
    """`starts[r][i]`, `ends[r][i]`: times of `order[r][i]` (non-compute nodes get zero-length slots).
    `forward_end[key]` / `grad_end[key]`, key = microbatch * stages + stage: when the activation / the input
    grad of (microbatch, stage) was produced."""

    order: Sequence[Sequence[Node]]
    starts: list[list[float]]
    ends: list[list[float]]
    forward_end: list[float | None]
    grad_end: list[float | None]


def node_times(
    placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]], costs: StageCosts
) -> Timing:
    n_stages = placement.num_stages
    nxt, prv, srank = placement.next_stage, placement.prev_stage, placement.stage_rank
    fwd, bwd, wgr = costs.forward, costs.backward, costs.wgrad
    comm, fb_overlap = costs.comm, costs.fb_overlap
    size = num_microbatches * n_stages
    f_end: list[float | None] = [None] * size
    g_end: list[float | None] = [None] * size
    wait_f: dict[int, list[int]] = {}
    wait_g: dict[int, list[int]] = {}
    n_ranks = len(order)
    ptr = [0] * n_ranks
    free = [0.0] * n_ranks
    starts = [[0.0] * len(seq) for seq in order]
    ends = [[0.0] * len(seq) for seq in order]
    queue = list(range(n_ranks - 1, -1, -1))

    while queue:
        r = queue.pop()
        seq, i, t = order[r], ptr[r], free[r]
        st, en, n_seq = starts[r], ends[r], len(seq)
        while i < n_seq:
            node = seq[i]
            kind = node.kind
            s = node.stage
            key = node.microbatch * n_stages + s
            ready = t
            if kind is _F:
                p = prv[s]
                if p >= 0:
                    e = f_end[key - s + p]
                    if e is None:
                        wait_f.setdefault(key - s + p, []).append(r)
                        break
                    if srank[p] != r:
                        e += comm
                    if e > ready:
                        ready = e
                end = ready + fwd[s]
                f_end[key] = end
                woken = wait_f.pop(key, None)
            elif kind is _B or kind is _BW:
                e = f_end[key]
                if e is None:
                    wait_f.setdefault(key, []).append(r)
                    break
                if e > ready:
                    ready = e
                q = nxt[s]
                if q >= 0:
                    e = g_end[key - s + q]
                    if e is None:
                        wait_g.setdefault(key - s + q, []).append(r)
                        break
                    if srank[q] != r:
                        e += comm
                    if e > ready:
                        ready = e
                end = ready + (bwd[s] if kind is _B else bwd[s] + wgr[s])
                g_end[key] = end
                woken = wait_g.pop(key, None)
            elif kind is _W:
                e = g_end[key]
                if e is None:
                    wait_g.setdefault(key, []).append(r)
                    break
                if e > ready:
                    ready = e
                end = ready + wgr[s]
                woken = None
            elif kind is _FB:
                # the forward part's input, the backward part's activation (unless the forward part
                # makes it) and its output grad
                bpart = node.parts[1]
                bs = bpart.stage
                bkey = bpart.microbatch * n_stages + bs
                p, q = prv[s], nxt[bs]
                e = f_end[key - s + p] if p >= 0 else 0.0
                if e is None:
                    wait_f.setdefault(key - s + p, []).append(r)
                    break
                if p >= 0 and srank[p] != r:
                    e += comm
                if e > ready:
                    ready = e
                if bkey != key:
                    e = f_end[bkey]
                    if e is None:
                        wait_f.setdefault(bkey, []).append(r)
                        break
                    if e > ready:
                        ready = e
                if q >= 0:
                    e = g_end[bkey - bs + q]
                    if e is None:
                        wait_g.setdefault(bkey - bs + q, []).append(r)
                        break
                    if srank[q] != r:
                        e += comm
                    if e > ready:
                        ready = e
                back = bwd[bs] if bpart.kind is _B else bwd[bs] + wgr[bs]
                end = ready + fb_overlap * (fwd[s] + back)
                f_end[key] = end
                g_end[bkey] = end
                woken = (wait_f.pop(key, None) or []) + (wait_g.pop(bkey, None) or [])
            else:
                end = ready
                woken = None
            st[i] = ready
            en[i] = t = end
            i += 1
            if woken:
                queue.extend(woken)
        ptr[r], free[r] = i, t

    stuck = [r for r in range(n_ranks) if ptr[r] < len(order[r])]
    if stuck:
        raise ValidationError(_cycle_message(placement, num_microbatches, order, ptr, stuck, f_end, g_end))
    return Timing(order, starts, ends, f_end, g_end)


def _inputs(node: Node, placement: Placement) -> list[tuple[str, int, int]]:
    """(kind of input, microbatch, stage) this compute node consumes: 'F' = an activation, 'G' = a grad."""
    if node.kind is _FB:
        return [x for part in node.parts for x in _inputs(part, placement)]
    mb, s = node.microbatch, node.stage
    if node.kind is _F:
        p = placement.prev_stage[s]
        return [("F", mb, p)] if p >= 0 else []
    if node.kind is _W:
        return [("G", mb, s)]
    q = placement.next_stage[s]
    return [("F", mb, s)] + ([("G", mb, q)] if q >= 0 else [])


def _produced_by(node: Node, what: str, mb: int, s: int) -> bool:
    return (
        node.kind is _FB
        and what == "F"
        and any(p.kind is _F and p.microbatch == mb and p.stage == s for p in node.parts)
    )


def _describe_input(what: str, mb: int, s: int) -> str:
    return f"F{mb}.{s}" if what == "F" else f"the input grad of stage {s} (B{mb}.{s})"


def _cycle_message(placement, m, order, ptr, stuck, f_end, g_end) -> str:
    waits: dict[int, tuple[Node, str, int]] = {}
    for r in stuck:
        node = order[r][ptr[r]]
        for what, mb, s in _inputs(node, placement):
            if _produced_by(node, what, mb, s):
                continue
            if (f_end if what == "F" else g_end)[mb * placement.num_stages + s] is None:
                waits[r] = (node, _describe_input(what, mb, s), placement.stage_rank[s])
                break
    start = stuck[0]
    path, seen = [], set()
    r = start
    while r in waits and r not in seen:
        seen.add(r)
        path.append(r)
        r = waits[r][2]
    if r in seen:
        cycle = [*path[path.index(r) :], r]
        steps = [
            f"rank {a} at {waits[a][0]} waits for {waits[a][1]} on rank {waits[a][2]}" for a in cycle[:-1]
        ]
        return "dependency cycle: " + "; ".join(steps)
    a = path[-1] if path else start
    node, needed, owner = waits.get(a, (order[a][ptr[a]], "an input", a))
    return f"rank {a} at {node} waits for {needed}, which rank {owner} never computes"
