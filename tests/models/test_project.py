"""One configuration end to end: per-part costs into the simulator, each rank's peak from the schedule's own
memory curve, weights conserved over ranks, one-line refusals."""

from __future__ import annotations

import pytest

from primuspp.errors import ConfigError, ScheduleError
from primuspp.models import PRESETS
from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.project import part_costs, project

MI300X = load_hardware("mi300x")
LLAMA = PRESETS["llama2-7b"]


def par(**kw) -> Parallel:
    base = dict(pp=8, dp=1, micro_batch_size=1, global_batch_size=32, seq_len=4096)
    return Parallel(**{**base, **kw})


def test_1f1b_peak_is_p_microbatches_on_rank_0():
    pr = project(LLAMA, MI300X, par(), "1f1b", layout="even")
    pc = part_costs(LLAMA, pr.par, MI300X, pr.layout)
    # 1F1B: rank r holds p - r microbatches' activations at its peak
    for r, mem in enumerate(pr.per_rank):
        assert mem.activations == pytest.approx((8 - r) * pc.activation[r])
    assert pr.layout == (4,) * 8


def test_weights_conserved_over_ranks():
    for algo, vpp in (("1f1b", 1), ("zbv", 2), ("1f1b-interleaved", 2)):
        pr = project(LLAMA, MI300X, par(vpp=vpp), algo)
        assert sum(m.weights for m in pr.per_rank) == pytest.approx(2 * LLAMA.parameters)
    # dualpipe holds two replicas
    pr = project(LLAMA, MI300X, par(vpp=2), "dualpipe")
    assert sum(m.weights for m in pr.per_rank) == pytest.approx(4 * LLAMA.parameters)


def test_moe_weights_with_ep_and_tp():
    spec = PRESETS["mixtral-8x7b"]
    p = Parallel(tp=2, pp=4, dp=4, ep=4, micro_batch_size=1, global_batch_size=64, seq_len=4096)
    pr = project(spec, load_hardware("h100"), p, "1f1b")
    expert = spec.moe_layers * spec.experts * spec.mlp_params(spec.expert_ffn)
    dense = spec.parameters - expert
    assert sum(m.weights for m in pr.per_rank) == pytest.approx(2 * (dense / 2 + expert / 8))


def test_record_and_units():
    pr = project(LLAMA, MI300X, par(vpp=2), "v-half")
    r = pr.record()
    assert r["fits"] and r["peak_memory_bytes"] < MI300X.hbm_bytes
    assert r["layout"].startswith("E") and r["layout"].endswith("L")
    tokens = 32 * 4096
    assert r["tokens_per_s_per_gpu"] == pytest.approx(tokens / (r["step_time_ms"] / 1e3) / 8)
    assert 0 < r["mfu"] < 1
    assert all(x["peak_activation_bytes"] > 0 for x in r["per_rank"])


def test_zero_bubble_beats_1f1b_for_dense():
    one = project(LLAMA, MI300X, par(), "1f1b")
    zb = project(LLAMA, MI300X, par(vpp=2), "zbv")
    assert zb.step_time_ms < one.step_time_ms


@pytest.mark.parametrize(
    ("spec", "kw", "match"),
    [
        (LLAMA, dict(tp=3), "--tp 3: does not divide the model's 32 attention heads"),
        (
            PRESETS["mixtral-8x7b"],
            dict(dp=3, ep=3, global_batch_size=36),
            "--ep 3: does not divide the model's 8",
        ),
        (LLAMA, dict(dp=2, global_batch_size=33), "--global-batch-size 33: not divisible"),
        (LLAMA, dict(ep=2, dp=2), "--ep 2: the model has no experts"),
    ],
)
def test_refusals(spec, kw, match):
    with pytest.raises(ConfigError, match=match):
        project(spec, MI300X, par(**kw), "1f1b")


def test_layout_string_and_algorithm_refusal():
    with pytest.raises(ConfigError, match="holds 31 transformer layers"):
        project(LLAMA, MI300X, par(), "1f1b", layout="Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*4L")
    pr = project(LLAMA, MI300X, par(), "1f1b", layout="Et*2|t*4|t*4|t*4|t*4|t*4|t*5|t*5L")
    assert pr.layout == (2, 4, 4, 4, 4, 4, 5, 5)
    with pytest.raises(ScheduleError, match="dualpipe-v needs micro_batches >= 2\\*pp = 16"):
        project(LLAMA, MI300X, par(vpp=2, global_batch_size=12), "dualpipe-v")
