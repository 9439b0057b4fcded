"""The plain lowering, node by node: what `primuspp.schedule.lowering.lower_comms` computes on arrays
(`compact.lower_compact`). Tests and bench/core_equivalence.py hold the two equal."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from primuspp.schedule.costs import unit_costs
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement, stage_peers
from primuspp.schedule.semantics import ACT, GRAD, RECV_OF, SEMANTICS, SEND_OF
from primuspp.schedule.timing import node_times


def lower_comms_reference(
    placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]]
) -> tuple[tuple[Node, ...], ...]:
    """Reference lowering: each rank's list with comm nodes inserted, as plain tuples of Nodes."""
    timing = node_times(placement, num_microbatches, order, unit_costs(placement))
    compute_starts = [
        [st for st, node in zip(timing.starts[r], seq, strict=True) if node.kind.is_compute]
        for r, seq in enumerate(order)
    ]
    fwd_peer, bwd_peer = stage_peers(placement)
    nxt, prv = placement.next_stage, placement.prev_stage
    sends_after: list[list[list[Node] | None]] = [[None] * len(seq) for seq in order]
    recvs_before: list[list[list[Node] | None]] = [[None] * (len(cs) + 1) for cs in compute_starts]
    # per kind (semantics): for each datum it produces, the rank that datum goes to from each stage, the
    # stage that consumes it there and the SEND/RECV kinds that carry it (keyed by the kind's text, which
    # hashes in C where an Enum member hashes in Python)
    route = {
        ACT: (fwd_peer, nxt, SEND_OF[ACT], RECV_OF[ACT]),
        GRAD: (bwd_peer, prv, SEND_OF[GRAD], RECV_OF[GRAD]),
    }
    out_routes = {kind.text: tuple(route[what] for what in sem.produces) for kind, sem in SEMANTICS.items()}
    # what lowering does per kind: None = nothing to send; a route = the one datum a simple kind sends
    # (F, B, BW: inlined below); True = go through its parts (a composite) or several data
    how: dict[str, object] = {}
    for kind, sem in SEMANTICS.items():
        routes = out_routes[kind.text]
        how[kind.text] = True if sem.parts or len(routes) > 1 else routes[0] if routes else None
    for r, seq in enumerate(order):
        ends, sa = timing.ends[r], sends_after[r]
        for i, node in enumerate(seq):
            step = how[node.kind.text]
            if step is None:
                continue
            if step is not True:
                peers, consumer, send_kind, recv_kind = step
                s = node.stage
                peer = peers[s]
                if peer < 0:
                    continue
                mb = node.microbatch
                sends = [Node(send_kind, mb, s, peer)]
                recvs = [(peer, Node(recv_kind, mb, consumer[s], r))]
            else:
                sends, recvs = [], []
                for part in node.parts or (node,):
                    for peers, consumer, send_kind, recv_kind in out_routes[part.kind.text]:
                        s = part.stage
                        peer = peers[s]
                        if peer >= 0:
                            mb = part.microbatch
                            sends.append(Node(send_kind, mb, s, peer))
                            recvs.append((peer, Node(recv_kind, mb, consumer[s], r)))
                if not sends:
                    continue
            sa[i] = sends
            t = ends[i]
            for peer, recv in recvs:
                # the consumer's rank receives before its first node starting at or after the producer's end
                bucket = recvs_before[peer]
                k = bisect_left(compute_starts[peer], t)
                if bucket[k] is None:
                    bucket[k] = [recv]
                else:
                    bucket[k].append(recv)

    # At each boundary between two compute nodes: memory nodes first, then one comm batch (sends of the
    # node before, receives for what follows). Batches must not be split: two batches at one boundary
    # would be completed one after the other and could wait on each other across ranks.
    lowered = []
    for r, seq in enumerate(order):
        out: list[Node] = []
        sa, rb = sends_after[r], recvs_before[r]
        pending: list[Node] | None = None
        ci = 0
        for i, node in enumerate(seq):
            if node.kind.is_compute:
                if pending:
                    out.extend(pending)
                if rb[ci]:
                    out.extend(rb[ci])
                ci += 1
                out.append(node)
                pending = sa[i]
            else:
                out.append(node)
        if pending:
            out.extend(pending)
        lowered.append(tuple(out))
    return tuple(lowered)
