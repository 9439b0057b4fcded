"""Measured steps into the shared trace model: one `Timeline` per step, transfers matched across ranks."""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.runtime.runner import RankStep
from primuspp.schedule.table import ScheduleTable
from primuspp.trace.timeline import RankTimeline, Timeline, Transfer


def step_timeline(
    table: ScheduleTable, ranks: Sequence[RankStep], name: str, iteration: str = "0"
) -> Timeline:
    """The ranks' measurements of one step as a Timeline (ms from each rank's step start, memory in bytes).

    A transfer is sent when its producer rank posted the send and arrived when the consumer's wait on it
    returned (an upper bound on the arrival)."""
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
        "measured",
        iteration,
        transfers,
        memory_unit="bytes",
    )
