import statistics
from dataclasses import replace

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import calibrate, costs_from_dir
from primuspp.sim.output import write_result
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data
from primuspp.trace.timeline import Timeline


def test_recovers_per_stage_costs_through_a_dump(tmp_path):
    truth = CostModel(
        forward=(1.0, 2.0, 3.0, 4.0), backward=(2.0, 2.0, 2.5, 1.0), wgrad=1.5, comm=0.0, activation=3.0
    )
    result = simulate(build_schedule("zero-bubble", 4, None, 8), truth)
    cal = calibrate(read_pp_data(write_result(result, tmp_path)))
    assert cal.per_stage and not cal.bw_split_assumed
    assert cal.costs.forward == pytest.approx(truth.forward)
    assert cal.costs.backward == pytest.approx(truth.backward)
    assert cal.costs.wgrad == pytest.approx((1.5,) * 4)
    assert cal.costs.activation == pytest.approx(3.0)


def test_interleaved_chunks_and_bw_split():
    truth = CostModel(forward=2.0, backward=3.0, wgrad=1.0)
    result = simulate(build_schedule("1f1b-interleaved", 4, 2, 8), truth)
    cal = calibrate([result.timeline], bw_split=0.75)
    assert cal.bw_split_assumed
    assert cal.costs.forward == pytest.approx((1.0,) * 8)  # per stage: a chunk is half a rank's share
    assert cal.costs.backward == pytest.approx((1.5,) * 8)
    assert cal.costs.wgrad == pytest.approx((0.5,) * 8)


def test_projection_from_calibrated_costs_matches():
    truth = CostModel(forward=3.0, backward=2.0, wgrad=2.0)
    measured = simulate(build_schedule("zero-bubble", 4, None, 8), truth)
    cal = calibrate([measured.timeline])
    again = simulate(build_schedule("zero-bubble", 4, None, 8), cal.costs)
    assert again.metrics.step_time == pytest.approx(measured.metrics.step_time)


def test_primus_output_calibrates_per_rank(primus_data):
    (tl,) = read_pp_data(primus_data / "simulator_output_p8_m32" / "zerobubble")
    cal = calibrate([tl])
    assert cal.costs.forward == pytest.approx((1000.0,) * 8)
    assert cal.costs.wgrad == pytest.approx((1000.0,) * 8)


@pytest.mark.parametrize("algo", ["1f1b", "zero-bubble", "zbv", "1f1b-interleaved", "dualpipe", "dualpipe-v"])
def test_comm_latency_from_waiting_hand_offs(algo):
    """The simulator's comm is what a waiting consumer on another rank sees; busy consumers do not count."""
    result = simulate(build_schedule(algo, 4, None, 8), CostModel(2.0, 3.0, 1.0, comm=0.5))
    cal = calibrate([result.timeline])
    assert cal.costs.comm == pytest.approx(0.5) and cal.comm_samples > 0
    assert calibrate([simulate(build_schedule(algo, 4, None, 8)).timeline]).costs.comm == 0.0


def _sampled(timeline: Timeline, act: tuple[float, ...], b_free: tuple[float, ...]) -> Timeline:
    """The timeline with the memory curve a runtime records: one sample after every compute node."""
    ranks = []
    for rt in timeline.ranks:
        level, points, left = 0.0, [(0.0, 0.0)], {}
        for iv in sorted(rt.intervals, key=lambda iv: iv.end):
            key = (iv.microbatch, iv.stage)
            if iv.kind == "F":
                level += act[iv.stage]
                left[key] = act[iv.stage]
            elif iv.kind == "B":
                level -= act[iv.stage] * b_free[iv.stage]
                left[key] -= act[iv.stage] * b_free[iv.stage]
            else:
                level -= left.pop(key)
            points.append((iv.end, level))
        ranks.append(replace(rt, memory=points, peak_memory=max(level for _, level in points)))
    return replace(timeline, ranks=ranks, memory_unit="bytes")


def test_per_stage_memory_from_sampled_curves():
    table = build_schedule("zbv", 2, 2, 4)  # stages 0, 3 on rank 0; 1, 2 on rank 1
    act, b_free = (400.0, 300.0, 300.0, 100.0), (-0.25, 0.5, 0.5, 1.0)
    measured = _sampled(simulate(table, CostModel(1, 1, 1)).timeline, act, b_free)
    cal = calibrate([measured])
    assert cal.memory_per_stage and cal.memory_unit == "bytes"
    assert cal.costs.activation == act and cal.costs.b_free_fraction == pytest.approx(b_free)
    assert cal.activation_per_microbatch == 550.0  # rank 0: 500, rank 1: 600
    portable = cal.portable()  # per rank, in units of 550 bytes
    assert portable.activation == pytest.approx((500 / 550, 600 / 550))
    assert portable.b_free_fraction == pytest.approx(((400 * -0.25 + 100) / 500, 0.5))
    predicted = simulate(table, cal.costs).metrics.per_rank
    assert [r.peak_memory for r in predicted] == [rt.peak_memory for rt in measured.ranks]


# -- Primus' real-run dumps (tests/data fixtures: replayed with jitter, p2p latency and a warm-up step) ------


def _measured_median(path) -> float:
    timelines = read_pp_data(path)[1:]  # the first iteration is the warm-up
    return statistics.median(timeline_metrics(tl).step_time for tl in timelines)


@pytest.mark.parametrize(
    "sample,algo,vpp",
    [("pp4", "1f1b", None), ("pp4_vpp2", "1f1b-interleaved", 2), ("pp4_zb_new", "zero-bubble", None)],
)
def test_projection_from_a_primus_dump_is_within_5_percent_of_its_median(primus_data, sample, algo, vpp):
    path = primus_data / "pp_data_example" / sample
    cal = costs_from_dir(str(path))
    projected = simulate(build_schedule(algo, 4, vpp, 8), cal.portable()).metrics.step_time
    assert projected == pytest.approx(_measured_median(path), rel=0.05)


def test_old_interleaved_dump_is_labelled_per_chunk_before_calibrating(primus_data):
    path = primus_data / "pp_data_example" / "pp4_vpp2"
    cal = costs_from_dir(str(path))
    assert cal.labels == "microbatch order reconstructed from 1f1b-interleaved (pp=4, vpp=2, m=8)"
    assert cal.per_stage and len(cal.costs.forward) == 8 and cal.stage_rank == (0, 1, 2, 3, 0, 1, 2, 3)
    # a rank's share is both chunks: F 40 ms on even ranks, 50 on odd (25 % slower), within the jitter
    forward = cal.portable().forward
    assert forward == pytest.approx((40.0, 50.0, 40.0, 50.0), rel=0.05)
    assert cal.costs.comm == pytest.approx(0.6, rel=0.3) and cal.comm_samples > 0


def test_unlabelled_chunks_count_as_one_of_v(primus_data):
    """Without labels (no reconstruction), each interval is one of the rank's v chunks: the rank's share is
    v times their median, not the median alone."""
    timelines = read_pp_data(primus_data / "pp_data_example" / "pp4_vpp2")[1:]
    cal = calibrate(timelines)
    assert not cal.per_stage
    assert cal.costs.forward == pytest.approx((40.0, 50.0, 40.0, 50.0), rel=0.05)
