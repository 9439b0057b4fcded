"""Lowering: add the SEND/RECV nodes a compute order needs.

Every cross-rank hand-off gets a SEND right after its producer and a RECV on the consumer's rank. The
RECV is placed before the first node the consumer's rank starts once the producer has finished, in a
unit-cost run of the order (F = B = W = 1): as early as the data can exist. Because all hand-offs are placed
at moments of one global linear order, every rank meets its sends and receives in a consistent order: the
result is FIFO-paired per rank pair and cannot deadlock under rendezvous semantics, whatever the compute
order (provided it is acyclic). The V turn and any other same-rank hand-off needs no comm node.

All comm nodes between two compute nodes form one batch; memory nodes (OFFLOAD/RELOAD) do not split it.
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.schedule.array_order import ArrayOrder, order_arrays, rank_lengths
from primuspp.schedule.compact import LoweredRanks, lower_compact
from primuspp.schedule.costs import unit_costs
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement
from primuspp.schedule.timing import node_time_arrays, node_times

#: from this many nodes on, the unit-cost run is timed by the array passes (below, the loop is quicker)
ARRAY_MIN_NODES = 2_000


def lower_comms(placement: Placement, num_microbatches: int, order: Sequence[Sequence[Node]]) -> LoweredRanks:
    """Return each rank's list with comm nodes inserted. `order` holds compute and memory nodes only.

    The result reads as a tuple of per-rank node tuples; it stores the comm nodes as arrays
    (`compact.LoweredRanks`). tests/oracles/lowering.py is the plain form (tests hold the two equal)."""
    if not isinstance(order, ArrayOrder):  # an ArrayOrder is read as arrays: its Nodes are never built
        order = tuple(tuple(seq) for seq in order)
    if sum(rank_lengths(order)) < ARRAY_MIN_NODES:  # small: lists are quicker than numpy set-up
        timing = node_times(placement, num_microbatches, order, unit_costs(placement))
        return lower_compact(placement, num_microbatches, order, timing)
    rows = order_arrays(order)  # built once: the timing's array passes and the lowering both read them
    # the times go straight to lower_compact, which frees them once read (the peak memory of a large build)
    times = [node_time_arrays(placement, num_microbatches, order, unit_costs(placement), rows)]
    return lower_compact(placement, num_microbatches, order, times.pop(), rows)
