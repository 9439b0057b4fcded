"""Re-time an order after a change on one rank, keeping every time the change cannot move.

The local search (`local_search`) times hundreds of orders that differ from the current one on a single
rank, from some position `j` on. A node's start is the latest of its rank's previous end and its inputs'
arrival (`schedule.timing`); any node that the changed nodes can reach starts no earlier than the end of
the node before position `j` on that rank (`cut`), in the old order as in the new (a path out of the
changed nodes leaves them by a data edge that both orders share). So every node that started before `cut`
keeps its start and end exactly, and the rest is timed again by the timing loop itself (`timing.resume`):
the same floats as a full timing, in a fraction of the work when the change is late in the step (the
critical-chain swaps are tried latest first).
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import ACT, outputs
from primuspp.schedule.timing import Timing, resume


def retime(
    placement: Placement,
    order: Sequence[Sequence[Node]],
    costs: StageCosts,
    old: Timing,
    rank: int,
    j: int,
) -> Timing:
    """The timing of `order`, which equals `old.order` except on `rank` from position `j` on (the same
    nodes there, in another order). Raises ValidationError when the order cannot run (a cycle)."""
    n_stages = placement.num_stages
    cut = old.ends[rank][j - 1] if j > 0 else float("-inf")
    f_end, g_end = list(old.forward_end), list(old.grad_end)
    ptr, free, starts, ends = [], [], [], []
    for q, (st, en) in enumerate(zip(old.starts, old.ends, strict=True)):
        i = 0
        n = len(st)
        while i < n and st[i] < cut:  # kept: started before the cut
            i += 1
        ptr.append(i)
        free.append(en[i - 1] if i else 0.0)
        starts.append(st[:i] + [0.0] * (n - i))
        ends.append(en[:i] + [0.0] * (n - i))
        for node in old.order[q][i:]:  # the nodes timed again produce their outputs again
            for what, mb, s in outputs(node):
                (f_end if what == ACT else g_end)[mb * n_stages + s] = None
    return resume(placement, order, costs, ptr, free, starts, ends, f_end, g_end)
