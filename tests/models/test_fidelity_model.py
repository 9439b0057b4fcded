"""The time model's parts: V budgets in F-activation units with honest bytes, per-operation overheads, the
split W's efficiency, DP overlap, optimizer bytes, partial recompute, the assumptions header and the notes."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.models import PRESETS
from primuspp.models.hardware import Overhead, load_hardware
from primuspp.models.memory import state_bytes
from primuspp.models.parallel import Parallel
from primuspp.models.project import part_costs, project
from primuspp.models.runs import assumption_lines, assumptions, schedule_notes

MI355X = load_hardware("mi355x")
H100 = load_hardware("h100")
#: Qwen3-235B cut to 16 layers: MoE layers whose W keeps more than F saved (b_free < 0)
MOE = PRESETS["qwen3-235b-a22b"].with_(layers=16)
DENSE = PRESETS["llama2-7b"].with_(layers=8)


def moe_par(**kw) -> Parallel:
    base = dict(pp=4, ep=8, dp=8, micro_batch_size=1, global_batch_size=128, seq_len=4096)
    return Parallel(**{**base, **kw}, **MI355X.kernels())


def test_v_schedules_do_not_serialise_when_w_keeps_more_than_f():
    """Budgets in F-activation units (sail-sg / Primus): zbv on MoE layers runs as fast as 1f1b or faster,
    even with full recompute (where W keeps ~30x what F saved), and says what its bytes pass."""
    for recompute in ("none", "full"):
        one = project(MOE, MI355X, moe_par(recompute=recompute), "1f1b")
        zbv = project(MOE, MI355X, moe_par(recompute=recompute, vpp=2), "zbv")
        assert zbv.step_time_ms <= one.step_time_ms * 1.001
        assert zbv.bubble_rate < 0.25
    assert zbv.notes and "pass its budget of 4 microbatches" in zbv.notes[0]
    assert "GB" in zbv.notes[0] and "\n" not in zbv.notes[0]


def test_overheads_and_split_w_efficiency_cost_time():
    base = project(DENSE, H100, Parallel(pp=4, global_batch_size=16), "zero-bubble")
    slow_w = H100.model_copy(update={"efficiency": H100.efficiency.model_copy(update={"wgrad": 0.5})})
    ohead = H100.model_copy(update={"overhead": Overhead(compute=1e-3, p2p=1e-3)})
    assert project(DENSE, slow_w, base.par, "zero-bubble").step_time_ms > base.step_time_ms
    with_overhead = project(DENSE, ohead, base.par, "zero-bubble")
    # each rank runs 3 x 16 compute nodes: at least that many overheads on the critical path
    assert with_overhead.pipeline_ms >= base.pipeline_ms + 48 * 1.0 - 1e-6
    # 1f1b fuses B and W (BW): the split W's efficiency does not touch it
    one = project(DENSE, H100, base.par, "1f1b")
    assert project(DENSE, slow_w, base.par, "1f1b").step_time_ms == pytest.approx(one.step_time_ms)


def test_dp_overlap_hides_part_of_the_sync():
    par = Parallel(pp=2, dp=16, global_batch_size=64, **H100.kernels())
    on = project(DENSE, H100, par, "1f1b")
    off = project(
        DENSE, H100, dataclasses.replace(par, overlap_grad_reduce=False, overlap_param_gather=False), "1f1b"
    )
    assert off.dp_hidden_ms == pytest.approx(0.0, abs=1e-9) and off.dp_sync_ms > 0
    assert on.dp_sync_ms + on.dp_hidden_ms == pytest.approx(off.dp_sync_ms)
    assert on.dp_sync_ms < off.dp_sync_ms and on.step_time_ms < off.step_time_ms


def test_optimizer_bytes_from_the_dtypes():
    assert state_bytes(1000, 0, Parallel(distributed_optimizer=False)).total == 18 * 1000  # Megatron's
    bf16 = Parallel(distributed_optimizer=False, main_grad_bytes=2, moment_bytes=2)
    assert state_bytes(1000, 0, bf16).total == 12 * 1000  # precision-aware: 2 + 2 + 4 + 2 + 2
    assert state_bytes(1000, 0, Parallel(dp=4, moment_bytes=2)).total == (2 + 4 + 8 / 4) * 1000


@settings(max_examples=6, deadline=None)
@given(st.integers(min_value=1, max_value=3))
def test_partial_recompute_between_none_and_full(n):
    layout = (4, 4)
    costs = {
        key: part_costs(DENSE, Parallel(pp=2, global_batch_size=8, **kw), H100, layout)
        for key, kw in (
            ("none", {}),
            ("part", {"recompute": "full", "recompute_layers": n}),
            ("full", {"recompute": "full"}),
        )
    }
    for field in ("backward", "activation"):
        lo, mid, hi = (getattr(costs[k], field)[1] for k in ("full", "part", "none"))
        lo, hi = min(lo, hi), max(lo, hi)
        assert lo < mid < hi
    assert costs["part"].forward == costs["none"].forward


def test_assumptions_header_and_notes():
    par = moe_par(moment_bytes=2, main_grad_bytes=2)
    doc = assumptions(MI355X, par)
    assert doc["optimizer"]["bytes_per_param"] == 12 and doc["gpu_profile"]["source"].startswith("calibrated")
    assert doc["overlap"] == {"grad-reduce": True, "param-gather": True, "tp": True, "ep": False}
    lines = assumption_lines(doc)
    assert len(lines) == 2 and "seq 4096" in lines[0] and "12 B/param" in lines[0]
    assert "MI355X profile, calibrated from" in lines[1]
    recs = [
        {
            "algorithm": a,
            "tp": 1,
            "cp": 1,
            "pp": 4,
            "ep": 8,
            "dp": 8,
            "micro_batch_size": 1,
            "recompute": "none",
            "tokens_per_s_per_gpu": v,
            "notes": [],
        }
        for a, v in (("1f1b", 100.0), ("v-min", 80.0), ("zbv", 110.0))
    ]
    assert schedule_notes(recs) == [
        "v-min: projects slower than 1f1b on the same configuration (0.80x, 80 vs 100 tokens/s/GPU)"
    ]


def test_tp_overlap_hides_communication_and_reports_it():
    spec = PRESETS["llama2-70b"].with_(layers=8)
    par = Parallel(tp=8, pp=2, global_batch_size=8, **H100.kernels())
    on = project(spec, H100, par, "1f1b")
    off = project(spec, H100, dataclasses.replace(par, tp_comm_overlap=False), "1f1b")
    assert on.comm_exposed_ms + on.comm_hidden_ms == pytest.approx(off.comm_exposed_ms)
    assert off.comm_hidden_ms == 0 and on.comm_hidden_ms > 0 and on.step_time_ms < off.step_time_ms
    assert on.record()["comm_hidden_ms"] == on.comm_hidden_ms
