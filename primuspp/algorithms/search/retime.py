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

from bisect import bisect_left
from collections.abc import Sequence

from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import ACT, SEMANTICS, outputs
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
    produces = {k: sem.produces for k, sem in SEMANTICS.items() if not sem.parts}  # a simple node's
    for q, (st, en) in enumerate(zip(old.starts, old.ends, strict=True)):
        i = bisect_left(st, cut)  # kept: started before the cut (a rank's starts never decrease)
        n = len(st)
        ptr.append(i)
        free.append(en[i - 1] if i else 0.0)
        starts.append(st[:i] + [0.0] * (n - i))
        ends.append(en[:i] + [0.0] * (n - i))
        for node in old.order[q][i:]:  # the nodes timed again produce their outputs again
            made = produces.get(node.kind)
            if made is None:  # a composite: its parts'
                for what, mb, s in outputs(node):
                    (f_end if what == ACT else g_end)[mb * n_stages + s] = None
                continue
            for what in made:
                (f_end if what == ACT else g_end)[node.microbatch * n_stages + node.stage] = None
    return resume(placement, order, costs, ptr, free, starts, ends, f_end, g_end)
