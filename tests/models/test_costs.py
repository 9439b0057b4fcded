"""Costs and memory per layer: Korthikanti et al.'s activation formula, Megatron's 18 / 6 + 12/DP bytes
per parameter, what B and W each hold, recompute."""

from __future__ import annotations

import pytest

from primuspp.models import PRESETS
from primuspp.models.costs import attention_core_flops, layer_cost
from primuspp.models.hardware import load_hardware
from primuspp.models.memory import layer_memory, state_bytes
from primuspp.models.parallel import Parallel
from tests.oracles.formulas import korthikanti_bytes

GPT = PRESETS["megatron-gpt"].with_(hidden=1024, ffn=4096, heads=16)
H100 = load_hardware("h100")


@pytest.mark.parametrize(
    ("tp", "sp", "recompute"),
    [
        (1, False, "none"),
        (4, False, "none"),
        (4, True, "none"),
        (8, True, "selective"),
        (1, False, "selective"),
    ],
)
def test_activation_equals_korthikanti(tp, sp, recompute):
    # their GPT layer: MHA, 4h GeLU MLP, unfused softmax, dropout everywhere
    # Megatron saves each column-parallel input as its sequence piece (it re-gathers it for the weight grad)
    par = Parallel(
        tp=tp,
        sequence_parallel=sp,
        recompute=recompute,
        flash_attention=False,
        seq_len=2048,
        sp_wgrad="regather",
    )
    got = layer_memory(GPT, False, par, dropout=True).activation
    # + what their count leaves out: the two LayerNorms' fp32 mean and 1/sigma per token
    stats = 2 * 2 * 4 * 2048 / (tp if sp else 1)
    assert got == pytest.approx(korthikanti_bytes(GPT, par) + stats, rel=1e-12)


def test_flash_attention_drops_the_square():
    base = Parallel(seq_len=8192, flash_attention=False)
    flash = Parallel(seq_len=8192, flash_attention=True)
    spec = PRESETS["llama3-8b"]
    diff = layer_memory(spec, False, base).activation - layer_memory(spec, False, flash).activation
    # the s² scores against the log-sum-exp, and GQA's K and V repeated to all 32 heads (from 8)
    expanded = 2 * (32 - 8) * 128 * 8192 * 2
    assert diff == pytest.approx(2 * 32 * 8192**2 - 4 * 32 * 8192 + expanded)


def test_state_bytes_megatron_accounting():
    assert state_bytes(1000, 0, Parallel(dp=8, distributed_optimizer=False)).total == 18 * 1000
    assert state_bytes(1000, 0, Parallel(dp=8)).total == (6 + 12 / 8) * 1000
    # experts shard their optimizer over expert data parallel (DP / EP)
    assert state_bytes(0, 1000, Parallel(dp=8, ep=4)).total == (6 + 12 / 2) * 1000


def test_w_only_for_gemms():
    spec, par = PRESETS["llama3-8b"], Parallel(seq_len=8192)
    c = layer_cost(spec, False, par, H100)
    core_ms = attention_core_flops(spec, par) / (H100.peak() * H100.efficiency.attention) * 1e3
    # B = the GEMMs' input gradients (same time as W) + the attention core's backward + elementwise
    assert c.backward - c.wgrad > 2.5 * core_ms
    assert c.forward > c.wgrad
    moe = layer_cost(PRESETS["mixtral-8x7b"], True, par, H100)
    assert moe.wgrad / moe.backward != pytest.approx(c.wgrad / c.backward, rel=0.01)


def test_recompute_moves_time_and_memory():
    spec = PRESETS["llama3-8b"]
    none = layer_cost(spec, False, Parallel(seq_len=4096), H100)
    sel = layer_cost(spec, False, Parallel(seq_len=4096, recompute="selective"), H100)
    full = layer_cost(spec, False, Parallel(seq_len=4096, recompute="full"), H100)
    assert sel.forward == none.forward and sel.backward > none.backward
    assert full.backward == pytest.approx(none.backward + none.forward)
    assert full.memory.activation == 2 * 4096 * 4096  # the layer's input only
    assert full.flops == none.flops  # model FLOPs do not count recomputation


def test_tp_divides_and_communicates():
    spec = PRESETS["llama3-70b"]
    one = layer_cost(spec, False, Parallel(seq_len=4096), H100)
    eight = layer_cost(spec, False, Parallel(tp=8, seq_len=4096), H100)
    assert eight.flops == pytest.approx(one.flops / 8)
    assert eight.forward > one.forward / 8  # collectives and smaller GEMMs
    assert eight.memory.activation < one.memory.activation / 7
