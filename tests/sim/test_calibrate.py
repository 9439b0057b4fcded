import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import calibrate
from primuspp.sim.output import write_result
from primuspp.trace.pp_data import read_pp_data


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


def test_primus_output_calibrates_per_rank(primus_samples):
    (tl,) = read_pp_data(primus_samples / "simulator_output_p8_m32" / "zerobubble")
    cal = calibrate([tl])
    assert cal.costs.forward == pytest.approx((1000.0,) * 8)
    assert cal.costs.wgrad == pytest.approx((1000.0,) * 8)
