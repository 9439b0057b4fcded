"""Every admissible schedule for a (p, m, costs, memory limit), simulated and ranked.

Candidates are every registered algorithm, with each admissible v (its default, and 2..max_vpp for those
that take a free v) and, for memory-aware algorithms, the limit itself as their activation budget.
Refused combinations are skipped, with their reasons kept for the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.errors import PrimusppError
from primuspp.schedule.costs import CostModel
from primuspp.sim.engine import SimResult
from primuspp.sim.runs import RunSpec, run


@dataclass(frozen=True)
class Candidates:
    specs: list[RunSpec]
    refused: list[tuple[str, str]]  # (name, one-line reason)


def candidate_specs(
    pp: int, micro_batches: int, costs: CostModel, mem_limit: float | None = None, max_vpp: int = 4
) -> Candidates:
    specs, refused = [], []
    for algo in ALGORITHMS.values():
        if algo.name == "zb-optimal":  # an exact solver: too slow to sweep; run it explicitly
            continue
        if algo.name == "1f1b-interleaved-padded" and micro_batches % pp == 0:  # 1f1b-interleaved's table
            continue
        vpps = sorted({algo.vpp_default, *(v for v in range(2, max_vpp + 1) if algo.vpp_ok(v))})
        for vpp in vpps:
            if not algo.vpp_ok(vpp):
                continue
            name = algo.name if vpp == algo.vpp_default else f"{algo.name}-v{vpp}"
            params = {}
            if algo.budget_param and mem_limit is not None:
                params[algo.budget_param] = mem_limit
            reason = algo.refuse(pp, vpp, micro_batches, params)
            if reason:
                refused.append((name, reason))
                continue
            specs.append(RunSpec(name, algo.name, pp, micro_batches, vpp, costs, params))
    return Candidates(specs, refused)


def simulate_candidates(candidates: Candidates) -> tuple[list[SimResult], list[tuple[str, str]]]:
    """Simulate each candidate; those whose generator refuses (e.g. budget below its floor) are refused."""
    results, refused = [], list(candidates.refused)
    for spec in candidates.specs:
        try:
            results.append(run(spec))
        except PrimusppError as err:
            refused.append((spec.name, str(err)))
    return results, refused
