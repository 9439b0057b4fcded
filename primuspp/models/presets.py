"""Named model specs, and `resolve_model`: a preset name or a Hugging Face config.json path.

Shapes are the published config.json values of each model (Hugging Face hub), and the defaults of
`primuspp train`'s Megatron GPT (`megatron-gpt`).
"""

from __future__ import annotations

from pathlib import Path

from primuspp.errors import ConfigError
from primuspp.models.spec import ModelSpec
from primuspp.suggest import close_names

_LLAMA = dict(norm="rmsnorm", swiglu=True)

PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("llama2-7b", layers=32, hidden=4096, ffn=11008, heads=32, vocab=32000, **_LLAMA),
        ModelSpec(
            "llama2-70b", layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, vocab=32000, **_LLAMA
        ),
        ModelSpec(
            "llama3-8b", layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256, **_LLAMA
        ),
        ModelSpec(
            "llama3-70b", layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, vocab=128256, **_LLAMA
        ),
        ModelSpec(
            "llama3.1-405b",
            layers=126,
            hidden=16384,
            ffn=53248,
            heads=128,
            kv_heads=8,
            vocab=128256,
            **_LLAMA,
        ),
        ModelSpec(
            "mixtral-8x7b",
            layers=32,
            hidden=4096,
            ffn=14336,
            heads=32,
            kv_heads=8,
            vocab=32000,
            experts=8,
            top_k=2,
            expert_ffn=14336,
            **_LLAMA,
        ),
        ModelSpec(
            "qwen3-235b-a22b",
            layers=94,
            hidden=4096,
            ffn=12288,
            heads=64,
            kv_heads=4,
            head_dim=128,
            vocab=151936,
            qk_norm=True,
            experts=128,
            top_k=8,
            expert_ffn=1536,
            **_LLAMA,
        ),
        ModelSpec(
            "deepseek-v3",
            layers=61,
            hidden=7168,
            ffn=18432,
            heads=128,
            vocab=129280,
            experts=256,
            top_k=8,
            expert_ffn=2048,
            shared_experts=1,
            first_dense_layers=3,
            router_bias=True,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            **_LLAMA,
        ),
        # Megatron-LM README's GPT-3 175B (its throughput tables: vocab 131,072, LayerNorm, GeLU, biases)
        ModelSpec(
            "gpt3-175b",
            layers=96,
            hidden=12288,
            ffn=49152,
            heads=96,
            vocab=131072,
            norm="layernorm",
            swiglu=False,
            linear_bias=True,
        ),
        # `primuspp train`'s default Megatron GPT (backends/megatron/model.py GPTSpec and TransformerConfig's
        # defaults): LayerNorm, GeLU MLP of 4 x hidden, biases on every linear, learned positions, untied.
        ModelSpec(
            "megatron-gpt",
            layers=8,
            hidden=128,
            ffn=512,
            heads=4,
            vocab=256,
            norm="layernorm",
            swiglu=False,
            linear_bias=True,
            learned_positions=128,
        ),
    )
}


def preset(name: str, key: str = "--model") -> ModelSpec:
    """The preset `name`; an unknown name is one line with the closest names."""
    spec = PRESETS.get(name.lower())
    if spec is not None:
        return spec
    raise ConfigError(
        f"{key} {name}: unknown model{close_names(name, PRESETS, 0.5)}; presets: {', '.join(PRESETS)}, "
        "or a config.json path",
        key=key,
    )


def resolve_model(value: str, key: str = "--model") -> ModelSpec:
    """A preset name, or the path of a Hugging Face config.json (a file, or a directory holding one)."""
    from primuspp.models.hf import from_hf_config

    if value.lower() in PRESETS:
        return PRESETS[value.lower()]
    path = Path(value)
    if path.suffix == ".json" or path.exists() or "/" in value:
        if path.is_dir():
            path = path / "config.json"
        return from_hf_config(path, key=key)
    return preset(value, key)
