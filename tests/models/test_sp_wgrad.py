"""Under sequence parallelism W of a column-parallel linear needs its all-gathered input: `regather` costs
W one all-gather per such linear, `keep` costs the other TP ranks' pieces of it in memory (from F to W)."""

from __future__ import annotations

import pytest

from primuspp.models import PRESETS
from primuspp.models.costs import _ring_ms, head_cost, layer_cost, sp_gathered_inputs
from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel

GPT = PRESETS["megatron-gpt"].with_(hidden=1024, ffn=4096, heads=16)
H100 = load_hardware("h100")


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_keep_costs_memory_regather_costs_w_time(recompute):
    base = dict(tp=4, seq_len=2048, micro_batch_size=2, recompute=recompute)
    keep = layer_cost(GPT, False, Parallel(**base, sp_wgrad="keep"), H100)
    regather = layer_cost(GPT, False, Parallel(**base, sp_wgrad="regather"), H100)
    tokens, gathered = 2 * 2048, sp_gathered_inputs(GPT, False)
    assert gathered == 2  # QKV and fc1
    piece = 2 * tokens * GPT.hidden / 4  # bf16 sequence piece of one input
    extra = gathered * 3 * piece  # the other three ranks' pieces
    assert keep.memory.w_kept - regather.memory.w_kept == pytest.approx(extra)
    if recompute == "none":
        assert keep.memory.activation - regather.memory.activation == pytest.approx(extra)
    else:  # full recompute keeps the layer input only until B; B's re-run saves what W needs
        assert keep.memory.activation == regather.memory.activation
    gather = _ring_ms(tokens * GPT.hidden * 2, 4, 1.0, H100)
    assert regather.wgrad - keep.wgrad == pytest.approx(gathered * gather)
    assert (regather.forward, regather.backward) == (keep.forward, keep.backward)
    head_keep = head_cost(GPT, Parallel(**base, sp_wgrad="keep"), H100)
    head_regather = head_cost(GPT, Parallel(**base, sp_wgrad="regather"), H100)
    assert head_regather.wgrad - head_keep.wgrad == pytest.approx(gather)
    assert head_keep.memory.activation - head_regather.memory.activation == pytest.approx(3 * piece)


@pytest.mark.parametrize("par", [dict(tp=1), dict(tp=4, sequence_parallel=False)])
def test_no_sequence_parallelism_no_difference(par):
    keep = layer_cost(GPT, False, Parallel(**par, sp_wgrad="keep"), H100)
    regather = layer_cost(GPT, False, Parallel(**par, sp_wgrad="regather"), H100)
    assert keep == regather


def test_simulate_and_plan_take_the_choice(capsys):
    import json

    from primuspp.commands.app import main

    base = ["simulate", "--model", "llama3-70b", "--gpu", "h100", "--tp", "8", "--pp", "4", "--algo", "zbv"]
    runs = {}
    for choice in ("keep", "regather"):
        assert main([*base, "--sp-wgrad", choice, "--json"]) == 0
        runs[choice] = json.loads(capsys.readouterr().out)
    assert main([*base, "--json"]) == 0  # regather is the default
    assert json.loads(capsys.readouterr().out) == runs["regather"]
    assert runs["keep"] != runs["regather"]
    assert main([*base, "--sp-wgrad", "later"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --sp-wgrad later: expected regather or keep\n"
