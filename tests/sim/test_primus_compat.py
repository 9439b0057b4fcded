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
