"""The readable reference of `trace.pp_data.rank_record`: one dict of lists built from Interval objects (the
product writes from columns; tests hold both equal, byte for byte once dumped)."""

from __future__ import annotations

from typing import Any

from primuspp.trace.timeline import Interval, RankTimeline


def rank_record(rt: RankTimeline) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "total": max((iv.end for iv in rt.intervals), default=0.0),
        "memory": rt.peak_memory,
    }
    groups: dict[str, list[Interval]] = {"fwd": [], "bwd": [], "wgrad": [], "fb": []}
    for iv in rt.intervals:
        groups[{"F": "fwd", "B": "bwd", "BW": "bwd", "W": "wgrad", "FB": "fb"}[iv.kind]].append(iv)
    for prefix in ("fwd", "bwd", "wgrad"):
        ivs = groups[prefix]
        rec[f"{prefix}_start"] = [iv.start for iv in ivs]
        rec[f"{prefix}_end"] = [iv.end for iv in ivs]
    for prefix in ("fwd", "bwd", "wgrad"):
        ivs = groups[prefix]
        rec[f"{prefix}_minibatch"] = [iv.microbatch for iv in ivs]
        rec[f"{prefix}_chunk"] = [iv.chunk for iv in ivs]
    rec["activation_memory_usage"] = [level for _, level in rt.memory[1:]]
    rec["bwd_kind"] = [iv.kind for iv in groups["bwd"]]
    for prefix in ("fwd", "bwd", "wgrad"):
        rec[f"{prefix}_stage"] = [iv.stage for iv in groups[prefix]]
    rec["activation_memory_time"] = [t for t, _ in rt.memory[1:]]
    if groups["fb"]:
        fb = groups["fb"]
        rec["fb_start"] = [iv.start for iv in fb]
        rec["fb_end"] = [iv.end for iv in fb]
        rec["fb_minibatch"] = [iv.microbatch for iv in fb]
        rec["fb_chunk"] = [iv.chunk for iv in fb]
        rec["fb_stage"] = [iv.stage for iv in fb]
        rec["fb_backward"] = [list(iv.backward or ()) for iv in fb]
    return rec
