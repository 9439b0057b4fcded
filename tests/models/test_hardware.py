"""Hardware profiles: every packaged one loads; a user's YAML; bad input is one line naming the key."""

from __future__ import annotations

import os

import pytest

from primuspp.errors import ConfigError
from primuspp.models.hardware import load_hardware, profile_names

EXPECTED = {"mi300x", "mi325x", "mi355x", "h100", "h200", "h800", "b200"}


def test_packaged_profiles():
    assert set(profile_names()) == EXPECTED | {"cpu"}  # cpu: this machine, for calibration
    for name in EXPECTED:
        hw = load_hardware(name.upper())
        assert hw.peak("fp8") == pytest.approx(2 * hw.peak("bf16"), rel=1e-3)
        assert hw.intra_node.bandwidth > hw.inter_node.bandwidth
        assert hw.gpus_per_node == 8
        assert hw.source == "guess" or "calibrated from" in hw.source or "profile (calibrated" in hw.source


def test_datasheet_values():
    mi300x, h100 = load_hardware("mi300x"), load_hardware("h100")
    assert mi300x.peak() == 1307.4e12 and mi300x.hbm_bytes == 192e9
    assert h100.peak() == 989.4e12 and h100.hbm_bytes == 80e9


def test_gemm_efficiency_steps():
    eff = load_hardware("h100").efficiency
    assert eff.gemm_fraction(0) == 0.3
    assert eff.gemm_fraction(5e9) == 0.45
    assert eff.gemm_fraction(1e12) == 0.54


def test_one_profile_per_gpu_family():
    """Profiles of the same silicon share their calibrated efficiencies (no per-run factors)."""
    h100, h200, h800 = (load_hardware(n) for n in ("h100", "h200", "h800"))
    assert h100.efficiency.gemm == h200.efficiency.gemm == h800.efficiency.gemm
    mi300x, mi325x = load_hardware("mi300x"), load_hardware("mi325x")
    assert mi300x.efficiency == mi325x.efficiency and mi300x.overhead == mi325x.overhead


def test_link_by_group():
    hw = load_hardware("h100")
    assert hw.link(8) is hw.intra_node
    assert hw.link(2, spread=8) is hw.inter_node


def user_yaml(tmp_path, extra: str = "") -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: Mine\npeak_flops: {bf16: 1.0e15}\nhbm_bytes: 1.0e11\nhbm_bandwidth: 4.0e12\n"
        "gpus_per_node: 4\nintra_node: {bandwidth: 1.0e11, latency: 0}\n"
        "inter_node: {bandwidth: 1.0e10, latency: 1.0e-5}\n" + extra
    )
    return str(path)


def test_user_yaml(tmp_path):
    hw = load_hardware(user_yaml(tmp_path))
    assert hw.name == "Mine" and hw.efficiency.comm == 0.7 and hw.link(8) is hw.inter_node


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("speed: 3\n", "unknown key 'speed'"),
        ("efficiency: {gemm: [[1, 0.5]]}\n", "efficiency.gemm=.*thresholds must ascend from 0"),
        ("efficiency: {comm: 2}\n", "efficiency.comm=2"),
        ("efficiency: {wgrad: 0}\n", "efficiency.wgrad=0"),
        ("efficiency: {grouped_gemm: 1.5}\n", "efficiency.grouped_gemm=1.5"),
        ("overhead: {p2p: -1.0e-4}\n", "overhead.p2p=-0.0001"),
        ("overhead: {launch: 1.0e-4}\n", "unknown key 'overhead.launch'"),
        ("gpus_per_node: 8\n", "duplicate key 'gpus_per_node'"),  # the last one silently won
        ("reserved_bytes: true\n", "reserved_bytes=True: expected a number, not true/false"),
        ("efficiency: {comm: .nan}\n", "efficiency.comm=nan: expected a finite number"),
    ],
)
def test_bad_user_yaml(tmp_path, extra, match):
    with pytest.raises(ConfigError, match=match) as info:
        load_hardware(user_yaml(tmp_path, extra))
    assert "\n" not in str(info.value)


def test_alias_bomb_is_refused_unexpanded(tmp_path):
    # under 1 KB, 10^9 values once expanded: the profile reader used yaml.safe_load (1.6 GB, minutes)
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 1024
    with pytest.raises(ConfigError, match=r"expands to .* values through its aliases"):
        load_hardware(str(path))


def test_unknown_profile_and_fifo(tmp_path):
    with pytest.raises(ConfigError, match="--gpu tpu9: unknown GPU profile; profiles: b200"):
        load_hardware("tpu9")
    with pytest.raises(ConfigError, match=r"--gpu mi300: unknown GPU profile \(did you mean mi300x\?\)"):
        load_hardware("mi300")
    fifo = tmp_path / "hw.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_hardware(str(fifo))
