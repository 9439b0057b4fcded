"""Placements: where each virtual stage lives and which stages each microbatch visits."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from primuspp.errors import ScheduleError, ValidationError

PLACEMENT_KINDS = ("linear", "loop", "v", "bidirectional")


@dataclass(frozen=True)
class Placement:
    """Maps virtual stages to (rank, chunk) and microbatches to routes.

    `routes[i]` is the ordered tuple of stages a microbatch on route i visits; microbatch `mb` takes route
    `mb % len(routes)`. Every stage belongs to exactly one route. `model_part[s]` is the slice of the model a
    stage holds (it differs from `s` only for `bidirectional`, whose second route runs a mirrored copy).
    """

    kind: str
    pp: int
    vpp: int
    stage_rank: tuple[int, ...]
    stage_chunk: tuple[int, ...]
    routes: tuple[tuple[int, ...], ...]
    model_part: tuple[int, ...]
    next_stage: tuple[int, ...] = field(init=False, repr=False, compare=False)
    prev_stage: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.stage_rank)
        nxt, prv = [-1] * n, [-1] * n
        seen = 0
        for route in self.routes:
            for a, b in pairwise(route):
                nxt[a], prv[b] = b, a
            seen += len(route)
        if seen != n or sorted(s for r in self.routes for s in r) != list(range(n)):
            raise ValidationError(f"placement {self.kind}: routes must cover stages 0..{n - 1} exactly once")
        if any(not 0 <= r < self.pp for r in self.stage_rank):
            raise ValidationError(f"placement {self.kind}: stage ranks must lie in 0..{self.pp - 1}")
        object.__setattr__(self, "next_stage", tuple(nxt))
        object.__setattr__(self, "prev_stage", tuple(prv))

    @property
    def num_stages(self) -> int:
        return len(self.stage_rank)

    @property
    def cost_share(self) -> float:
        """Fraction of one rank's share of the model that a single stage holds (costs scale by it)."""
        return 1.0 if self.kind == "bidirectional" else 1.0 / self.vpp

    def route_of(self, microbatch: int) -> tuple[int, ...]:
        return self.routes[microbatch % len(self.routes)]

    def stages_of_rank(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.stage_rank) if r == rank]

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "pp": self.pp,
            "vpp": self.vpp,
            "stage_rank": list(self.stage_rank),
            "stage_chunk": list(self.stage_chunk),
            "routes": [list(r) for r in self.routes],
            "model_part": list(self.model_part),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        try:
            return cls(
                kind=str(data["kind"]),
                pp=int(data["pp"]),
                vpp=int(data["vpp"]),
                stage_rank=tuple(int(x) for x in data["stage_rank"]),
                stage_chunk=tuple(int(x) for x in data["stage_chunk"]),
                routes=tuple(tuple(int(x) for x in r) for r in data["routes"]),
                model_part=tuple(int(x) for x in data.get("model_part", range(len(data["stage_rank"])))),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValidationError(f"placement: missing or malformed field ({err})") from None


def linear(pp: int) -> Placement:
    """One stage per rank, in rank order."""
    stages = tuple(range(pp))
    return Placement("linear", pp, 1, stages, (0,) * pp, (stages,), stages)


def loop(pp: int, vpp: int) -> Placement:
    """Interleaved: stage s on rank s % pp as chunk s // pp."""
    n = pp * vpp
    stages = tuple(range(n))
    return Placement(
        "loop", pp, vpp, tuple(s % pp for s in stages), tuple(s // pp for s in stages), (stages,), stages
    )


def v_shape(pp: int) -> Placement:
    """Two chunks per rank: stages 0..pp-1 go down ranks 0..pp-1, stages pp..2pp-1 come back up."""
    ranks = tuple(range(pp)) + tuple(reversed(range(pp)))
    stages = tuple(range(2 * pp))
    return Placement("v", pp, 2, ranks, (0,) * pp + (1,) * pp, (stages,), stages)


def bidirectional(pp: int) -> Placement:
    """DualPipe: route 0 runs stages 0..pp-1 down ranks 0..pp-1; route 1 runs stages pp..2pp-1 (a mirrored
    model copy, parts 0..pp-1) up ranks pp-1..0. Even microbatches take route 0, odd ones route 1."""
    down = tuple(range(pp))
    up = tuple(range(pp, 2 * pp))
    ranks = down + tuple(reversed(range(pp)))
    return Placement("bidirectional", pp, 2, ranks, (0,) * pp + (1,) * pp, (down, up), down + down)


def make_placement(kind: str, pp: int, vpp: int) -> Placement:
    if pp < 1:
        raise ScheduleError(f"pp must be >= 1 (got {pp})", key="pp")
    if kind == "linear":
        return linear(pp)
    if kind == "loop":
        return loop(pp, vpp)
    if kind == "v":
        return v_shape(pp)
    if kind == "bidirectional":
        return bidirectional(pp)
    raise ScheduleError(
        f"unknown placement {kind!r} (allowed: {', '.join(PLACEMENT_KINDS)})", key="placement"
    )


def stage_peers(placement: Placement) -> tuple[list[int], list[int]]:
    """Per stage: the rank its activation goes to and the rank its input grad goes to (-1: none/local)."""
    srank = placement.stage_rank
    fwd, bwd = [], []
    for s, r in enumerate(srank):
        q, p = placement.next_stage[s], placement.prev_stage[s]
        fwd.append(srank[q] if q >= 0 and srank[q] != r else -1)
        bwd.append(srank[p] if p >= 0 and srank[p] != r else -1)
    return fwd, bwd
