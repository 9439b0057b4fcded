"""K consecutive training iterations of one schedule, with the optimizer step between them.

One simulated iteration (`sim.engine.simulate`) starts every rank at 0 and ends at the makespan. A training
run repeats it, and what happens between two iterations decides how much of the fill and drain is paid:

- **synchronous** (`post_validation=False`): the gradient-norm all-reduce before the optimizer step makes
  every rank wait for the slowest one (the barrier, taken as instantaneous), then each rank runs its
  optimizer step (`optimizer_cost`) and starts the next iteration. The step time is the makespan plus the
  optimizer step, every iteration.
- **post-validation** (`post_validation=True`): each rank runs its optimizer step as soon as its own last
  node is done (the global norm / overflow check is posted asynchronously and validated afterwards; the
  rare rollback is not modelled) and starts the next iteration after it. One iteration's drain then
  overlaps the next one's fill wherever the data dependencies allow.

Within an iteration every node is timed by the simulator's clock (`schedule.timing.resume`: a node starts
when its rank is free and its inputs have arrived, `comm` later from another rank); the only change is that
a rank is free from its release time (the end of its previous optimizer step) rather than from 0. Iterations
share no data, so they are timed one after the other.

Figures (`IterationRun`): `iteration_ends[k]` = when the last rank's optimizer step of iteration k ends
(from the start of the first); `steady_step_time` = (end of iteration K - end of iteration 1) / (K - 1),
what a long run pays per step once the first fill is behind it (with K = 1: the single iteration's end);
`steady_bubble_rate` = 1 - mean over ranks of (compute + optimizer time per iteration) / steady step time.
With K = 1 and no optimizer cost these are the simulator's step time and bubble rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.limits import MAX_COST
from primuspp.schedule.semantics import duration
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import resume

#: the optimizer step's default cost (per rank, in the cost model's unit): none, so that the figures of
#: one iteration are the simulator's; pass the model's own (e.g. measured) to see what it costs
DEFAULT_OPTIMIZER_COST = 0.0
#: the most iterations one run lays out (each is one pass over the table)
MAX_ITERATIONS = 10_000
#: the most node times one run keeps (iterations x nodes; ~2.5 us and ~70 bytes each)
MAX_LAID_OUT = 2_000_000

OptimizerCost = float | Sequence[float]


@dataclass(frozen=True)
class IterationTimes:
    """One iteration: `starts[r][i]`, `ends[r][i]` of `table.compute_order()[r][i]` (absolute times), and
    rank r's optimizer step from `optimizer[r][0]` to `optimizer[r][1]`."""

    starts: list[list[float]]
    ends: list[list[float]]
    optimizer: list[tuple[float, float]]

    @property
    def end(self) -> float:
        return max((b for _, b in self.optimizer), default=0.0)


@dataclass(frozen=True)
class IterationRun:
    """K iterations of `table` under `costs` (see the module doc for the figures)."""

    table: ScheduleTable
    costs: CostModel
    post_validation: bool
    optimizer_cost: tuple[float, ...]  # per rank
    iterations: list[IterationTimes]
    busy: tuple[float, ...]  # per rank: compute time of one iteration

    @property
    def iteration_ends(self) -> list[float]:
        return [it.end for it in self.iterations]

    @property
    def first_step_time(self) -> float:
        return self.iterations[0].end

    @property
    def steady_step_time(self) -> float:
        return steady_step(self.iteration_ends)

    @property
    def steady_bubble_rate(self) -> float:
        step = self.steady_step_time
        if step <= 0:
            return 0.0
        work = [b + c for b, c in zip(self.busy, self.optimizer_cost, strict=True)]
        return 1.0 - sum(work) / len(work) / step

    @property
    def mode(self) -> str:
        return "post-validation" if self.post_validation else "synchronous"

    def record(self) -> dict[str, Any]:
        """The `iterations` object of `simulate --iterations K --json` (docs/guide.md lists its keys)."""
        return {
            "count": len(self.iterations),
            "mode": self.mode,
            "post_validation": self.post_validation,
            "optimizer_cost": list(self.optimizer_cost),
            "first_step_time": self.first_step_time,
            "steady_step_time": self.steady_step_time,
            "steady_bubble_rate": self.steady_bubble_rate,
            "iteration_ends": self.iteration_ends,
        }


def steady_step(iteration_ends: Sequence[float]) -> float:
    """(end of the last iteration - end of the first) / (K - 1): a long run's time per step once the first
    iteration's fill is paid; with one iteration, its end."""
    if len(iteration_ends) == 1:
        return iteration_ends[0]
    return (iteration_ends[-1] - iteration_ends[0]) / (len(iteration_ends) - 1)


def check_iterations(iterations: int, key: str = "--iterations") -> int:
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, int)
        or not 1 <= iterations <= MAX_ITERATIONS
    ):
        raise ConfigError(
            f"{key}: must be an integer from 1 to {MAX_ITERATIONS} (got {iterations!r})", key=key.lstrip("-")
        )
    return iterations


def optimizer_per_rank(cost: OptimizerCost, pp: int, key: str = "--optimizer-cost") -> tuple[float, ...]:
    """The optimizer step's cost on each rank: a scalar for every rank, or one value per rank."""
    values = (cost,) * pp if isinstance(cost, int | float) else tuple(cost)
    if len(values) != pp:
        raise ConfigError(
            f"{key}: needs one value or one per rank ({pp}), got {len(values)}", key=key.lstrip("-")
        )
    for x in values:
        if isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x <= MAX_COST:
            raise ConfigError(
                f"{key}: must be a finite number from 0 to {MAX_COST:g} (got {x!r})", key=key.lstrip("-")
            )
    return tuple(float(x) for x in values)


def simulate_iterations(
    table: ScheduleTable,
    costs: CostModel | None = None,
    iterations: int = 2,
    *,
    post_validation: bool = False,
    optimizer_cost: OptimizerCost = DEFAULT_OPTIMIZER_COST,
) -> IterationRun:
    """Lay out `iterations` consecutive iterations of `table` (see the module doc)."""
    check_iterations(iterations)
    costs = costs or CostModel()
    pp = table.pp
    opt = optimizer_per_rank(optimizer_cost, pp)
    placement, order, stage_costs = (
        table.placement,
        table.compute_order(),
        costs.for_placement(table.placement),
    )
    nodes = sum(len(r) for r in order)
    if iterations * nodes > MAX_LAID_OUT:
        raise ConfigError(
            f"--iterations {iterations}: {iterations} x {nodes:,} nodes is more than {MAX_LAID_OUT:,} node "
            f"times to lay out; give at most {max(1, MAX_LAID_OUT // max(nodes, 1)):,} (the steady step is "
            "reached after a few iterations)",
            key="iterations",
        )
    release = [0.0] * pp
    laid_out = []
    for _ in range(iterations):
        # the one clock, each rank free from its release (no iteration's data reaches another)
        starts, ends = [[0.0] * len(seq) for seq in order], [[0.0] * len(seq) for seq in order]
        size = table.num_microbatches * placement.num_stages
        resume(
            placement, order, stage_costs, [0] * pp, list(release), starts, ends, [None] * size, [None] * size
        )
        last = [e[-1] if e else release[r] for r, e in enumerate(ends)]
        if post_validation:
            begin = last
        else:
            barrier = max(last)
            begin = [barrier] * pp
        window = [(b, b + c) for b, c in zip(begin, opt, strict=True)]
        laid_out.append(IterationTimes(starts, ends, window))
        release = [b for _, b in window]
    # compute time per rank (a host transfer runs beside compute, on the rank's host link)
    busy = tuple(sum(duration(n, stage_costs) for n in seq if n.kind.is_compute) for seq in order)
    return IterationRun(table, costs, post_validation, opt, laid_out, busy)
