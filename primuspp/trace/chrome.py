"""Chrome / Perfetto trace JSON of timelines: one process per rank, timestamps in µs.

Each rank has a `compute` thread (its F/B/W/BW/FB slices) and `p2p` threads: a SEND slice on the sender
while the tensor is in flight, a RECV slice on the receiver from its arrival until the node that consumes it
starts, and a flow arrow (`s` -> `f`) from each send to its receive. p2p slices of one rank that overlap go
on separate `p2p` lanes, so every thread's slices nest properly (what the trace viewers require).
"""

from __future__ import annotations

from typing import Any

from primuspp.trace.timeline import Interval, Timeline, Transfer

_COLORS = {
    "F": "thread_state_running",
    "B": "rail_response",
    "W": "good",
    "BW": "rail_animation",
    "FB": "rail_load",
}
#: shortest slice drawn (µs): zero-latency transfers still get a visible, bindable slice
MIN_DUR = 1.0
US = 1000.0  # timelines are in ms


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    return chrome_traces([("", timeline)])


def chrome_traces(runs: list[tuple[str, Timeline]]) -> dict[str, Any]:
    """Several runs in one trace (e.g. `viz --chrome` over several sources): process names carry the label."""
    events: list[dict[str, Any]] = []
    pid = flow = 0
    for label, timeline in runs:
        events.extend(_run_events(timeline, label, pid, flow))
        pid += len(timeline.ranks)
        flow += len(timeline.transfers)
    meta = [
        {
            "label": label,
            "name": tl.name,
            "algorithm": tl.algorithm,
            "source": tl.source,
            "iteration": tl.iteration,
        }
        for label, tl in runs
    ]
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": meta[0] if len(meta) == 1 else {"runs": meta},
    }


def _run_events(timeline: Timeline, label: str, pid0: int, flow0: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for rt in timeline.ranks:
        pid = pid0 + rt.rank
        name = f"{label} · rank {rt.rank}" if label else f"rank {rt.rank}"
        events.append(_meta("process_name", pid, 0, {"name": name}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
        events.append(_meta("thread_name", pid, 0, {"name": "compute"}))
        events.append(_meta("thread_sort_index", pid, 0, {"sort_index": 0}))
        events.extend(_compute_event(iv, pid) for iv in rt.intervals)
        events.extend(
            {
                "ph": "C",
                "name": "activation memory",
                "pid": pid,
                "tid": 0,
                "ts": t * US,
                "args": {timeline.memory_unit: level},
            }
            for t, level in rt.memory
        )
    events.extend(_p2p_events(timeline, pid0, flow0))
    return events


def _compute_event(iv: Interval, pid: int) -> dict[str, Any]:
    args: dict[str, Any] = {"microbatch": iv.microbatch, "stage": iv.stage, "chunk": iv.chunk}
    args.update({"start_ms": iv.start, "end_ms": iv.end})
    name = iv.kind if iv.microbatch < 0 else f"{iv.kind}{iv.microbatch}.{iv.stage}"
    if iv.kind == "FB" and iv.backward:
        bkind, bmb, bstage, _ = iv.backward
        name = f"F{iv.microbatch}.{iv.stage}+{bkind}{bmb}.{bstage}"
        args["backward"] = list(iv.backward)
    return {
        "ph": "X",
        "name": name,
        "cat": iv.kind,
        "pid": pid,
        "tid": 0,
        "ts": iv.start * US,
        "dur": max(iv.end - iv.start, 0.0) * US,
        "args": args,
        "cname": _COLORS.get(iv.kind, "generic_work"),
    }


def _p2p_events(timeline: Timeline, pid0: int, flow0: int) -> list[dict[str, Any]]:
    consumers = _consumer_starts(timeline)
    slices: dict[int, list[dict[str, Any]]] = {}  # rank -> its p2p slices (tid set below)
    flows = []
    for i, tr in enumerate(timeline.transfers):
        tag = f"{tr.kind}{tr.microbatch}.{tr.stage}"
        send = _slice(f"SEND_{tag}>{tr.dst}", pid0 + tr.src, tr.sent * US, (tr.arrived - tr.sent) * US)
        send["args"] = {"to": tr.dst, "sent_ms": tr.sent, "arrived_ms": tr.arrived}
        consumed = consumers.get((tr.dst, *_consumer(tr)), tr.arrived)
        recv = _slice(f"RECV_{tag}<{tr.src}", pid0 + tr.dst, tr.arrived * US, (consumed - tr.arrived) * US)
        recv["args"] = {"from": tr.src, "arrived_ms": tr.arrived, "consumed_ms": consumed}
        slices.setdefault(tr.src, []).append(send)
        slices.setdefault(tr.dst, []).append(recv)
        flows.append((flow0 + i, send, recv))
    events: list[dict[str, Any]] = []
    for rank, rank_slices in slices.items():
        lanes = _assign_lanes(rank_slices)
        for lane in range(lanes):
            name = "p2p" if lane == 0 else f"p2p {lane + 1}"
            events.append(_meta("thread_name", pid0 + rank, 1 + lane, {"name": name}))
            events.append(_meta("thread_sort_index", pid0 + rank, 1 + lane, {"sort_index": 1 + lane}))
        events.extend(rank_slices)
    for flow_id, send, recv in flows:  # bound to the slices they sit in the middle of
        for ph, sl in (("s", send), ("f", recv)):
            event = {"ph": ph, "name": "p2p", "cat": "p2p", "id": flow_id, "pid": sl["pid"], "tid": sl["tid"]}
            event["ts"] = sl["ts"] + sl["dur"] / 2
            if ph == "f":
                event["bp"] = "e"
            events.append(event)
    return events


def _slice(name: str, pid: int, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": "p2p", "pid": pid, "tid": 1, "ts": ts, "dur": max(dur, MIN_DUR)}


def _assign_lanes(slices: list[dict[str, Any]]) -> int:
    """Greedy interval partitioning: each slice takes the first lane free at its start. Returns the count."""
    lane_ends: list[float] = []
    for sl in sorted(slices, key=lambda s: (s["ts"], s["dur"])):
        lane = next((i for i, end in enumerate(lane_ends) if end <= sl["ts"]), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(0.0)
        lane_ends[lane] = sl["ts"] + sl["dur"]
        sl["tid"] = 1 + lane
    return len(lane_ends)


def _consumer(tr: Transfer) -> tuple[str, int, int]:
    """The node that consumes a transfer: routes run through consecutive stages, so an activation of stage
    s feeds F(mb, s + 1) and an input grad of stage s feeds the backward of (mb, s - 1)."""
    return (tr.kind, tr.microbatch, tr.stage + 1 if tr.kind == "F" else tr.stage - 1)


def _consumer_starts(timeline: Timeline) -> dict[tuple[int, str, int, int], float]:
    starts: dict[tuple[int, str, int, int], float] = {}
    for rt in timeline.ranks:
        for iv in rt.intervals:
            if iv.kind in ("F", "FB"):
                starts[(rt.rank, "F", iv.microbatch, iv.stage)] = iv.start
            if iv.kind in ("B", "BW"):
                starts[(rt.rank, "B", iv.microbatch, iv.stage)] = iv.start
            if iv.kind == "FB" and iv.backward:
                starts[(rt.rank, "B", iv.backward[1], iv.backward[2])] = iv.start
    return starts


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}
