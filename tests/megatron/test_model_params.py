"""A megatron-core GPTModel built from a ModelSpec has exactly the parameters the spec counts.

Each preset is scaled down (few layers, small widths) keeping what decides its structure: GQA or MLA, SwiGLU
or GeLU, RMSNorm or LayerNorm, biases, q/k norms, tied embeddings, learned positions, dense layers before MoE
ones, shared experts, a router score bias. The models are built in a child process (Megatron needs a process
group) on CPU; the count includes DeepSeek's router score bias, a buffer in Megatron and a tensor of its
checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from primuspp.models import PRESETS, ModelSpec

ROOT = Path(__file__).resolve().parents[2]


def scaled(spec: ModelSpec) -> ModelSpec:
    """A tiny model of the same structure."""
    heads = 8
    kv = heads if spec.kv_groups == spec.heads else 2
    changes: dict = dict(layers=min(spec.layers, 3), hidden=64, heads=heads, kv_heads=kv, ffn=96, vocab=100)
    changes["head_dim"] = 16 if spec.head_dim * spec.heads != spec.hidden else 8
    if spec.learned_positions:
        changes["learned_positions"] = 32
    if spec.moe:
        changes.update(experts=4, top_k=2, expert_ffn=32, first_dense_layers=min(spec.first_dense_layers, 1))
    if spec.mla:
        changes.update(
            q_lora_rank=24 if spec.q_lora_rank else 0,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=12,
            head_dim=8,
        )
    return spec.with_(**changes)


CASES = {
    name: scaled(PRESETS[name])
    for name in ("megatron-gpt", "llama2-7b", "llama3-8b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3")
}
CASES["qwen2-tied-qkv-bias"] = scaled(PRESETS["llama3-8b"]).with_(tied_embeddings=True, qkv_bias=True)
CASES["deepseek-no-q-lora"] = CASES["deepseek-v3"].with_(q_lora_rank=0, router_bias=False)


def _no_params_class():
    import torch

    class NoParams(torch.nn.Module):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    return NoParams


def build_counts(specs: dict[str, dict]) -> dict[str, int]:
    """In a fresh process: each spec as a megatron-core GPTModel, its parameter (+ expert-bias) count."""
    import importlib.util

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    if not torch.cuda.is_available():
        # MLA's rotary embedding asks for the CUDA device whatever use_cpu_initialization says; on a CPU-only
        # torch its buffer goes to the CPU instead (it holds no parameters)
        torch.cuda.current_device = lambda: "cpu"
    from megatron.core.transformer import multi_latent_attention

    if importlib.util.find_spec("transformer_engine") is None:
        # no Transformer Engine: MLA must not test for its classes (megatron's stand-ins are not types)
        multi_latent_attention.HAVE_TE = False
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    global _NoParams
    _NoParams = _no_params_class()
    out = {}
    for name, fields in specs.items():
        spec = ModelSpec(**fields)
        kw: dict = dict(
            num_layers=spec.layers,
            hidden_size=spec.hidden,
            num_attention_heads=spec.heads,
            num_query_groups=spec.kv_groups,
            kv_channels=spec.head_dim,
            ffn_hidden_size=spec.ffn,
            gated_linear_unit=spec.swiglu,
            activation_func=F.silu if spec.swiglu else F.gelu,
            add_bias_linear=spec.linear_bias,
            add_qkv_bias=spec.qkv_bias,
            qk_layernorm=spec.qk_norm,
            normalization="RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm",
            use_cpu_initialization=True,
            params_dtype=torch.float32,
        )
        if spec.moe:
            kw.update(
                num_moe_experts=spec.experts,
                moe_router_topk=spec.top_k,
                moe_ffn_hidden_size=spec.expert_ffn,
                moe_layer_freq=[int(spec.is_moe_layer(i)) for i in range(spec.layers)],
                moe_router_enable_expert_bias=spec.router_bias,
                moe_router_score_function="sigmoid" if spec.router_bias else "softmax",
            )
            if spec.shared_experts:
                kw["moe_shared_expert_intermediate_size"] = spec.shared_experts * spec.expert_ffn
        if spec.mla:
            kw.update(
                q_lora_rank=spec.q_lora_rank or None,
                kv_lora_rank=spec.kv_lora_rank,
                qk_head_dim=spec.qk_nope_head_dim,
                qk_pos_emb_head_dim=spec.qk_rope_head_dim,
                v_head_dim=spec.v_head_dim,
                rope_type="yarn",  # DeepSeek-V3's; its "rope" branch allocates on CUDA
                qk_layernorm=True,  # MLA's q/kv latent norms
            )
            config = MLATransformerConfig(**kw)
        else:
            config = TransformerConfig(**kw)
        block = get_gpt_decoder_block_spec(config, use_transformer_engine=False)
        if spec.mla:
            # Megatron's local DotProductAttention does not take MLA's key width (only TE's does); the core
            # attention holds no parameters, so a parameterless stand-in changes no count
            for layer in block.layer_specs:
                layer.submodules.self_attention.submodules.core_attention = _NoParams
        model = GPTModel(
            config,
            block,
            vocab_size=spec.vocab,
            max_sequence_length=spec.learned_positions or 64,
            position_embedding_type="learned_absolute" if spec.learned_positions else "rope",
            share_embeddings_and_output_weights=spec.tied_embeddings,
        )
        count = sum(p.numel() for p in model.parameters())
        count += sum(b.numel() for n, b in model.named_buffers() if n.endswith("expert_bias"))
        out[name] = count
    return out


def test_megatron_gpt_model_has_the_spec_parameter_count():
    specs = {name: asdict(spec) for name, spec in CASES.items()}
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29400 + os.getpid() % 500))
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.megatron.test_model_params", json.dumps(specs)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts == {name: spec.parameters for name, spec in CASES.items()}


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    print(json.dumps(build_counts(json.loads(sys.argv[1]))))
