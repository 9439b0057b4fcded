"""Fitting a GPU profile's efficiencies to a measured run: on a synthetic dump (a projection on known
efficiencies written as a measured pp_data dump), the fit recovers them and predicts other runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primuspp.errors import ConfigError
from primuspp.models.calibrate import calibrate_hardware, fit_hardware
from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.presets import PRESETS
from primuspp.models.project import project
from primuspp.trace.pp_data import write_pp_data

SPEC = PRESETS["megatron-gpt"].with_(hidden=256, heads=4, ffn=1024, layers=4)
PAR = Parallel(
    pp=2, micro_batch_size=2, global_batch_size=16, seq_len=128, dtype="fp32", dtype_bytes=4,
    flash_attention=False,
)  # fmt: skip


def _truth():
    """The cpu profile with GEMMs at 0.12 and the other compute 2.5x slower than the profile says."""
    cpu = load_hardware("cpu")
    eff = cpu.efficiency.model_copy(
        update={"gemm": ((0.0, 0.12),), "attention": cpu.efficiency.attention / 2.5}
    )
    return cpu, cpu.model_copy(update={"efficiency": eff, "hbm_bandwidth": cpu.hbm_bandwidth / 2.5})


def _dump(tmp_path, hw, algorithm, vpp):
    res = project(SPEC, hw, replace(PAR, vpp=vpp), algorithm, "even-ends").result
    timeline = replace(res.timeline, source="measured", memory_unit="bytes", name="synthetic")
    write_pp_data([timeline], tmp_path, {})
    return tmp_path


@pytest.mark.parametrize(("algorithm", "vpp"), [("1f1b", 1), ("zbv", 2)])
def test_fit_recovers_the_efficiencies(tmp_path, algorithm, vpp):
    cpu, truth = _truth()
    fit = calibrate_hardware(SPEC, cpu, PAR, _dump(tmp_path, truth, algorithm, vpp), "even-ends")
    assert fit.gemm_factor == pytest.approx(0.3 / 0.12, rel=1e-3)
    assert fit.other_factor == pytest.approx(2.5, rel=1e-3)
    assert fit.rms_error < 1e-3
    hw = fit.hardware
    assert hw.efficiency.gemm[0][1] == pytest.approx(0.12, rel=1e-3)
    assert hw.hbm_bandwidth == pytest.approx(truth.hbm_bandwidth, rel=1e-3)
    assert fit.schedule == f"{algorithm} p=2 v={vpp} m=8"
    # and predicts another model, schedule and microbatch count
    other = SPEC.with_(hidden=384, layers=6)
    par = replace(PAR, vpp=1, global_batch_size=32)
    want = project(other, truth, par, "1f1b", "even-ends").pipeline_ms
    got = project(other, hw, par, "1f1b", "even-ends").pipeline_ms
    assert got == pytest.approx(want, rel=1e-3)


def test_an_efficiency_over_one_raises_the_peak():
    cpu = load_hardware("cpu")
    measured = [[1e-3, 2e-3, 1e-3]] * 2  # far faster than the profile: efficiencies would pass 1
    fit = fit_hardware(SPEC, cpu, PAR, "zero-bubble", measured, None, "even-ends")
    hw = fit.hardware
    assert max(f for _, f in hw.efficiency.gemm) <= 1 and hw.efficiency.attention <= 1
    assert hw.peak("fp32") > cpu.peak("fp32")


def test_nothing_measured_is_one_line():
    with pytest.raises(ConfigError, match="no F/B/W time measured"):
        fit_hardware(SPEC, load_hardware("cpu"), PAR, "1f1b", [[0.0, 0.0, None]] * 2, None)


def test_fit_recovers_a_per_node_overhead(tmp_path):
    """A run whose every F, B and W costs 0.3 ms more (launches, synchronisation): the fit finds the
    overhead beside the two efficiencies, and the profile it gives carries it."""
    from primuspp.models.hardware import Overhead

    cpu, truth = _truth()
    truth = truth.model_copy(update={"overhead": Overhead(compute=3e-4)})
    fit = calibrate_hardware(SPEC, cpu, PAR, _dump(tmp_path, truth, "zero-bubble", 1), "even-ends")
    assert fit.hardware.overhead.compute == pytest.approx(3e-4, rel=1e-3)
    assert fit.gemm_factor == pytest.approx(0.3 / 0.12, rel=1e-3) and fit.rms_error < 1e-3
    assert "overhead 0.3 ms per compute node" in fit.describe()
