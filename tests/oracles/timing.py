"""The clock's readable reference: `timing.node_times` node by node, reading the semantics table.

Tests hold the loop (`timing.node_times`) and the array passes (`timing_arrays.solve`) equal to it."""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.errors import ValidationError
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement
from primuspp.schedule.semantics import ACT, SAVED, SEMANTICS, duration, inputs, outputs, simple_parts
from primuspp.schedule.timing import Timing, _cycle_message


def node_times_reference(
    placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]], costs: StageCosts
) -> Timing:
    """A compute node starts when its rank is free and each input it consumes has arrived (`comm` later when
    made on another rank), and a saved activation that was reloaded once its RELOAD has ended; it ends its
    duration later, and what it produces exists from then on. A host transfer (role "memory") runs on its
    rank's host link, in order: it starts when the compute before it has ended and the link is free, and
    leaves the compute stream as it was. Ranks are swept until none moves."""
    n_ranks, n_stages = len(order), placement.num_stages
    made: dict[tuple[str, int, int], float] = {}
    reloaded: dict[tuple[int, int], float] = {}
    ptr, free, link = [0] * n_ranks, [0.0] * n_ranks, [0.0] * n_ranks
    starts = [[0.0] * len(seq) for seq in order]
    ends = [[0.0] * len(seq) for seq in order]
    moved = True
    while moved:
        moved = False
        for r, seq in enumerate(order):
            while ptr[r] < len(seq):
                node = seq[ptr[r]]
                if SEMANTICS[node.kind].role == "memory":
                    ready = max(free[r], link[r])
                    end = link[r] = ready + duration(node, costs)
                    if node.kind is NodeKind.RELOAD:
                        reloaded[(node.microbatch, node.stage)] = end
                else:
                    needs = inputs(node, placement)
                    if any(x not in made for x in needs):
                        break
                    ready = free[r]
                    for what, mb, s in needs:
                        arrival = made[(what, mb, s)] + (costs.comm if placement.stage_rank[s] != r else 0.0)
                        ready = max(ready, arrival)
                    for part in simple_parts(node):
                        if SAVED in SEMANTICS[part.kind].consumes:
                            ready = max(ready, reloaded.get((part.microbatch, part.stage), 0.0))
                    end = free[r] = ready + duration(node, costs)
                    for x in outputs(node):
                        made[x] = end
                starts[r][ptr[r]], ends[r][ptr[r]] = ready, end
                ptr[r] += 1
                moved = True
    size = num_microbatches * n_stages
    f_end: list[float | None] = [None] * size
    g_end: list[float | None] = [None] * size
    for (what, mb, s), t in made.items():
        (f_end if what == ACT else g_end)[mb * n_stages + s] = t
    stuck = [r for r in range(n_ranks) if ptr[r] < len(order[r])]
    if stuck:
        raise ValidationError(_cycle_message(placement, num_microbatches, order, ptr, stuck, f_end, g_end))
    return Timing(order, starts, ends, f_end, g_end)
