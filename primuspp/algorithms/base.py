"""What every algorithm declares: names, placement, admissible (p, v, m), parameters, memory class."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any

from primuspp.schedule.nodes import Node

if TYPE_CHECKING:
    from primuspp.schedule.costs import CostModel

#: each rank's compute and memory nodes in order: lists of Nodes, or an `ArrayOrder`
#: (`schedule/array_order.py`), which reads as a tuple of Node tuples
ComputeOrder = Sequence[Sequence[Node]]


@dataclass(frozen=True)
class Param:
    """An extra keyword an algorithm accepts (e.g. `max_mem`)."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] = ()


def boolean(value: Any) -> bool:
    """A Param type for flags given as YAML/CLI text or as booleans (`bool("false")` would be True)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


boolean.__name__ = "bool"


@dataclass(frozen=True)
class GenerationRequest:
    """What a generator gets. `report` is filled by generators that have results to state beside the
    order (a solver's bound and gap, the policy that won); `build_schedule` keeps it in the table's params
    under the key "report"."""

    pp: int
    vpp: int
    micro_batches: int
    costs: CostModel
    params: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Algorithm:
    """A schedule generator's declared contract, and where the generator lives.

    `refuse(pp, vpp, m, params)` returns a one-line reason when the input is outside the algorithm's domain
    (checked before generation), or None. `generator` is "module:function"; the module (with its numpy and
    search code) is imported when `generate` is first used, so listing, checking and refusing import none.
    `generate(request)` returns the compute order per rank (no comm nodes).
    """

    name: str
    aliases: tuple[str, ...]
    placement: str
    summary: str
    memory: str
    constraints: str
    vpp_default: int
    vpp_rule: str
    vpp_ok: Callable[[int], bool]
    generator: str
    refuse: Callable[[int, int, int, dict[str, Any]], str | None] = lambda p, v, m, params: None
    params: tuple[Param, ...] = ()
    uses_costs: bool = False
    #: the parameter that takes a per-rank activation budget (`--mem-limit`), for memory-aware algorithms
    budget_param: str | None = None

    @property
    def generate(self) -> Callable[[GenerationRequest], ComputeOrder]:
        module, function = self.generator.split(":")
        return getattr(import_module(module), function)
