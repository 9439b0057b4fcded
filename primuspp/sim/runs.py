"""A simulation request (one named run of one algorithm) and its JSON summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from primuspp.algorithms.registry import build_schedule, refusal
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.table import ScheduleTable

if TYPE_CHECKING:
    from primuspp.sim.engine import SimResult


@dataclass(frozen=True)
class RunSpec:
    name: str
    algorithm: str
    pp: int | None  # None only for file: tables, which carry their own
    micro_batches: int | None
    vpp: int | None = None
    costs: CostModel = field(default_factory=CostModel)
    params: dict[str, Any] = field(default_factory=dict)
    max_nodes: int | None = None  # None: primuspp.schedule.limits.DEFAULT_MAX_NODES


def build(spec: RunSpec) -> ScheduleTable:
    """The run's validated table (refused in one line when the algorithm or the node limit says no)."""
    return build_schedule(
        spec.algorithm,
        spec.pp,
        spec.vpp,
        spec.micro_batches,
        spec.costs,
        max_nodes=spec.max_nodes,
        **spec.params,
    )


def run(spec: RunSpec) -> SimResult:
    from primuspp.sim.engine import simulate  # numpy: imported when a run is simulated

    return simulate(build(spec), spec.costs, spec.name)


def split_refused(specs: list[RunSpec]) -> tuple[list[RunSpec], list[dict[str, str]]]:
    """A sweep's runs split into those to simulate and those their algorithm refuses (`{"name",
    "algorithm", "reason"}` each, the reason one line). Raises the first refusal when every run is
    refused: there is nothing to show."""
    kept, refused = [], []
    for spec in specs:
        reason = refusal(spec.algorithm, spec.pp, spec.vpp, spec.micro_batches, spec.params)
        if reason:
            refused.append({"name": spec.name, "algorithm": spec.algorithm, "reason": reason})
        else:
            kept.append(spec)
    if refused and not kept:
        more = f" (and {len(refused) - 1} more runs refused)" if len(refused) > 1 else ""
        raise ScheduleError(f"{refused[0]['reason']}{more}", key="micro_batches")
    return kept, refused


def summary(result: SimResult) -> dict[str, Any]:
    """The `--json` result record (docs/getting-started.md lists its keys)."""
    m, table = result.metrics, result.table
    return {
        "name": result.name,
        "algorithm": table.algorithm,
        "pp": table.pp,
        "vpp": table.vpp,
        "micro_batches": table.num_microbatches,
        "step_time": m.step_time,
        "bubble_rate": m.bubble_rate,
        "steady_bubble_rate": m.steady_bubble_rate,
        "peak_memory": m.peak_memory,
        "p2p_transfers": m.p2p_transfers,
        "source": result.timeline.source,
        "memory_unit": result.timeline.memory_unit,
        "params": dict(table.params),
        "per_rank": [asdict(r) for r in m.per_rank],
    }
