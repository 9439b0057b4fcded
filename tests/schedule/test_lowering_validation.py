import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ValidationError
from primuspp.schedule.formats import from_text, to_text
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind, parse_node
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from tests.schedule.random_orders import random_order


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["linear", "loop", "v", "bidirectional"]),
    pp=st.integers(1, 5),
    vpp=st.integers(2, 3),
    m=st.integers(1, 6),
    seed=st.integers(0, 10**6),
)
def test_any_acyclic_order_lowers_to_a_valid_table(kind, pp, vpp, m, seed):
    """Lowering places every hand-off at one moment of a global order: FIFO-paired and deadlock-free for any
    acyclic compute order, with split or full backwards, FB nodes and offload/reload."""
    pl = make_placement(kind, pp, vpp if kind == "loop" else 1)
    order = random_order(pl, m, random.Random(seed))
    table = ScheduleTable(pl, m, lower_comms(pl, m, order))
    validate(table)
    assert table.compute_order() == tuple(tuple(r) for r in order)


def test_v_turn_needs_no_p2p():
    pl = make_placement("v", 2, 2)
    order = [
        [parse_node(t) for t in ["F0.0", "F0.3", "BW0.3", "BW0.0"]],
        [parse_node(t) for t in ["F0.1", "F0.2", "BW0.2", "BW0.1"]],
    ]
    ranks = lower_comms(pl, 1, order)
    comm = [n for nodes in ranks for n in nodes if n.kind.is_comm]
    assert {(n.kind, n.stage) for n in comm} == {
        (NodeKind.SEND_F, 0),
        (NodeKind.RECV_F, 1),
        (NodeKind.SEND_F, 2),
        (NodeKind.RECV_F, 3),
        (NodeKind.SEND_B, 3),
        (NodeKind.RECV_B, 2),
        (NodeKind.SEND_B, 1),
        (NodeKind.RECV_B, 0),
    }
    validate(ScheduleTable(pl, 1, ranks))


def test_recv_sits_in_the_batch_before_its_consumer():
    table = build_schedule("1f1b", 2, None, 2)
    assert to_text(table).splitlines()[2].split()[:2] == ["RECV_F0.1<0", "F0.1"]


def _with_rank(table: ScheduleTable, rank: int, nodes: list[Node]) -> ScheduleTable:
    ranks = list(table.ranks)
    ranks[rank] = tuple(nodes)
    return ScheduleTable(table.placement, table.num_microbatches, tuple(ranks), table.algorithm)


def test_planted_swap_across_dependency():
    table = build_schedule("1f1b", 4, None, 6)
    nodes = list(table.ranks[2])
    i, j = nodes.index(parse_node("F1.2")), nodes.index(parse_node("BW1.2"))
    nodes[i], nodes[j] = nodes[j], nodes[i]
    with pytest.raises(ValidationError, match=r"rank 2: BW1\.2 \(position \d+\) runs before F1\.2"):
        validate(_with_rank(table, 2, nodes))


def test_planted_dropped_recv():
    table = build_schedule("zero-bubble", 4, None, 6)
    nodes = [n for n in table.ranks[1] if n != parse_node("RECV_F3.1<0")]
    with pytest.raises(ValidationError, match=r"rank 1: F3\.1 \(position \d+\) runs before RECV_F3\.1<0"):
        validate(_with_rank(table, 1, nodes))


def test_planted_dropped_send():
    table = build_schedule("1f1b", 3, None, 3)
    nodes = [n for n in table.ranks[0] if n != parse_node("SEND_F2.0>1")]
    with pytest.raises(ValidationError, match=r"missing SEND_F2\.0>1"):
        validate(_with_rank(table, 0, nodes))


def test_planted_reversed_sends_to_one_peer():
    table = build_schedule("1f1b", 4, None, 6)
    nodes = list(table.ranks[0])
    first = nodes.index(parse_node("SEND_F0.0>1"))
    send = nodes.pop(first)
    nodes.insert(nodes.index(parse_node("SEND_F1.0>1")) + 1, send)
    with pytest.raises(ValidationError, match=r"FIFO mismatch rank 0 -> rank 1: message #0 is SEND_F1\.0>1"):
        validate(_with_rank(table, 0, nodes))


def test_planted_rendezvous_deadlock_names_the_cycle():
    text = """# primuspp schedule algorithm=custom placement=linear pp=2 vpp=1 micro_batches=2
F0.0 RECV_B0.0<1 F1.0 SEND_F0.0>1 SEND_F1.0>1 BW0.0 RECV_B1.0<1 BW1.0
RECV_F0.1<0 F0.1 BW0.1 SEND_B0.1>0 RECV_F1.1<0 F1.1 BW1.1 SEND_B1.1>0
"""
    with pytest.raises(ValidationError) as err:
        validate(from_text(text))
    msg = str(err.value)
    assert "deadlock under rendezvous semantics" in msg
    assert "rank 0 waits at RECV_B0.0<1 for rank 1" in msg and "rank 1 waits at RECV_F0.1<0 for rank 0" in msg


def test_buffered_send_assumption_is_a_deadlock():
    """Both ranks send before they receive, in separate batches: fine with buffered sends, a deadlock on
    hardware where a send waits for its receiver."""
    text = """# primuspp schedule algorithm=custom placement=linear pp=2 vpp=1 micro_batches=2
F0.0 SEND_F0.0>1 F1.0 SEND_F1.0>1 RECV_B0.0<1 BW0.0 RECV_B1.0<1 BW1.0
RECV_F0.1<0 F0.1 BW0.1 SEND_B0.1>0 F1.1 RECV_F1.1<0 BW1.1 SEND_B1.1>0
"""
    with pytest.raises(ValidationError, match=r"runs before RECV_F1\.1<0"):
        validate(from_text(text))


def test_missing_and_duplicate_nodes():
    table = build_schedule("zero-bubble", 2, None, 2)
    nodes = [n for n in table.ranks[0] if n != parse_node("W1.0")]
    with pytest.raises(ValidationError, match=r"missing W1\.0 after B1\.0"):
        validate(_with_rank(table, 0, nodes))
    nodes = [*table.ranks[0], parse_node("W1.0")]
    with pytest.raises(ValidationError, match=r"appears twice"):
        validate(_with_rank(table, 0, nodes))


def test_node_on_wrong_rank():
    table = build_schedule("1f1b", 2, None, 1)
    nodes = [*table.ranks[0], Node(NodeKind.F, 0, 1)]
    with pytest.raises(ValidationError, match="stage 1 lives on rank 1"):
        validate(_with_rank(table, 0, nodes))


def test_dependency_cycle_in_compute_order_is_named():
    pl = make_placement("linear", 2, 1)
    order = [
        [parse_node(t) for t in ["F0.0", "BW0.0", "F1.0", "BW1.0"]],
        [parse_node(t) for t in ["F1.1", "BW1.1", "F0.1", "BW0.1"]],
    ]
    with pytest.raises(
        ValidationError, match=r"dependency cycle: rank 0 at BW0\.0 waits for .* on rank 1; rank 1"
    ):
        lower_comms(pl, 2, order)
