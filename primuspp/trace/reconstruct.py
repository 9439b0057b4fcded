"""Microbatch, stage and chunk labels for measured timelines that lack them (Primus' older pp_data dumps).

A rank runs its compute nodes one after another in table order, so the k-th forward it timed is the k-th F
node of its list in the schedule that produced the run, and likewise for each backward kind. Given that
table, each rank's intervals of one kind, in time order, take the labels of that rank's nodes of the same
kind, in table order, provided the counts agree (otherwise the timeline is returned unchanged).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from primuspp.trace.pp_data import read_pp_data
from primuspp.trace.timeline import Interval, RankTimeline, Timeline

if TYPE_CHECKING:
    from primuspp.schedule.table import ScheduleTable


@dataclass(frozen=True)
class Reconstruction:
    timeline: Timeline
    labelled: bool
    #: whether each rank's kinds, in time order, are exactly its table's compute kinds in order
    order_matches: bool
    #: one line: why nothing was labelled, or which table labelled it
    reason: str


def needs_labels(timeline: Timeline) -> bool:
    return any(iv.microbatch < 0 for rt in timeline.ranks for iv in rt.intervals)


def label_from_table(timeline: Timeline, table: ScheduleTable) -> Reconstruction:
    """Labels from `table` for every interval of `timeline`, or the timeline unchanged with the reason."""
    if table.pp != len(timeline.ranks):
        reason = f"the {table.algorithm} table has pp={table.pp}, the run {len(timeline.ranks)} ranks"
        return Reconstruction(timeline, False, False, reason)
    chunk = table.placement.stage_chunk
    ranks, order_matches = [], True
    for rt, nodes in zip(timeline.ranks, table.ranks, strict=True):
        compute = [n for n in nodes if n.kind.is_compute]
        measured = sorted(rt.intervals, key=lambda iv: (iv.start, iv.end))
        order_matches &= [iv.kind for iv in measured] == [n.kind.value for n in compute]
        nodes_by_kind = defaultdict(list)
        for n in compute:
            nodes_by_kind[n.kind.value].append(n)
        counts = {k: sum(iv.kind == k for iv in measured) for k in {iv.kind for iv in measured}}
        table_counts = {k: len(v) for k, v in nodes_by_kind.items()}
        if counts != table_counts:
            reason = f"rank {rt.rank} ran {_counts(counts)}, the {table.algorithm} table has "
            return Reconstruction(timeline, False, False, reason + _counts(table_counts))
        taken: dict[str, int] = defaultdict(int)
        intervals = []
        for iv in measured:
            node = nodes_by_kind[iv.kind][taken[iv.kind]]
            taken[iv.kind] += 1
            intervals.append(_labelled(iv, node, chunk))
        ranks.append(RankTimeline(rt.rank, intervals, rt.memory, rt.peak_memory))
    labelled = replace(timeline, ranks=ranks, algorithm=timeline.algorithm or table.algorithm)
    reason = (
        f"microbatch order reconstructed from {table.algorithm} "
        f"(pp={table.pp}, vpp={table.vpp}, m={table.num_microbatches})"
    )
    return Reconstruction(labelled, True, order_matches, reason)


def reconstruct_megatron(timelines: list[Timeline]) -> tuple[list[Timeline], str]:
    """Labels for the iterations of a run that carries none (Primus' older real-run dumps), from Megatron's
    schedule for the run's p, v and m (1F1B, or interleaved 1F1B when v > 1), the one Primus runs by
    default; and one line saying what was done. Iterations whose counts do not fit stay unlabelled."""
    from primuspp.algorithms.registry import build_schedule
    from primuspp.errors import PrimusppError

    first = timelines[0]
    algo = "1f1b-interleaved" if first.vpp > 1 else "1f1b"
    try:
        table = build_schedule(algo, first.pp, first.vpp if first.vpp > 1 else None, first.micro_batches)
    except PrimusppError as err:
        return list(timelines), f"microbatch order unknown ({algo} for this run: {err})"
    results = [label_from_table(tl, table) for tl in timelines]
    failed = [r for r in results if not r.labelled]
    note = results[0].reason if not failed else f"microbatch order unknown: {failed[0].reason}"
    if failed and len(failed) < len(results):
        note += f" (in {len(failed)} of {len(results)} iterations)"
    return [r.timeline for r in results], note


def read_labelled(directory: str | Path) -> tuple[list[Timeline], str]:
    """A pp_data dump's iterations, labelled by `reconstruct_megatron` where they carry no labels, and its
    line saying so ("" when they had labels)."""
    timelines = read_pp_data(directory)
    return reconstruct_megatron(timelines) if needs_labels(timelines[0]) else (timelines, "")


def _labelled(iv: Interval, node, chunk: tuple[int, ...]) -> Interval:
    backward = None
    if node.parts:
        bp = node.parts[1]
        backward = (bp.kind.value, bp.microbatch, bp.stage, chunk[bp.stage])
    mb, stage = node.microbatch, node.stage
    return replace(iv, microbatch=mb, stage=stage, chunk=chunk[stage], backward=backward)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
