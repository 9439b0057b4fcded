"""Our simulator against what Primus' own simulator wrote for the same config."""

import json

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate

CASES = [
    ("basic_1f1b", "1f1b", None),
    ("zerobubble", "zero-bubble", None),
    ("interleaved_1f1b", "1f1b-interleaved", 2),
    ("zbv-formatted", "zbv", None),
    ("v-half", "v-half", None),
]


@pytest.mark.parametrize("sample,algo,vpp", CASES)
def test_rank_totals_and_memory_match_primus(primus_samples, sample, algo, vpp):
    ours = simulate(build_schedule(algo, 8, vpp, 32), CostModel(1000, 1000, 1000)).metrics
    for r in range(8):
        theirs = json.loads(
            (primus_samples / "simulator_output_p8_m32" / sample / f"pp_rank_{r}.json").read_text()
        )["0"]
        assert ours.per_rank[r].total == theirs["total"]
        assert ours.per_rank[r].peak_memory == theirs["memory"]


def _primus(primus_samples, sample):
    return [
        json.loads((primus_samples / "simulator_output_p8_m32" / sample / f"pp_rank_{r}.json").read_text())[
            "0"
        ]
        for r in range(8)
    ]


@pytest.mark.parametrize("sample,algo", [("v-min", "v-min"), ("zb-heuristic-mem8", "zero-bubble-heuristic")])
def test_at_least_as_good_as_primus(primus_samples, sample, algo):
    """Never a later finish on any rank's critical path, within the same memory."""
    theirs = _primus(primus_samples, sample)
    params = {"max_mem": 8} if algo == "zero-bubble-heuristic" else {}
    ours = simulate(build_schedule(algo, 8, None, 32, **params), CostModel(1000, 1000, 1000)).metrics
    assert ours.step_time <= max(t["total"] for t in theirs)
    assert ours.peak_memory <= max(t["memory"] for t in theirs)
