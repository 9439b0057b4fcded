import pytest

from primuspp.errors import ValidationError
from primuspp.schedule.nodes import Node, NodeKind, format_node, fused, parse_node


@pytest.mark.parametrize(
    "text",
    ["F0.0", "B3.2", "W12.7", "BW1.0", "SEND_F3.0>1", "RECV_B2.1<2", "OFFLOAD4.1", "RELOAD4.1", "F4.0+B1.7"],
)
def test_text_round_trip(text):
    assert format_node(parse_node(text)) == text


def test_fields():
    node = parse_node("SEND_B5.3>2")
    assert node == Node(NodeKind.SEND_B, 5, 3, 2)
    fb = parse_node("F1.0+BW0.1")
    assert fb.kind is NodeKind.FB and fb.microbatch == 1 and fb.parts[1] == Node(NodeKind.BW, 0, 1)


@pytest.mark.parametrize(
    "text", ["X1.0", "F1", "SEND_F1.0", "RECV_F1.0>1", "F1.0>1", "F1.0+F2.0", "F1.0+B1.0+W1.0"]
)
def test_bad_text(text):
    with pytest.raises(ValidationError, match="bad node"):
        parse_node(text)


def test_nodes_are_immutable():
    node = Node(NodeKind.F, 0, 0)
    with pytest.raises(AttributeError):
        node.stage = 1  # type: ignore[misc]


def test_fused_needs_f_and_backward():
    with pytest.raises(ValueError):
        fused(Node(NodeKind.B, 0, 0), Node(NodeKind.F, 1, 0))
