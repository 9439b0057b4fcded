"""Parameter counts equal the published ones exactly; config.json files map onto the presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primuspp.errors import ConfigError
from primuspp.models import PRESETS, preset, resolve_model
from primuspp.models.hf import from_hf_config

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"

# Published totals. "hub total" is the Hugging Face hub's safetensors total for the model (the element count
# of the checkpoint, = the index's metadata.total_size / 2 bytes for a bf16/fp16 checkpoint). DeepSeek-V3's
# hub checkpoint holds 685B with the multi-token-prediction module; 671,026,419,200 is the main model's
# count (the DeepSeek-V3 technical report's "671B total"), which we count without MTP.
PUBLISHED_TOTAL = {
    "llama2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf, hub total
    "llama2-70b": 68_976_648_192,  # meta-llama/Llama-2-70b-hf, hub total
    "llama3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B, hub total
    "llama3-70b": 70_553_706_496,  # meta-llama/Meta-Llama-3-70B, hub total
    "llama3.1-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B, hub total (bf16 checkpoint)
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1, hub total
    "qwen3-235b-a22b": 235_093_634_560,  # Qwen/Qwen3-235B-A22B, hub total (index: 470,187,269,120 B)
    "deepseek-v3": 671_026_419_200,  # deepseek-ai/DeepSeek-V3 without the MTP layer (see above)
}

# Active counts: no model card gives an exact one (Mixtral: "12.9B", Qwen3: "22B", DeepSeek-V3: "37B"), so
# these are our counts (router and both embeddings counted, top_k routed experts), checked against the
# rounded published figure and pinned so a formula change is seen.
ACTIVE = {
    "mixtral-8x7b": (12_879_925_248, 12.9e9),
    "qwen3-235b-a22b": (22_190_763_520, 22e9),
    "deepseek-v3": (37_552_297_472, 37e9),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_preset_total_equals_published(name):
    assert PRESETS[name].parameters == PUBLISHED_TOTAL[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_hf_config_matches_preset(name):
    spec = from_hf_config(CONFIGS / f"{name}.json")
    assert spec.with_(name=name) == PRESETS[name]
    assert spec.parameters == PUBLISHED_TOTAL[name]


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_moe_active_parameters(name):
    exact, rounded = ACTIVE[name]
    spec = PRESETS[name]
    assert spec.active_parameters == exact
    assert abs(exact - rounded) / rounded < 0.03


def test_dense_active_is_total():
    spec = PRESETS["llama3-70b"]
    assert spec.active_parameters == spec.parameters


def test_mixtral_active_by_hand():
    # 2 of 8 experts of 3 x 4096 x 14336 per layer are used; everything else is shared
    spec = PRESETS["mixtral-8x7b"]
    expert = 3 * 4096 * 14336
    assert spec.parameters - spec.active_parameters == 32 * 6 * expert


def test_qwen2_tied_with_qkv_bias():
    # Qwen/Qwen2-0.5B, hub total: tied embeddings, biases on Q/K/V only
    spec = from_hf_config(CONFIGS / "qwen2-0.5b.json")
    assert spec.tied_embeddings and spec.qkv_bias
    assert spec.parameters == 494_032_768


def test_deepseek_layer_kinds():
    spec = PRESETS["deepseek-v3"]
    assert spec.layers - spec.moe_layers == 3 and spec.moe_layers == 58
    assert [spec.is_moe_layer(i) for i in range(4)] == [False, False, False, True]


def test_megatron_gpt_default():
    spec = PRESETS["megatron-gpt"]
    h, v, f, s = 128, 256, 512, 128
    layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    assert spec.parameters == v * h + s * h + 8 * layer + 2 * h + v * h


def test_resolve_preset_path_and_dir(tmp_path):
    assert resolve_model("LLAMA3-8B") is PRESETS["llama3-8b"]
    (tmp_path / "config.json").write_text((CONFIGS / "llama3-8b.json").read_text())
    assert resolve_model(str(tmp_path)).parameters == PUBLISHED_TOTAL["llama3-8b"]


def test_unknown_preset_suggests():
    with pytest.raises(ConfigError, match=r"--model llama3-7b: unknown model \(did you mean .*llama3-8b"):
        preset("llama3-7b")


def test_unsupported_architecture_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "n_embd": 768}))
    with pytest.raises(ConfigError, match=r"GPT2LMHeadModel.*unsupported architecture") as info:
        resolve_model(str(path))
    assert "\n" not in str(info.value)


def test_bad_field_named(tmp_path):
    cfg = json.loads((CONFIGS / "llama3-8b.json").read_text())
    cfg["num_key_value_heads"] = 5
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(
        ConfigError, match=r"c.json: num_key_value_heads=5: must divide num_attention_heads=32"
    ):
        from_hf_config(path)
    # named by the file's keys (ModelSpec's names were shown), each size bounded, no bool for a number
    for field, value, match in (
        ("hidden_size", "big", "hidden_size='big': expected an integer from 1 to"),
        ("num_hidden_layers", 0, "num_hidden_layers=0: expected an integer from 1 to 16,384"),
        ("num_hidden_layers", 10**9, "num_hidden_layers=1000000000: expected an integer from 1 to 16,384"),
        ("vocab_size", True, "vocab_size=True: expected an integer"),
        ("intermediate_size", -1, "intermediate_size=-1: expected an integer from 1"),
        ("max_position_embeddings", 5, None),
    ):
        path.write_text(json.dumps({**cfg, "num_key_value_heads": 8, field: value}))
        if match is None:
            assert from_hf_config(path).layers == 32
            continue
        with pytest.raises(ConfigError, match=match) as info:
            from_hf_config(path)
        assert info.value.key == field
    text = json.dumps({**cfg, "num_key_value_heads": 8})
    path.write_text(text[:-1] + ', "num_hidden_layers": 4}')  # the last one silently won
    with pytest.raises(ConfigError, match="duplicate key 'num_hidden_layers'"):
        from_hf_config(path)


def test_llama_biases_refused(tmp_path):
    cfg = json.loads((CONFIGS / "llama3-8b.json").read_text())
    cfg["attention_bias"] = True
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(
        ConfigError, match="attention_bias / mlp_bias true is not modelled for LlamaForCausalLM"
    ):
        from_hf_config(path)
