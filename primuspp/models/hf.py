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

#: the file's keys, by the ModelSpec field each sets (`get` names the others' field)
_FIELDS = {
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "intermediate_size": "ffn",
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "head_dim": "head_dim",
    "vocab_size": "vocab",
    "num_local_experts": "experts",
    "num_experts": "experts",
    "n_routed_experts": "experts",
    "num_experts_per_tok": "top_k",
    "moe_intermediate_size": "expert_ffn",
    "n_shared_experts": "shared_experts",
    "first_k_dense_replace": "first_dense_layers",
    "moe_layer_freq": "moe_layer_freq",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
}
SUPPORTED = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "MixtralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "DeepseekV3ForCausalLM",
)


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

    source: dict[str, str] = {}  # ModelSpec field -> the key of the file it came from

    def get(key: str, default: int | None = None, field: str | None = None) -> Any:
        """The file's `key` (a missing or null one: `default`), checked by ModelSpec as `field`."""
        source[field or _FIELDS[key]] = key
        value = cfg.get(key)
        return default if value is None else value

    heads = get("num_attention_heads")
    common: dict[str, Any] = dict(
        name=name or cfg.get("_name_or_path") or path.parent.name or path.stem,
        layers=get("num_hidden_layers"),
        hidden=get("hidden_size"),
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
        common.update(experts=get("num_local_experts"), top_k=get("num_experts_per_tok"))
        common.update(expert_ffn=get("intermediate_size", field="expert_ffn"))
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
            moe_layer_freq=get("decoder_sparse_step", 1, "moe_layer_freq"),
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
    try:
        return ModelSpec(**common)
    except ConfigError as err:  # named by the file's keys, not ModelSpec's
        message = str(err)
        for field, name_ in source.items():
            message = message.replace(f"model.{field}=", f"{name_}=")
        field = str(err.key).removeprefix("model.")
        raise ConfigError(f"{where}: {message}", key=source.get(field, key)) from None
