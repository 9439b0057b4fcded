"""The schedule IR: nodes, placements, tables, lowering and validation."""

from primuspp.schedule import semantics  # noqa: F401  (first: it sets NodeKind's flags and part kinds)
from primuspp.schedule.costs import CostModel, StageCosts
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind, format_node, parse_node
from primuspp.schedule.placement import Placement, make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate

__all__ = [
    "CostModel",
    "Node",
    "NodeKind",
    "Placement",
    "ScheduleTable",
    "StageCosts",
    "format_node",
    "lower_comms",
    "make_placement",
    "parse_node",
    "validate",
]
