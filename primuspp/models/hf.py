"""A ModelSpec from a local Hugging Face `config.json` (never downloaded).

Architectures: Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, DeepSeek-V3. DeepSeek-V3's multi-token
prediction module (`num_nextn_predict_layers`) is not part of the model counted or planned here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError
from primuspp.inputs import load_json
from primuspp.models.spec import ModelSpec

SUPPORTED = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "MixtralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "DeepseekV3ForCausalLM",
)


def _int(cfg: dict[str, Any], name: str, where: str, default: int | None = None) -> int:
    value = cfg.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where}: {name}={value!r}: expected an integer >= 0", key=name)
    return value


def from_hf_config(path: str | Path, key: str = "--model", name: str | None = None) -> ModelSpec:
    """Read `path` (a config.json) under primuspp.inputs' limits and map it onto a ModelSpec."""
    path = Path(path)
    cfg = load_json(path, key=key)
    where = f"{key} {path}"
    if not isinstance(cfg, dict):
        raise ConfigError(f"{where}: expected a JSON object (a Hugging Face config.json)", key=key)
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch not in SUPPORTED:
        raise ConfigError(
            f"{where}: architectures={archs!r}: unsupported architecture; supported: {', '.join(SUPPORTED)}",
            key=key,
        )

    def get(field: str, default: int | None = None) -> int:
        return _int(cfg, field, where, default)

    hidden, heads = get("hidden_size"), get("num_attention_heads")
    common: dict[str, Any] = dict(
        name=name or cfg.get("_name_or_path") or path.parent.name or path.stem,
        layers=get("num_hidden_layers"),
        hidden=hidden,
        ffn=get("intermediate_size"),
        heads=heads,
        kv_heads=get("num_key_value_heads", heads),
        head_dim=get("head_dim", 0),
        vocab=get("vocab_size"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        norm="rmsnorm",
        swiglu=cfg.get("hidden_act", "silu") == "silu",
        qkv_bias=bool(cfg.get("attention_bias", arch == "Qwen2ForCausalLM")),
    )
    if arch in ("LlamaForCausalLM", "MistralForCausalLM") and (
        cfg.get("attention_bias") or cfg.get("mlp_bias")
    ):
        # Llama's attention_bias also puts a bias on the output projection, mlp_bias on every MLP linear
        raise ConfigError(f"{where}: attention_bias / mlp_bias true is not modelled for {arch}", key=key)
    if not isinstance(common["name"], str):
        common["name"] = path.stem
    if arch == "MixtralForCausalLM":
        common.update(
            experts=get("num_local_experts"), top_k=get("num_experts_per_tok"), expert_ffn=common["ffn"]
        )
    elif arch == "Qwen3ForCausalLM":
        common.update(qk_norm=True)
    elif arch == "Qwen3MoeForCausalLM":
        if cfg.get("mlp_only_layers"):
            raise ConfigError(f"{where}: mlp_only_layers is not supported (dense layers among MoE)", key=key)
        common.update(
            qk_norm=True,
            experts=get("num_experts"),
            top_k=get("num_experts_per_tok"),
            expert_ffn=get("moe_intermediate_size"),
            moe_layer_freq=get("decoder_sparse_step", 1),
        )
    elif arch == "DeepseekV3ForCausalLM":
        common.update(
            kv_heads=heads,
            head_dim=0,
            experts=get("n_routed_experts"),
            top_k=get("num_experts_per_tok"),
            expert_ffn=get("moe_intermediate_size"),
            shared_experts=get("n_shared_experts", 0),
            first_dense_layers=get("first_k_dense_replace", 0),
            moe_layer_freq=get("moe_layer_freq", 1),
            router_bias=cfg.get("topk_method") == "noaux_tc",
            q_lora_rank=get("q_lora_rank", 0),
            kv_lora_rank=get("kv_lora_rank"),
            qk_nope_head_dim=get("qk_nope_head_dim"),
            qk_rope_head_dim=get("qk_rope_head_dim"),
            v_head_dim=get("v_head_dim"),
        )
    return ModelSpec(**common)
