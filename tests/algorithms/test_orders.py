"""The generators' node helpers build exactly the Node the dataclass would."""

import pickle

from primuspp.algorithms.orders import fb_node, node, nodes, one_f_one_b
from primuspp.schedule.nodes import Node, NodeKind, format_node, fused


def test_node_is_the_dataclass_node():
    for kind in (NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.OFFLOAD):
        fast, plain = node(kind, 7, 3), Node(kind, 7, 3)
        assert type(fast) is Node
        assert fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
        assert format_node(fast) == format_node(plain)
        assert pickle.loads(pickle.dumps(fast)) == plain
    assert nodes(NodeKind.F, range(3), 1) == [Node(NodeKind.F, mb, 1) for mb in range(3)]


def test_fb_node_is_fused():
    f, b = Node(NodeKind.F, 4, 0), Node(NodeKind.BW, 1, 5)
    fast, plain = fb_node(f, b), fused(f, b)
    assert fast == plain and hash(fast) == hash(plain) and str(fast) == str(plain) == "F4.0+BW1.5"


def test_one_f_one_b_rhythm():
    f = [f"f{i}" for i in range(5)]
    b = [f"b{i}" for i in range(5)]
    assert one_f_one_b(2, f, b) == ["f0", "f1", "f2", "b0", "f3", "b1", "f4", "b2", "b3", "b4"]
    assert one_f_one_b(9, f, b) == f + b  # warm-up beyond the forwards: GPipe
    assert one_f_one_b(0, f, b) == ["f0", "b0", "f1", "b1", "f2", "b2", "f3", "b3", "f4", "b4"]
    assert one_f_one_b(0, [], []) == []
