"""Chrome / Perfetto trace JSON: the structure the viewers need, µs timestamps, send->receive flows."""

import json
from collections import defaultdict

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.trace.chrome import MIN_DUR, chrome_trace, chrome_traces


def check_trace(doc: dict) -> dict:
    """Perfetto's JSON trace schema, as far as these traces use it; returns the flows by id."""
    json.dumps(doc, allow_nan=False)  # plain JSON, no NaN/Infinity
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    slices = defaultdict(list)
    flows = defaultdict(dict)
    for ev in doc["traceEvents"]:
        assert ev["ph"] in {"X", "M", "C", "s", "f"}, ev
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int), ev
        if ev["ph"] == "M":
            assert ev["name"] in {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
            continue
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0, ev
        if ev["ph"] == "X":
            assert isinstance(ev["name"], str) and isinstance(ev["dur"], int | float) and ev["dur"] >= 0
            slices[(ev["pid"], ev["tid"])].append((ev["ts"], ev["ts"] + ev["dur"]))
        elif ev["ph"] == "C":
            assert all(isinstance(v, int | float) for v in ev["args"].values())
        else:
            assert ev["ph"] not in flows[(ev["cat"], ev["name"], ev["id"])], f"duplicate flow event {ev}"
            flows[(ev["cat"], ev["name"], ev["id"])][ev["ph"]] = ev
    for track, spans in slices.items():  # every thread's slices nest properly
        stack = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"slices overlap without nesting on {track}"
            stack.append(end)
    for key, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"unpaired flow {key}"
        assert pair["s"]["ts"] <= pair["f"]["ts"] and pair["f"].get("bp") == "e"
        for ev in pair.values():  # each end sits inside a slice of its own thread
            spans = slices[(ev["pid"], ev["tid"])]
            assert any(a <= ev["ts"] <= b for a, b in spans), f"flow end {ev} binds to no slice"
    return flows


@pytest.mark.parametrize("algo,vpp", [("zbv", None), ("1f1b-interleaved", 2), ("zero-bubble", None)])
def test_trace_structure_units_and_flows(algo, vpp):
    result = simulate(build_schedule(algo, 4, vpp, 8), CostModel(2, 3, 1, comm=0.5))
    doc = chrome_trace(result.timeline)
    flows = check_trace(doc)
    tl = result.timeline
    assert len(flows) == len(tl.transfers) > 0
    compute = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == 0]
    assert len(compute) == sum(len(rt.intervals) for rt in tl.ranks)
    first = tl.ranks[0].intervals[0]
    (ev,) = [e for e in compute if e["pid"] == 0 and e["ts"] == first.start * 1000]
    assert ev["dur"] == (first.end - first.start) * 1000 and ev["name"] == f"F0.{first.stage}"
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in range(4)}
    # every receive ends where the node consuming it starts
    starts = {(e["pid"], e["ts"]) for e in compute}
    recvs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("RECV_")]
    assert len(recvs) == len(tl.transfers)
    for e in recvs:
        assert (e["pid"], e["args"]["consumed_ms"] * 1000) in starts, e
        assert e["args"]["consumed_ms"] >= e["args"]["arrived_ms"]


def test_overlapping_transfers_get_their_own_lanes():
    # comm far longer than compute: several activations are in flight from one rank at once
    result = simulate(build_schedule("1f1b", 3, None, 6), CostModel(1, 1, 0, comm=5))
    doc = chrome_trace(result.timeline)
    check_trace(doc)
    lanes = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name" and e["pid"] == 0}
    assert {"compute", "p2p", "p2p 2"} <= lanes


def test_zero_latency_transfers_still_have_bindable_slices():
    doc = chrome_trace(simulate(build_schedule("1f1b", 2, None, 2)).timeline)
    check_trace(doc)
    sends = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("SEND_")]
    assert sends and all(e["dur"] == MIN_DUR for e in sends)


def test_several_runs_in_one_trace():
    a = simulate(build_schedule("1f1b", 2, None, 2)).timeline
    b = simulate(build_schedule("gpipe", 3, None, 2)).timeline
    doc = chrome_traces([("one", a), ("two", b)])
    flows = check_trace(doc)
    assert len(flows) == len(a.transfers) + len(b.transfers)
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name")
    assert names == ["one · rank 0", "one · rank 1", "two · rank 0", "two · rank 1", "two · rank 2"]
    assert [r["label"] for r in doc["otherData"]["runs"]] == ["one", "two"]


def test_measured_run_without_transfers(primus_data):
    from primuspp.trace.pp_data import read_pp_data

    tl = read_pp_data(primus_data / "pp_data_example" / "pp4")[-1]
    doc = chrome_trace(tl)
    assert check_trace(doc) == {}
    assert doc["otherData"]["iteration"] == "6" and doc["otherData"]["source"] == "measured"
