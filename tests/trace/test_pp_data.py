import json

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.output import write_result
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data


def test_round_trip_through_primus_layout(tmp_path):
    result = simulate(build_schedule("zero-bubble", 4, None, 8), CostModel(2, 3, 1))
    run_dir = write_result(result, tmp_path)
    (timeline,) = read_pp_data(run_dir)
    back = timeline_metrics(timeline)
    assert back.step_time == result.metrics.step_time
    assert [r.peak_memory for r in back.per_rank] == [r.peak_memory for r in result.metrics.per_rank]
    kinds = sorted((iv.kind, iv.microbatch, iv.stage) for iv in timeline.ranks[2].intervals)
    assert kinds == sorted((iv.kind, iv.microbatch, iv.stage) for iv in result.timeline.ranks[2].intervals)


def test_write_replaces_atomically(tmp_path):
    result = simulate(build_schedule("1f1b", 2, None, 2))
    write_result(result, tmp_path)
    write_result(result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1f1b"]


@pytest.mark.parametrize("sample", ["basic_1f1b", "zerobubble", "zbv-formatted", "v-half"])
def test_reads_primus_simulator_output(primus_data, sample):
    (tl,) = read_pp_data(primus_data / "simulator_output_p8_m32" / sample)
    m = timeline_metrics(tl)
    totals = [
        json.loads((primus_data / "simulator_output_p8_m32" / sample / f"pp_rank_{r}.json").read_text())["0"][
            "total"
        ]
        for r in range(8)
    ]
    assert m.step_time == max(totals)
    assert [r.total for r in m.per_rank] == totals


def test_reads_primus_old_real_run_format(primus_data):
    timelines = read_pp_data(primus_data / "pp_data_example" / "pp4_vpp2")
    assert len(timelines) == 6 and timelines[0].pp == 4 and timelines[0].vpp == 2
    assert timelines[0].micro_batches == 8
    rank0 = timelines[5].ranks[0]
    assert sum(iv.kind == "F" for iv in rank0.intervals) == 16 and rank0.intervals[0].microbatch == -1


@pytest.mark.parametrize(
    "setup,match",
    [
        (lambda d: None, "no pp_rank_<r>.json files"),
        (lambda d: (d / "pp_rank_0.json").write_text("[1]"), "expected an object keyed by iteration"),
        (lambda d: (d / "pp_rank_0.json").write_text('{"1": {"x": 1}}'), "expected an object with fwd_start"),
        (lambda d: (d / "pp_rank_0.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "pp_rank_1.json").write_text("{}"), "numbered 0..0"),
    ],
)
def test_bad_pp_data_names_the_file(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(ConfigError, match=match):
        read_pp_data(tmp_path)


def test_source_and_memory_unit_follow_the_writer(primus_data, tmp_path):
    (real, *_) = read_pp_data(primus_data / "pp_data_example" / "pp4")
    assert (real.source, real.memory_unit) == ("measured", "GiB")
    (sim,) = read_pp_data(primus_data / "simulator_output_p8_m32" / "basic_1f1b")
    assert (sim.source, sim.memory_unit) == ("simulated", "microbatches")
    ours = write_result(simulate(build_schedule("1f1b", 2, None, 2)), tmp_path)
    (back,) = read_pp_data(ours)
    assert (back.source, back.memory_unit) == ("simulated", "microbatches")


def test_combined_forward_backward_events_read_as_one_fb_interval(tmp_path):
    # Primus' combined F+B wrapper records one call as an fwd and a bwd event with the same interval
    rec = {
        "fwd_start": [0.0, 2.0],
        "fwd_end": [1.0, 4.0],
        "fwd_minibatch": [0, 1],
        "bwd_start": [2.0, 5.0],
        "bwd_end": [4.0, 6.0],
        "bwd_minibatch": [0, 1],
    }
    (tmp_path / "pp_rank_0.json").write_text(json.dumps({"1": rec}))
    (tl,) = read_pp_data(tmp_path)
    kinds = [(iv.kind, iv.microbatch, iv.backward) for iv in tl.ranks[0].intervals]
    assert kinds == [("F", 0, None), ("FB", 1, ("BW", 0, -1, -1)), ("BW", 1, None)]
