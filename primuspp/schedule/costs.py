"""The cost model: durations of compute nodes, comm latency and activation memory per stage."""

from __future__ import annotations

from dataclasses import dataclass, fields

from primuspp.errors import ConfigError
from primuspp.schedule.limits import MAX_COST
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import Placement

PerStage = float | tuple[float, ...]


@dataclass(frozen=True)
class CostModel:
    """Costs of one microbatch through one rank's share of the model.

    `forward`, `backward` (input-grad only), `wgrad` and `activation` are scalars (a stage costs X times its
    placement's `cost_share`, i.e. X / v) or per-stage tuples: one value per virtual stage taken as is, or
    one per rank, split evenly over that rank's stages. `comm` is the latency of one p2p transfer;
    `comm_bytes` / `bandwidth` adds a size term. `b_free_fraction` of an activation is freed by B, the rest by
    W (BW frees all): a scalar, or one value per virtual stage or per rank (a fraction: not split over
    chunks). It may be negative: B then leaves more than F saved (e.g. a weight-grad store keeping the output
    gradients for W), and W frees it all. An FB node costs `fb_overlap` x (F + B). `offload` is the time one
    OFFLOAD or RELOAD takes (moving one microbatch's activation to host or back), split over chunks like
    `activation`; the clock runs it on its rank's host link, beside compute (`timing.resume`).
    """

    forward: PerStage = 1.0
    backward: PerStage = 1.0
    wgrad: PerStage = 1.0
    comm: float = 0.0
    comm_bytes: float = 0.0
    bandwidth: float = 0.0
    activation: PerStage = 1.0
    b_free_fraction: PerStage = 0.0
    fb_overlap: float = 1.0
    offload: PerStage = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if isinstance(value, list):
                values = tuple(value)
                object.__setattr__(self, f.name, values)
            if not values:
                raise ConfigError(f"costs.{f.name}: needs at least one value", key=f"costs.{f.name}")
            for x in values:
                if not isinstance(x, int | float) or isinstance(x, bool) or not abs(x) <= MAX_COST:
                    raise ConfigError(
                        f"costs.{f.name}: must be a finite number of magnitude ≤ {MAX_COST:g} (got {x!r})",
                        key=f"costs.{f.name}",
                    )
                if f.name == "b_free_fraction":
                    if x > 1:
                        raise ConfigError(
                            f"costs.b_free_fraction: must be <= 1 (got {x})", key="costs.b_free_fraction"
                        )
                elif x < 0:
                    raise ConfigError(
                        f"costs.{f.name}: must be a number >= 0 (got {x!r})", key=f"costs.{f.name}"
                    )
        if self.comm_bytes and not self.bandwidth:
            raise ConfigError("costs.bandwidth: must be > 0 when comm_bytes is set", key="costs.bandwidth")

    @property
    def comm_time(self) -> float:
        return self.comm + (self.comm_bytes / self.bandwidth if self.comm_bytes else 0.0)

    def for_placement(self, placement: Placement) -> StageCosts:
        return StageCosts(
            forward=_per_stage("forward", self.forward, placement),
            backward=_per_stage("backward", self.backward, placement),
            wgrad=_per_stage("wgrad", self.wgrad, placement),
            activation=_per_stage("activation", self.activation, placement),
            comm=self.comm_time,
            b_free_fraction=_planning_fraction(self.b_free_fraction),
            fb_overlap=self.fb_overlap,
            b_free=_fractions(self.b_free_fraction, placement),
            offload=_per_stage("offload", self.offload, placement),
        )


def _planning_fraction(value: PerStage) -> float:
    """One fraction for the whole model: the value (or the per-stage mean), in [0, 1]. Only zb-optimal's MILP,
    which keeps a single fraction, plans with it; every other planner and the simulator use the per-stage
    fractions (`StageCosts.fractions`)."""
    if isinstance(value, tuple):
        value = sum(value) / len(value)
    return min(max(float(value), 0.0), 1.0)


def _fractions(value: PerStage, placement: Placement) -> tuple[float, ...]:
    """Per-stage fractions: a scalar everywhere, one per stage as is, one per rank on each of its stages."""
    n = placement.num_stages
    if not isinstance(value, tuple):
        return (float(value),) * n
    if len(value) == n:
        return tuple(float(x) for x in value)
    if len(value) == placement.pp:
        return tuple(float(value[placement.stage_rank[s]]) for s in range(n))
    raise ConfigError(
        f"costs.b_free_fraction: a list needs one value per virtual stage ({n}) or per rank "
        f"({placement.pp}), got {len(value)}",
        key="costs.b_free_fraction",
    )


def _per_stage(name: str, value: PerStage, placement: Placement) -> tuple[float, ...]:
    n, share = placement.num_stages, placement.cost_share
    if not isinstance(value, tuple):
        return (float(value) * share,) * n
    if len(value) == n:
        return tuple(float(x) for x in value)
    if len(value) == placement.pp:
        return tuple(float(value[placement.stage_rank[s]]) * share for s in range(n))
    raise ConfigError(
        f"costs.{name}: a list needs one value per virtual stage ({n}) or per rank ({placement.pp}), "
        f"got {len(value)}",
        key=f"costs.{name}",
    )


@dataclass(frozen=True)
class StageCosts:
    """A CostModel resolved against a placement: one value per virtual stage.

    `b_free` is the per-stage fraction B frees (`fractions()`), in the simulator and in every planner;
    `b_free_fraction` is its per-stage mean clamped to [0, 1] (the MILP of zb-optimal, which keeps one
    fraction, uses it)."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    wgrad: tuple[float, ...]
    activation: tuple[float, ...]
    comm: float
    b_free_fraction: float = 0.0
    fb_overlap: float = 1.0
    b_free: tuple[float, ...] = ()
    #: per stage, the time of one OFFLOAD or RELOAD (none given: 0.0 everywhere)
    offload: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.offload:
            object.__setattr__(self, "offload", (0.0,) * len(self.forward))

    def fraction_freed_by_b(self, stage: int) -> float:
        return self.b_free[stage] if self.b_free else self.b_free_fraction

    def fractions(self) -> tuple[float, ...]:
        """The per-stage part B frees, as the simulator and (since they share its memory model) the
        planners use it."""
        return self.b_free or (self.b_free_fraction,) * len(self.activation)

    def duration(self, node: Node) -> float:
        from primuspp.schedule.semantics import duration  # semantics imports nodes only; avoid a cycle

        return duration(node, self)


def unit_costs(placement: Placement) -> StageCosts:
    """F = B = W = 1 per stage, no comm: the costs lowering orders by."""
    n = placement.num_stages
    return StageCosts((1.0,) * n, (1.0,) * n, (1.0,) * n, (1.0,) * n, 0.0)
