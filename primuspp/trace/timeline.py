"""One timeline model for simulated and measured runs: per-rank compute intervals, memory curve, transfers."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Interval:
    """One compute node's execution. `stage` is -1 when the source does not say (Primus' older dumps).

    An FB node is one interval of kind "FB" whose forward part is (microbatch, stage, chunk) and whose
    backward part is `backward` = (kind, microbatch, stage, chunk).

    Not frozen (nor is Transfer): a trace holds hundreds of thousands of these and a frozen dataclass costs
    four times as much to build. Treat them as values all the same (`dataclasses.replace` to change one).
    """

    kind: str
    microbatch: int
    stage: int
    chunk: int
    start: float
    end: float
    backward: tuple[str, int, int, int] | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class Transfer:
    """A p2p hand-off: `kind` "F" (activation) or "B" (input grad) of (microbatch, stage) from src to dst."""

    kind: str
    microbatch: int
    stage: int
    src: int
    dst: int
    sent: float
    arrived: float


@dataclass
class RankTimeline:
    rank: int
    intervals: list[Interval]
    memory: list[tuple[float, float]] = field(default_factory=list)
    peak_memory: float = 0.0


@dataclass
class Timeline:
    """Times are in ms from the iteration start (Primus' unit); memory in the source's unit."""

    name: str
    pp: int
    vpp: int
    micro_batches: int
    ranks: list[RankTimeline]
    algorithm: str = ""
    source: str = "simulated"
    iteration: str = "0"
    transfers: list[Transfer] = field(default_factory=list)
    memory_unit: str = "microbatches"
