"""Measured steps into the shared trace model: one `Timeline` per step, transfers matched across ranks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from primuspp.runtime.runner import RankStep
from primuspp.schedule.table import ScheduleTable
from primuspp.trace.timeline import RankTimeline, Timeline, Transfer


def aligned(ranks: Sequence[RankStep]) -> list[RankStep]:
    """The ranks' steps on one time axis when they ran on one host (same clock), else as they are."""
    origins = [r.origin_ns for r in ranks]
    if not ranks or any(o is None for o in origins) or len({r.host for r in ranks}) != 1:
        return list(ranks)
    first = min(origins)  # type: ignore[type-var]
    out = []
    for r in ranks:
        d = (r.origin_ns - first) / 1e6  # type: ignore[operator]
        if not d:
            out.append(r)
            continue
        out.append(
            replace(
                r,
                intervals=[replace(iv, start=iv.start + d, end=iv.end + d) for iv in r.intervals],
                memory=[(0.0, r.memory[0][1])] + [(t + d, level) for t, level in r.memory[1:]]
                if r.memory
                else [],
                sends=[(k, mb, s, peer, t + d) for k, mb, s, peer, t in r.sends],
                recvs=[(k, mb, s, peer, t + d) for k, mb, s, peer, t in r.recvs],
                origin_ns=first,
            )
        )
    return out


def step_timelines(
    table: ScheduleTable,
    per_rank: Sequence[Sequence[RankStep]],
    name: str | None = None,
    source: str = "measured",
    iterations: Sequence[int] | None = None,
) -> list[Timeline]:
    """One Timeline per step from each rank's steps (`per_rank[r][i]`), named `name` (default: the
    algorithm), iterations numbered from 1 (or `iterations[i] + 1`)."""
    steps = range(len(per_rank[0]))
    numbers = iterations if iterations is not None else steps
    return [
        step_timeline(table, [r[i] for r in per_rank], name or table.algorithm, str(n + 1), source)
        for i, n in zip(steps, numbers, strict=True)
    ]


def step_timeline(
    table: ScheduleTable, ranks: Sequence[RankStep], name: str, iteration: str = "0", source: str = "measured"
) -> Timeline:
    """The ranks' measurements of one step as a Timeline (ms from the step start, memory in bytes).

    Ranks on one host share its monotonic clock: their times are put on one axis, from the earliest rank's
    start (otherwise each rank counts from its own start, after the barrier that begins the step).
    A transfer is sent when its producer rank posted the send and arrived when the consumer's wait on it
    returned (an upper bound on the arrival)."""
    ranks = aligned(ranks)
    arrived = {(k, mb, s, src, r.rank): t for r in ranks for k, mb, s, src, t in r.recvs}
    transfers = [
        Transfer(k, mb, s, r.rank, dst, t, arrived.get((k, mb, s, r.rank, dst), t))
        for r in ranks
        for k, mb, s, dst, t in r.sends
    ]
    rank_lines = [RankTimeline(r.rank, list(r.intervals), list(r.memory), float(r.peak_bytes)) for r in ranks]
    return Timeline(
        name,
        table.pp,
        table.vpp,
        table.num_microbatches,
        rank_lines,
        table.algorithm,
        source,
        iteration,
        transfers,
        memory_unit="bytes",
    )
