"""Schedule nodes: the atoms of a schedule table, with their compact text form."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cache

from primuspp.errors import ValidationError


class NodeKind(Enum):
    """Node kinds. What each one means is `schedule/semantics.py`'s table; `is_compute`, `is_comm`,
    `is_memory`, `is_send` are plain member attributes set from that table when it is imported (at the end
    of this module), rather than properties: they are read for every node in every pass."""

    F = "F"
    B = "B"
    W = "W"
    BW = "BW"
    FB = "FB"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    OFFLOAD = "OFFLOAD"
    RELOAD = "RELOAD"

    is_compute: bool
    is_comm: bool
    is_memory: bool
    is_send: bool
    parts: tuple  # per part of a composite kind, the kinds that may fill it (() for a simple kind)
    text: str  # == value, as a plain attribute (Enum.value is a slow descriptor on hot paths)


for _kind in NodeKind:
    _kind.text = _kind.value


@dataclass(frozen=True, slots=True)
class Node:
    """One step of a rank's schedule.

    Compute nodes name a (microbatch, virtual stage). Comm nodes carry the (microbatch, stage) of the compute
    node on their own rank (the producer for a SEND, the consumer for a RECV) and the peer rank. An `FB` node
    runs a forward and a backward of different (microbatch, stage) overlapped: `parts` holds the two, and its
    own microbatch/stage are those of the forward part.
    """

    kind: NodeKind
    microbatch: int
    stage: int
    peer: int | None = None
    parts: tuple[Node, ...] = ()

    def __str__(self) -> str:
        return format_node(self)


def fused(forward: Node, backward: Node) -> Node:
    """An FB node running `forward` (an F) and `backward` (a B or BW) overlapped: the kinds its parts may
    have are the semantics table's."""
    first, second = NodeKind.FB.parts
    if forward.kind not in first or backward.kind not in second:
        raise ValueError(f"FB needs an F and a B/BW, got {forward} and {backward}")
    return Node(NodeKind.FB, forward.microbatch, forward.stage, None, (forward, backward))


def format_node(node: Node) -> str:
    kind = node.kind
    if node.parts:
        return "+".join(format_node(p) for p in node.parts)
    text = f"{kind.value}{node.microbatch}.{node.stage}"
    if node.peer is not None:
        text += (">" if kind.is_send else "<") + str(node.peer)
    return text


_KIND_BY_NAME = {k.value: k for k in NodeKind}


@cache
def _node_syntax() -> tuple[re.Pattern[str], str]:
    """The text form of a non-composite node (any kind the table lists without parts; longest name first
    so that BW is not read as B), and the list of those kinds for the error message; built on first use
    from the semantics table (two threads' first calls may both build it: each gets a whole pair)."""
    simple = [k.value for k in NodeKind if not k.parts]
    names = "|".join(sorted(simple, key=len, reverse=True))
    return re.compile(rf"^({names})(\d+)\.(\d+)(?:([<>])(\d+))?$"), ", ".join(simple)


def parse_node(text: str) -> Node:
    """Inverse of `format_node`: `F3.0`, `BW1.2`, `SEND_F3.0>1`, `RECV_B2.1<2`, `F4.0+B1.7`."""
    if "+" in text:
        pieces = text.split("+")
        if len(pieces) != 2:
            raise ValidationError(f"bad node {text!r}: an FB node joins exactly one F and one B/BW with '+'")
        try:
            return fused(parse_node(pieces[0]), parse_node(pieces[1]))
        except ValueError as err:
            raise ValidationError(f"bad node {text!r}: {err}") from None
    node_re, kinds = _node_syntax()
    match = node_re.match(text.strip())
    if match is None:
        raise ValidationError(
            f"bad node {text!r}: expected KIND<mb>.<stage> with KIND in {kinds} (comm nodes end in >peer or "
            "<peer), e.g. F3.0, SEND_F3.0>1"
        )
    name, mb, stage, arrow, peer = match.groups()
    kind = _KIND_BY_NAME[name]
    if kind.is_comm:
        expected = ">" if kind.is_send else "<"
        if arrow != expected:
            raise ValidationError(f"bad node {text!r}: {name} needs its peer as '{expected}rank'")
        return Node(kind, int(mb), int(stage), int(peer))
    if arrow is not None:
        raise ValidationError(f"bad node {text!r}: only SEND/RECV nodes name a peer")
    return Node(kind, int(mb), int(stage))
