"""ScheduleTable: a placement, a microbatch count and each rank's ordered node list."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from primuspp.schedule.compact import LoweredRanks
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement


@dataclass(frozen=True)
class ScheduleTable:
    """`ranks[r]`: rank r's nodes in order. A table from `lower_comms` stores them compactly
    (`compact.LoweredRanks`, read as a tuple of tuples); any sequence of node sequences works."""

    placement: Placement
    num_microbatches: int
    ranks: tuple[tuple[Node, ...], ...] | LoweredRanks
    algorithm: str = "custom"
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def pp(self) -> int:
        return self.placement.pp

    @property
    def vpp(self) -> int:
        return self.placement.vpp

    @property
    def num_stages(self) -> int:
        return self.placement.num_stages

    def compute_order(self) -> tuple[tuple[Node, ...], ...]:
        """Each rank's list without comm nodes (compute and memory nodes only)."""
        if isinstance(self.ranks, LoweredRanks):  # kept as such: nothing to filter
            return self.ranks.compute_order()
        return tuple(tuple(n for n in nodes if not n.kind.is_comm) for nodes in self.ranks)

    def compute_nodes(self) -> Iterator[tuple[int, Node]]:
        for rank, nodes in enumerate(self.ranks):
            for node in nodes:
                if node.kind.is_compute:
                    yield rank, node

    def num_nodes(self) -> int:
        if isinstance(self.ranks, LoweredRanks):
            return self.ranks.num_nodes()
        return sum(len(nodes) for nodes in self.ranks)

    def record(self) -> dict[str, Any]:
        """What a run's JSON document says of the table it ran."""
        return {
            "algorithm": self.algorithm,
            "placement": self.placement.kind,
            "pp": self.pp,
            "vpp": self.vpp,
            "micro_batches": self.num_microbatches,
        }

    def describe(self) -> str:
        return (
            f"{self.algorithm} (placement={self.placement.kind}, pp={self.pp}, vpp={self.vpp}, "
            f"micro_batches={self.num_microbatches})"
        )
