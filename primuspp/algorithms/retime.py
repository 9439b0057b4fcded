"""Re-time an order after a change on one rank, keeping every time the change cannot move.

The local search (`local_search`) times hundreds of orders that differ from the current one on a single
rank, from some position `j` on. A node's start is the latest of its rank's previous end and its inputs'
arrival (`schedule.timing`); any node that the changed nodes can reach starts no earlier than the end of
the node before position `j` on that rank (`cut`), in the old order as in the new (a path out of the
changed nodes leaves them by a data edge that both orders share). So every node that started before `cut`
keeps its start and end exactly, and only the rest is timed again, by the same recurrence as
`timing.node_times_events`: the same floats as a full timing, in a fraction of the work when the change
is late in the step (the critical-chain swaps are tried latest first).

Orders of F, B and W nodes only (the local search's); `timing.node_times` remains the reference, and a test
holds the two equal on random swaps.
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.errors import ValidationError
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.timing import Timing

_F, _B, _W = NodeKind.F, NodeKind.B, NodeKind.W


def retime(
    placement: Placement,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    old: Timing,
    rank: int,
    j: int,
) -> Timing:
    """The timing of `order`, which equals `old.order` except on `rank` from position `j` on (the same
    nodes there, in another order). Raises ValidationError when the order cannot run (an input never
    produced before its consumer on a rank: a cycle)."""
    n_stages = placement.num_stages
    nxt, prv, srank = placement.next_stage, placement.prev_stage, placement.stage_rank
    fwd, bwd, wgr, comm = costs.forward, costs.backward, costs.wgrad, costs.comm
    cut = old.ends[rank][j - 1] if j > 0 else float("-inf")
    f_end = list(old.forward_end)
    g_end = list(old.grad_end)
    n_ranks = len(order)
    ptr = [0] * n_ranks
    free = [0.0] * n_ranks
    starts: list[list[float]] = []
    ends: list[list[float]] = []
    for q in range(n_ranks):
        st, en = old.starts[q], old.ends[q]
        i = 0
        n = len(st)
        while i < n and st[i] < cut:  # kept: started before the cut
            i += 1
        ptr[q] = i
        free[q] = en[i - 1] if i else 0.0
        starts.append(st[:i] + [0.0] * (n - i))
        ends.append(en[:i] + [0.0] * (n - i))
        # the nodes timed again produce their outputs again
        for node in old.order[q][i:]:
            if node.kind is _F:
                f_end[node.microbatch * n_stages + node.stage] = None
            elif node.kind is _B:
                g_end[node.microbatch * n_stages + node.stage] = None
    wait_f: dict[int, list[int]] = {}
    wait_g: dict[int, list[int]] = {}
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
            elif kind is _B:
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
                end = ready + bwd[s]
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
            else:
                raise ValueError(f"retime: {kind.text} nodes are not supported (F, B and W only)")
            st[i] = ready
            en[i] = end
            t = end
            i += 1
            if woken:
                queue.extend(woken)
        ptr[r], free[r] = i, t
    if any(ptr[q] < len(order[q]) for q in range(n_ranks)):
        raise ValidationError("retime: the order cannot run (an input is never produced before it is needed)")
    return Timing(order, starts, ends, f_end, g_end)
