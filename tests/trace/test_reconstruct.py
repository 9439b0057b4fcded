"""Labels for Primus' older real-run dumps, reconstructed from the schedule that produced them."""

from dataclasses import replace

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.sim import simulate
from primuspp.trace.pp_data import read_pp_data
from primuspp.trace.reconstruct import label_from_table, needs_labels
from primuspp.trace.timeline import RankTimeline


def _strip(timeline):
    """The timeline as Primus' older format would give it back: no microbatch, stage or chunk."""
    ranks = [
        RankTimeline(
            rt.rank,
            [replace(iv, microbatch=-1, stage=-1, chunk=-1) for iv in rt.intervals],
            rt.memory,
            rt.peak_memory,
        )
        for rt in timeline.ranks
    ]
    return replace(timeline, ranks=ranks)


@pytest.mark.parametrize("algo,vpp", [("1f1b", None), ("1f1b-interleaved", 2), ("zero-bubble", None)])
def test_stripped_simulation_gets_its_labels_back(algo, vpp):
    table = build_schedule(algo, 4, vpp, 10)
    original = simulate(table).timeline
    stripped = _strip(original)
    assert needs_labels(stripped) and not needs_labels(original)
    rec = label_from_table(stripped, table)
    assert rec.labelled and rec.order_matches
    for a, b in zip(rec.timeline.ranks, original.ranks, strict=True):
        assert sorted(a.intervals, key=lambda iv: iv.start) == sorted(b.intervals, key=lambda iv: iv.start)


def test_count_mismatch_leaves_the_timeline_alone():
    stripped = _strip(simulate(build_schedule("1f1b", 4, None, 8)).timeline)
    rec = label_from_table(stripped, build_schedule("1f1b", 4, None, 6))
    assert not rec.labelled and rec.timeline is stripped
    assert rec.reason == "rank 0 ran 8 BW, 8 F, the 1f1b table has 6 BW, 6 F"
    assert not label_from_table(stripped, build_schedule("1f1b", 2, None, 8)).labelled


@pytest.mark.parametrize("sample,algo,vpp", [("pp4", "1f1b", None), ("pp4_vpp2", "1f1b-interleaved", 2)])
def test_primus_real_runs_match_megatron_schedules(primus_data, sample, algo, vpp):
    timelines = read_pp_data(primus_data / "pp_data_example" / sample)
    table = build_schedule(algo, 4, vpp, 8)
    for tl in timelines:
        rec = label_from_table(tl, table)
        assert rec.labelled and rec.order_matches, (tl.iteration, rec.reason)
    last = rec.timeline.ranks[0].intervals
    # rank 0 of interleaved 1F1B (p=4, v=2): forwards mb 0..3 on chunk 0, then mb 0..3 on chunk 1
    if vpp == 2:
        assert [(iv.microbatch, iv.chunk) for iv in last[:8]] == [(mb, c) for c in (0, 1) for mb in range(4)]
    assert {iv.stage for iv in last} == ({0, 4} if vpp == 2 else {0})
