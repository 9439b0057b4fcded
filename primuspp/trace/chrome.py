"""Chrome / Perfetto trace JSON of a timeline: one process per rank, timestamps in µs."""

from __future__ import annotations

from typing import Any

from primuspp.trace.timeline import Timeline

_COLORS = {
    "F": "thread_state_running",
    "B": "rail_response",
    "W": "good",
    "BW": "rail_animation",
    "FB": "rail_load",
}


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """Times in the timeline are ms; Chrome wants µs. Compute on tid 0, p2p transfers on tid 1 with flow
    arrows from each send to its receive."""
    events: list[dict[str, Any]] = []
    for rt in timeline.ranks:
        pid = rt.rank
        events.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {pid}"}}
        )
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
        )
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "compute"}})
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "p2p"}})
        for iv in rt.intervals:
            name = f"{iv.kind}{iv.microbatch}"
            args = {"microbatch": iv.microbatch, "stage": iv.stage, "chunk": iv.chunk}
            if iv.backward:
                name = f"F{iv.microbatch}+{iv.backward[0]}{iv.backward[1]}"
                args["backward"] = list(iv.backward)
            events.append(
                {
                    "ph": "X",
                    "name": name,
                    "cat": iv.kind,
                    "pid": pid,
                    "tid": 0,
                    "ts": iv.start * 1000.0,
                    "dur": (iv.end - iv.start) * 1000.0,
                    "args": args,
                    "cname": _COLORS.get(iv.kind, "generic_work"),
                }
            )
        for t, level in rt.memory:
            events.append(
                {
                    "ph": "C",
                    "name": "activation memory",
                    "pid": pid,
                    "tid": 0,
                    "ts": t * 1000.0,
                    "args": {timeline.memory_unit: level},
                }
            )
    for i, tr in enumerate(timeline.transfers):
        name = f"{'SEND_F' if tr.kind == 'F' else 'SEND_B'}{tr.microbatch}.{tr.stage}"
        dur = max((tr.arrived - tr.sent) * 1000.0, 0.001)
        events.append(
            {
                "ph": "X",
                "name": name,
                "cat": "p2p",
                "pid": tr.src,
                "tid": 1,
                "ts": tr.sent * 1000.0,
                "dur": dur,
                "args": {"to": tr.dst},
            }
        )
        events.append(
            {"ph": "s", "name": "p2p", "cat": "p2p", "id": i, "pid": tr.src, "tid": 1, "ts": tr.sent * 1000.0}
        )
        events.append(
            {
                "ph": "f",
                "bp": "e",
                "name": "p2p",
                "cat": "p2p",
                "id": i,
                "pid": tr.dst,
                "tid": 1,
                "ts": tr.arrived * 1000.0,
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"name": timeline.name, "algorithm": timeline.algorithm, "source": timeline.source},
    }
