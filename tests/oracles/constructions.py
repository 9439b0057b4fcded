"""Node-list forms of the array-emitting constructions (greedy, zb_timed, zbv_timed): the same decisions,
decoded one node at a time, for the tests that hold the ArrayOrder forms equal to them."""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.algorithms.search import greedy
from primuspp.algorithms.search.greedy import Plan, Policy
from primuspp.algorithms.v import zbv_timed
from primuspp.algorithms.zero_bubble import zb_timed
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement

_KINDS = greedy._KINDS


def greedy_schedule(placement: Placement, m: int, costs: StageCosts, cap: float, policy: Policy) -> Plan:
    """Reference: `schedule`'s pass (never shared), never skipping a steady phase, its order as lists of
    Nodes decoded one by one."""
    decisions, makespan, max_span, peak, _, timed, _ = greedy._plan(
        placement, m, costs, cap, policy, skip=False
    )
    order = []
    for seq in decisions:
        nodes = []
        for x in seq:
            key, kind = divmod(x, 3)
            mb, stage = divmod(key, placement.num_stages)
            nodes.append(Node(_KINDS[kind], mb, stage))
        order.append(nodes)
    return Plan(policy.name, order, makespan, max_span, peak, timed)


def zb_timed_build(
    p: int, m: int, costs: StageCosts, max_mem: int, fill_late: bool, b_first: bool, strict: bool
) -> tuple[list[list[Node]], float] | None:
    """Reference: `build` with the order as Node lists, decoded one node at a time."""
    found = zb_timed._decisions(p, m, costs, max_mem, fill_late, b_first, strict)
    if found is None:
        return None
    order = [[Node(_KINDS[x % 3], x // 3 // p, r) for x in seq] for r, seq in enumerate(found[0])]
    return order, found[1]


def zbv_timed_build(
    p: int, m: int, dur: Sequence[Sequence[float]], comm: float, max_chunks: int, fill_b: bool, fill_f: bool
) -> tuple[list[list[Node]], float] | None:
    """Reference: `build` with the order as Node lists, decoded one node at a time."""
    found = zbv_timed._decisions(p, m, dur, comm, max_chunks, fill_b, fill_f)
    if found is None:
        return None
    order = []
    for seq in found[0]:
        nodes = []
        for x in seq:
            key, kind = divmod(x, 3)
            mb, stage = divmod(key, 2 * p)
            nodes.append(Node(_KINDS[kind], mb, stage))
        order.append(nodes)
    return order, found[1]
