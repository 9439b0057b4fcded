"""Start and end time of every node of a compute order under a cost model: the one clock.

Each rank runs its compute nodes in order; a node starts when its rank is free and its inputs have arrived
(the producer's end, plus `comm` when the producer lives on another rank). Sends never block: this is the
asynchronous model the simulator uses. A host transfer (OFFLOAD / RELOAD) runs on the rank's host link, one
at a time in order, beside compute: it starts once the compute before it in the order has ended and the
link is free; the node that uses a reloaded activation waits for its RELOAD to end. The simulator, lowering
and the searches time orders here (`retime` resumes the loop after a one-rank change), and every duration
comes from the semantics table (`semantics.kind_durations`, a composite's `overlap`), so a new duration is an
edit there and a new rule an edit of `resume`. `node_times` is the loop, one pass in dependency order (a
rank that meets a missing input parks on it and is woken when it is produced); `node_time_arrays` gives the
same times, bit for bit, from the array passes of `timing_arrays` where they apply (the simulator's and the
lowering's large orders, read as columns, where that is several times quicker).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from primuspp.errors import ValidationError
from primuspp.schedule.array_order import rank_lengths
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import ACT, duration, inputs, kind_durations, outputs

_F, _B, _W, _BW, _FB, _RELOAD = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB, NodeKind.RELOAD


@dataclass(frozen=True)
class Timing:
    """`starts[r][i]`, `ends[r][i]`: times of `order[r][i]` (comm nodes get zero-length slots, host
    transfers their time on the host link).
    `forward_end[key]` / `grad_end[key]`, key = microbatch * stages + stage: when the activation / the input
    grad of (microbatch, stage) was produced."""

    order: Sequence[Sequence[Node]]
    starts: list[list[float]]
    ends: list[list[float]]
    forward_end: list[float | None]
    grad_end: list[float | None]


def node_time_arrays(
    placement: Placement,
    num_microbatches: int,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    rows: dict[str, Any] | None = None,
) -> Any:
    """`node_times` as flat numpy arrays (`timing_arrays.NodeTimeArrays`): the array passes, or the loop
    where they do not apply; `rows`: the order's `array_order.order_arrays` when the caller has them (a
    lowered table keeps them)."""
    import numpy as np

    from primuspp.schedule import timing_arrays

    got = timing_arrays.solve(placement, num_microbatches, order, costs, rows)
    if got is not None:
        return got
    timing = node_times(placement, num_microbatches, order, costs)
    first = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(rank_lengths(order), out=first[1:])
    return timing_arrays.NodeTimeArrays(
        first,
        np.array([t for row in timing.starts for t in row], dtype=np.float64),
        np.array([t for row in timing.ends for t in row], dtype=np.float64),
        np.array([np.nan if t is None else t for t in timing.forward_end], dtype=np.float64),
        np.array([np.nan if t is None else t for t in timing.grad_end], dtype=np.float64),
    )


@lru_cache(maxsize=64)
def input_delays(placement: Placement, comm: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per stage s, how long after its producer ends a node of stage s has its activation (made by
    `prev_stage[s]`) and its input grad (made by `next_stage[s]`) on its rank: `comm` across ranks, nothing
    on one rank (sends never block). The clock's one rule for inputs: a node starts at the later of its
    rank's free time and each input's end plus this; `resume` and the list schedulers (`greedy`,
    `zb_timed`, `w_pass`) all add these."""
    srank = placement.stage_rank

    def delays(step: Sequence[int]) -> tuple[float, ...]:
        return tuple(comm if q >= 0 and srank[q] != srank[s] else 0.0 for s, q in enumerate(step))

    return delays(placement.prev_stage), delays(placement.next_stage)


def node_times(
    placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]], costs: StageCosts
) -> Timing:
    """The times of `order`, by the loop: in dependency order, a rank that meets a missing input parks on it
    and is woken when it is produced. Any table, any costs; it words a cycle's error."""
    size = num_microbatches * placement.num_stages
    n_ranks = len(order)
    return resume(
        placement,
        order,
        costs,
        [0] * n_ranks,
        [0.0] * n_ranks,
        [[0.0] * len(seq) for seq in order],
        [[0.0] * len(seq) for seq in order],
        [None] * size,
        [None] * size,
    )


def resume(
    placement: Placement,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    ptr: list[int],
    free: list[float],
    starts: list[list[float]],
    ends: list[list[float]],
    f_end: list[float | None],
    g_end: list[float | None],
    link: list[float] | None = None,
    reloaded: dict[int, float] | None = None,
) -> Timing:
    """The loop from a state: rank r has timed its first `ptr[r]` nodes (their `starts`/`ends` filled in) and
    is free at `free[r]`; `f_end`/`g_end` hold what they produced (None: not yet); `link[r]`: when rank r's
    host link is free, `reloaded[key]`: when a RELOAD brought back (microbatch, stage) key's activation
    (None: no transfer yet). Fills in the rest, in place, and returns the timing (`node_times` starts
    from nothing; `algorithms.retime` from the part of an earlier timing a change on one rank cannot move)."""
    n_stages = placement.num_stages
    nxt, prv = placement.next_stage, placement.prev_stage
    dur = kind_durations(costs)
    fwd, bwd, bwd_w, wgr = dur[_F], dur[_B], dur[_BW], dur[_W]
    f_hop, g_hop = input_delays(placement, costs.comm)
    fb_overlap = costs.fb_overlap
    wait_f: dict[int, list[int]] = {}
    wait_g: dict[int, list[int]] = {}
    n_ranks = len(order)
    queue = list(range(n_ranks - 1, -1, -1))
    link = [0.0] * n_ranks if link is None else link
    reloaded = {} if reloaded is None else reloaded

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
                    e += f_hop[s]
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
                if reloaded:
                    e = reloaded.get(key, 0.0)
                    if e > ready:
                        ready = e
                q = nxt[s]
                if q >= 0:
                    e = g_end[key - s + q]
                    if e is None:
                        wait_g.setdefault(key - s + q, []).append(r)
                        break
                    e += g_hop[s]
                    if e > ready:
                        ready = e
                end = ready + (bwd[s] if kind is _B else bwd_w[s])
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
                e += f_hop[s]
                if e > ready:
                    ready = e
                if bkey != key:
                    e = f_end[bkey]
                    if e is None:
                        wait_f.setdefault(bkey, []).append(r)
                        break
                    if e > ready:
                        ready = e
                if reloaded:
                    e = reloaded.get(bkey, 0.0)
                    if e > ready:
                        ready = e
                if q >= 0:
                    e = g_end[bkey - bs + q]
                    if e is None:
                        wait_g.setdefault(bkey - bs + q, []).append(r)
                        break
                    e += g_hop[bs]
                    if e > ready:
                        ready = e
                back = bwd[bs] if bpart.kind is _B else bwd_w[bs]
                end = ready + fb_overlap * (fwd[s] + back)
                f_end[key] = end
                g_end[bkey] = end
                woken = (wait_f.pop(key, None) or []) + (wait_g.pop(bkey, None) or [])
            elif kind.is_compute:  # a kind with no branch above: its inputs and outputs read from the table
                got = _other_compute(node, r, ready, placement, costs, f_end, g_end, wait_f, wait_g)
                if got is None:
                    break
                end, woken = got
            else:
                # a host transfer: on the rank's host link, after the compute before it, not on the compute
                # stream (`t` stays); what it brings back is there at its end
                if link[r] > ready:
                    ready = link[r]
                d = dur.get(kind)
                link[r] = end = ready + d[s] if d else ready
                if kind is _RELOAD:
                    reloaded[key] = end
                st[i], en[i] = ready, end
                i += 1
                continue
            st[i] = ready
            en[i] = t = end
            i += 1
            if woken:
                queue.extend(woken)
        ptr[r], free[r] = i, t

    stuck = [r for r in range(n_ranks) if ptr[r] < len(order[r])]
    if stuck:
        m = len(f_end) // n_stages if n_stages else 0
        raise ValidationError(_cycle_message(placement, m, order, ptr, stuck, f_end, g_end))
    return Timing(order, starts, ends, f_end, g_end)


def _other_compute(node, r, ready, placement, costs, f_end, g_end, wait_f, wait_g):
    """(end, ranks to wake) of a compute node of a kind `resume` has no branch for, from the semantics table;
    None (the rank parked on the missing input) when an input is not made yet."""
    n_stages = placement.num_stages
    for what, mb, q in inputs(node, placement):
        k = mb * n_stages + q
        e = (f_end if what == ACT else g_end)[k]
        if e is None:
            (wait_f if what == ACT else wait_g).setdefault(k, []).append(r)
            return None
        if placement.stage_rank[q] != r:
            e += costs.comm
        ready = max(ready, e)
    end = ready + duration(node, costs)
    woken: list[int] = []
    for what, mb, q in outputs(node):
        k = mb * n_stages + q
        (f_end if what == ACT else g_end)[k] = end
        woken += (wait_f if what == ACT else wait_g).pop(k, [])
    return end, woken


def _describe_input(what: str, mb: int, s: int) -> str:
    return f"F{mb}.{s}" if what == ACT else f"the input grad of stage {s} (B{mb}.{s})"


def _cycle_message(placement, m, order, ptr, stuck, f_end, g_end) -> str:
    waits: dict[int, tuple[Node, str, int]] = {}
    for r in stuck:
        node = order[r][ptr[r]]
        for what, mb, s in inputs(node, placement):
            if (f_end if what == ACT else g_end)[mb * placement.num_stages + s] is None:
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
