"""The node-semantics table: the fast paths agree with the readable reference that reads it node by node."""

from __future__ import annotations

import random

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.schedule import semantics
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind, fused
from primuspp.schedule.placement import make_placement
from primuspp.schedule.semantics import ACT, GRAD, SEMANTICS, inputs, order_memory, outputs
from primuspp.schedule.timing import node_times
from tests.oracles.memory import memory_events
from tests.oracles.timing import node_times_reference
from tests.schedule.random_orders import random_order

COSTS = (
    CostModel(),
    CostModel(0.0, 0.0, 0.0),
    CostModel((1.0, 2.0, 3.0, 4.0), 2.5, (0.5, 0.0, 1.0, 2.0), comm=0.7, fb_overlap=0.8),
)
PLACEMENTS = (("linear", 4, 1), ("loop", 4, 2), ("v", 4, 2), ("bidirectional", 4, 2))


def _same_timing(placement, m, order, stage_costs) -> None:
    fast = node_times(placement, m, order, stage_costs)
    ref = node_times_reference(placement, m, order, stage_costs)
    assert fast.starts == ref.starts and fast.ends == ref.ends
    assert fast.forward_end == ref.forward_end and fast.grad_end == ref.grad_end


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n != "zb-optimal"])
@pytest.mark.parametrize("costs", COSTS, ids=["unit", "zero", "unequal"])
def test_fast_timing_is_the_reference_on_every_algorithm(name, costs):
    table = build_schedule(name, 4, None, 8, costs)
    stage_costs = costs.for_placement(table.placement)
    _same_timing(table.placement, 8, table.compute_order(), stage_costs)


@pytest.mark.parametrize("kind,pp,vpp", PLACEMENTS)
def test_fast_timing_is_the_reference_on_random_orders(kind, pp, vpp):
    placement = make_placement(kind, pp, vpp)
    rng = random.Random(7)
    for costs in COSTS:
        for _ in range(5):
            order = random_order(placement, 6, rng)
            _same_timing(placement, 6, order, costs.for_placement(placement))


def test_durations_follow_the_table():
    stage_costs = COSTS[2].for_placement(make_placement("linear", 4, 1))
    table = semantics.kind_durations(stage_costs)
    for s in range(4):
        assert table[NodeKind.BW][s] == stage_costs.backward[s] + stage_costs.wgrad[s]
        for kind in (NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW):
            assert semantics.duration(Node(kind, 0, s), stage_costs) == table[kind][s]
    fb = fused(Node(NodeKind.F, 1, 2), Node(NodeKind.BW, 0, 2))
    assert semantics.duration(fb, stage_costs) == pytest.approx(0.8 * (3.0 + 2.5 + 1.0))
    assert semantics.duration(Node(NodeKind.OFFLOAD, 0, 1), stage_costs) == 0.0


def test_fb_is_the_composition_of_its_parts():
    placement = make_placement("linear", 3, 1)
    f, b = Node(NodeKind.F, 2, 1), Node(NodeKind.B, 0, 1)
    fb = fused(f, b)
    assert outputs(fb) == outputs(f) + outputs(b) == [(ACT, 2, 1), (GRAD, 0, 1)]
    assert inputs(fb, placement) == inputs(f, placement) + inputs(b, placement)
    # a part's input the other part makes is not waited for
    own = fused(Node(NodeKind.F, 0, 1), Node(NodeKind.BW, 0, 1))
    assert (ACT, 0, 1) not in inputs(own, placement)
    curve, peak = order_memory([fb], [1.0, 1.0, 1.0], [0.25, 0.25, 0.25], [3.0], [5.0])
    assert curve == [(3.0, 1.0), (5.0, 0.75)] and peak == 1.0  # F allocates at start, B frees at end


def test_memory_follows_the_table():
    act, bf = [2.0], [0.25]
    order = [
        Node(NodeKind.F, 0, 0),
        Node(NodeKind.OFFLOAD, 0, 0),
        Node(NodeKind.RELOAD, 0, 0),
        Node(NodeKind.B, 0, 0),
        Node(NodeKind.W, 0, 0),
        Node(NodeKind.F, 1, 0),
        Node(NodeKind.BW, 1, 0),
    ]
    curve, peak = order_memory(order, act, bf)
    assert curve == [(0, 2.0), (1, 0.0), (2, 2.0), (3, 1.5), (4, 0.0), (5, 2.0), (6, 0.0)]
    assert peak == 2.0
    events = [(i, phase) for i, phase, _ in memory_events(order, act, bf)]
    assert events == [(0, 0), (1, 1), (2, 0), (3, 1), (4, 1), (5, 0), (6, 1)]  # OFFLOAD frees at its end


@pytest.mark.parametrize("kind,pp,vpp", PLACEMENTS)
def test_lowering_sends_what_the_table_says(kind, pp, vpp):
    """Every SEND lowering emits after a compute node is one of the hand-offs `semantics.sends` names."""
    placement = make_placement(kind, pp, vpp)
    order = random_order(placement, 6, random.Random(3))
    for r, seq in enumerate(lower_comms(placement, 6, order)):
        expected, got = [], []
        for node in seq:
            if node.kind.is_compute:
                expected.extend(send for send, _, _ in semantics.sends(node, placement))
            elif node.kind in (NodeKind.SEND_F, NodeKind.SEND_B):
                got.append(node)
        assert got == expected, r


def test_every_kind_has_a_row():
    assert set(SEMANTICS) == set(NodeKind)
    for kind, sem in SEMANTICS.items():
        assert sem.role == ("compute" if kind.is_compute else "comm" if kind.is_comm else "memory")


@pytest.mark.parametrize("kind,pp,vpp", PLACEMENTS)
def test_fast_memory_is_the_reference(kind, pp, vpp):
    """`order_memory` (inlined effects) yields the levels of `memory_events` (the table, effect by effect)."""
    placement = make_placement(kind, pp, vpp)
    rng = random.Random(11)
    n = placement.num_stages
    for _ in range(5):
        amount = [rng.uniform(0.5, 3.0) for _ in range(n)]
        b_free = [rng.uniform(-1.0, 1.0) for _ in range(n)]
        for seq in random_order(placement, 6, rng):
            level, expected = 0.0, []
            for i, phase, delta in memory_events(seq, amount, b_free):
                level += delta
                level = 0.0 if -1e-9 < level < 1e-9 else level
                expected.append((i, phase, level))
            starts = [2.0 * i for i in range(len(seq))]
            ends = [2.0 * i + 1 for i in range(len(seq))]
            curve, peak = order_memory(seq, amount, b_free, starts, ends)
            assert curve == [(2.0 * i + phase, level) for i, phase, level in expected]
            assert peak == max([0.0] + [lv for _, _, lv in expected])


def test_validation_follows_a_changed_table(monkeypatch):
    """Validation reads its rules from the table: with the backward allowed only as B then W, a table using BW
    is refused (the array validator steps aside, the walk words the message from the table)."""
    import importlib

    from primuspp.errors import ValidationError
    from primuspp.schedule import compact_validation, validation

    table = build_schedule("1f1b", 2, None, 2)
    validation.validate(table)
    monkeypatch.setattr(
        semantics, "COMPLETION", (("forward", ((NodeKind.F,),)), ("backward", ((NodeKind.B, NodeKind.W),)))
    )
    try:
        importlib.reload(compact_validation)
        importlib.reload(validation)
        assert not compact_validation.RULES_MATCH
        with pytest.raises(ValidationError, match=r"^rank 0: missing backward of 0\.0 \(B\+W\)$"):
            validation.validate(table)
    finally:
        monkeypatch.undo()
        importlib.reload(compact_validation)
        importlib.reload(validation)
    assert compact_validation.RULES_MATCH
    validation.validate(table)


def test_timing_follows_a_changed_table(monkeypatch):
    """Durations come from the table (a changed dependency rule is an edit of the clock, `timing.resume`)."""
    import dataclasses

    from primuspp.schedule import timing

    placement = make_placement("linear", 2, 1)
    order = [
        [Node(NodeKind.F, 0, 0), Node(NodeKind.BW, 0, 0)],
        [Node(NodeKind.F, 0, 1), Node(NodeKind.BW, 0, 1)],
    ]
    costs = CostModel().for_placement(placement)
    monkeypatch.setitem(
        SEMANTICS, NodeKind.F, dataclasses.replace(SEMANTICS[NodeKind.F], cost=("forward", "wgrad"))
    )
    assert timing.node_times(placement, 1, order, costs).ends == [[2.0, 8.0], [4.0, 6.0]]  # F = 1 + 1, BW = 2
