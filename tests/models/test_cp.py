"""Context parallelism: what CP divides (tokens, attention work, activations), what its ring costs and how
much of it the attention hides, the optimizer sharded over DP x CP, the planner's CP dimension and the
one-line errors of `--cp`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from primuspp.commands.app import main
from primuspp.models import PRESETS
from primuspp.models.costs import attention_core_flops, cp_exposed_ms, cp_ring_ms, layer_cost
from primuspp.models.hardware import Link, load_hardware
from primuspp.models.memory import layer_memory, state_bytes
from primuspp.models.parallel import Parallel
from primuspp.models.plan import candidates
from primuspp.models.project import project

H100 = load_hardware("h100")
LLAMA = PRESETS["llama3-8b"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("flash", [True, False])
@pytest.mark.parametrize("moe", [False, True])
def test_cp_divides_every_saved_activation(flash, moe):
    spec = PRESETS["mixtral-8x7b"] if moe else LLAMA
    one = layer_memory(spec, moe, Parallel(seq_len=8192, flash_attention=flash))
    four = layer_memory(spec, moe, Parallel(seq_len=8192, cp=4, flash_attention=flash))
    assert four.activation == pytest.approx(one.activation / 4)
    assert four.w_kept == pytest.approx(one.w_kept / 4)


def test_cp_divides_the_work_of_each_rank():
    one = layer_cost(LLAMA, False, Parallel(seq_len=8192), H100)
    two = layer_cost(LLAMA, False, Parallel(seq_len=8192, cp=2), H100)
    assert two.flops == pytest.approx(one.flops / 2)
    assert attention_core_flops(LLAMA, Parallel(seq_len=8192, cp=2)) == pytest.approx(
        attention_core_flops(LLAMA, Parallel(seq_len=8192)) / 2
    )
    # NVLink's ring hides behind the attention core: nothing added over half of the work (same GEMM
    # efficiency band at 4096 and 8192 tokens)
    assert two.forward == pytest.approx(one.forward / 2)


def test_cp_ring_bytes_and_exposure():
    par = Parallel(seq_len=8192, cp=4, tp=2)
    # 3 steps of this rank's K and V: 2048 tokens x 2 x 8 KV heads x 128 / TP 2, bf16
    step_bytes = 2048 * 2 * 8 * 128 / 2 * 2
    link = H100.intra_node
    want = 3 * (step_bytes / (link.bandwidth * H100.efficiency.comm) + link.latency) * 1e3
    assert cp_ring_ms(LLAMA, par, H100) == pytest.approx(want)
    assert cp_ring_ms(LLAMA, Parallel(seq_len=8192), H100) == 0.0
    # the ring overlaps (CP - 1) / CP of the attention core: only the excess shows
    assert cp_exposed_ms(1.0, 4.0, 4) == 0.0
    assert cp_exposed_ms(5.0, 4.0, 4) == pytest.approx(2.0)
    assert cp_exposed_ms(5.0, 4.0, 1) == 0.0


def test_a_slow_ring_shows_in_forward_and_backward():
    slow = H100.model_copy(update={"intra_node": Link(bandwidth=1e9, latency=1e-5)})
    par = Parallel(seq_len=8192, cp=2)
    fast_cost, slow_cost = layer_cost(LLAMA, False, par, H100), layer_cost(LLAMA, False, par, slow)
    core_ms = attention_core_flops(LLAMA, par) / (H100.peak() * H100.efficiency.attention) * 1e3
    ring = cp_ring_ms(LLAMA, par, slow)
    assert slow_cost.forward - fast_cost.forward == pytest.approx(cp_exposed_ms(ring, core_ms, 2))
    assert slow_cost.backward - fast_cost.backward == pytest.approx(cp_exposed_ms(2 * ring, 2.5 * core_ms, 2))
    assert slow_cost.wgrad == fast_cost.wgrad  # W has no communication


def test_optimizer_and_gradients_over_dp_times_cp():
    assert state_bytes(1000, 0, Parallel(dp=2, cp=4)).total == pytest.approx((6 + 12 / 8) * 1000)
    assert state_bytes(0, 1000, Parallel(dp=2, cp=4, ep=4)).total == pytest.approx((6 + 12 / 2) * 1000)
    par = Parallel(pp=2, dp=2, cp=2, seq_len=8192, global_batch_size=16)
    assert par.gpus == 8 and par.micro_batches == 8 and par.tokens == 4096
    proj = project(LLAMA, H100, par, "1f1b")
    assert proj.dp_sync_ms + proj.dp_hidden_ms > 0 and proj.record()["cp"] == 2


def test_plan_sweeps_admissible_cp_and_fills_the_field(capsys):
    args = ["plan", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "16", "--tp", "1", "--pp", "4"]
    args += ["--seq-len", "8192", "--global-batch-size", "32", "--micro-batch-size", "1", "-a", "1f1b"]
    code, out, _ = run(capsys, *args, "--json", "--all")
    doc = json.loads(out)
    assert code == 0 and doc["configurations_evaluated"] == 3  # CP 1, 2, 4 (8 does not divide 16 / 4)
    assert sorted(r["cp"] for r in doc["results"]) == [1, 2, 4]
    for r in doc["results"]:
        assert r["tp"] * r["cp"] * r["pp"] * r["dp"] == 16
        assert r["micro_batches"] == 32 // r["dp"]


def test_sweep_skips_cp_that_cannot_split_the_sequence():
    base = Parallel(global_batch_size=64, seq_len=4100)  # 4100 = 2 x 2 x 1025: CP 2 only
    items = candidates(LLAMA, H100, 64, base, ["1f1b"], [1], [4], None, None, [1])
    assert sorted({c.par.cp for c in items}) == [1, 2]


def test_sweep_has_one_candidate_at_pp_1():
    # at PP 1 there is no pipeline schedule: interleaving changes nothing, the same step time and peak as 1F1B
    one = project(LLAMA, H100, Parallel(pp=1, global_batch_size=8), "1f1b")
    for vpp in (2, 3, 4):
        inter = project(LLAMA, H100, Parallel(pp=1, vpp=vpp, global_batch_size=8), "1f1b-interleaved")
        assert inter.step_time_ms == pytest.approx(one.step_time_ms, rel=1e-9)
        assert inter.peak_memory_bytes == pytest.approx(one.peak_memory_bytes, rel=1e-9)
    base = Parallel(global_batch_size=64, seq_len=4096)
    items = candidates(LLAMA, H100, 8, base, ["1f1b-interleaved"], [1], [1, 2], None, None, [1], [1])
    want = {("1f1b-interleaved", 2, v) for v in (2, 3, 4)} | {("1f1b", 1, 1)}
    assert {(c.algorithm, c.par.pp, c.par.vpp) for c in items} == want
    items = candidates(LLAMA, H100, 8, base, ["1f1b-interleaved", "zbv"], [1], [1], [2], None, [1], [1])
    assert [(c.algorithm, c.par.pp, c.par.vpp) for c in items] == [("1f1b", 1, 1)]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--cp", "3", "--gpus", "16"], "error: --gpus 16: not divisible by TP x CP x PP (1 x 3 x 4)"),
        (["--cp", "2", "--seq-len", "4098"], "error: --seq-len 4098: not divisible by 2 x CP = 4"),
        (["--cp", "0"], "error: --cp 0: expected an integer from 1 to 1,048,576"),
    ],
)
def test_simulate_cp_bad_input_one_line(capsys, tmp_path, args, match):
    argv = ["simulate", "--model", "llama3-8b", "--pp", "4", "-a", "1f1b", "-o", str(tmp_path / "out"), *args]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(match), err
    assert not (tmp_path / "out").exists()


def test_plan_cp_bad_input_one_line(capsys):
    args = ["plan", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "16", "-a", "1f1b", "--tp", "1"]
    code, out, err = run(capsys, *args, "--pp", "4", "--cp", "3")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no configuration can run (not divisible)" in err and "--cp 3" in err
    code, out, err = run(capsys, *args, "--pp", "2", "--cp", "2", "--seq-len", "1002")
    assert code == 2 and err.count("\n") == 1 and "--seq-len 1002: not divisible by 2 x CP = 4" in err


def test_simulate_cp_json(capsys, tmp_path):
    argv = ["simulate", "--model", "llama3-8b", "--pp", "2", "--cp", "2", "--gpus", "8", "-a", "1f1b"]
    code, out, _ = run(capsys, *argv, "--seq-len", "8192", "-o", str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["cp"] == 2 and doc["dp"] == 2 and doc["results"][0]["cp"] == 2


def test_cp_with_twice_the_micro_batch_is_never_faster():
    # why the default sweep leaves out CP 2c x micro-batch 2k when it has c x k: the same tokens per rank,
    # microbatch count and memory, on a longer ring
    base = Parallel(pp=4, global_batch_size=64, seq_len=8192)
    for c, k in ((1, 1), (2, 2), (1, 2)):
        small = replace(base, cp=c, micro_batch_size=k, dp=16 // (4 * c))
        big = replace(base, cp=2 * c, micro_batch_size=2 * k, dp=16 // (8 * c))
        a, b = project(LLAMA, H100, small, "1f1b"), project(LLAMA, H100, big, "1f1b")
        assert a.par.micro_batches == b.par.micro_batches
        assert b.peak_memory_bytes == pytest.approx(a.peak_memory_bytes)
        assert b.step_time_ms >= a.step_time_ms
    items = candidates(LLAMA, H100, 64, Parallel(global_batch_size=64, seq_len=8192), ["1f1b"], [1], [4])
    assert sorted({(c.par.cp, c.par.micro_batch_size) for c in items}) == [
        (1, 1), (1, 2), (1, 4), (2, 1), (4, 1), (8, 1),
    ]  # fmt: skip
