"""A megatron-core GPTModel built from a ModelSpec has exactly the parameters the spec counts; and each
layer kind (dense, GQA + SwiGLU, MoE, with and without selective recompute) saves the activation bytes
primuspp.models.memory predicts for the cpu profile's kernels.

Each preset is scaled down (few layers, small widths) keeping what decides its structure: GQA or MLA, SwiGLU
or GeLU, RMSNorm or LayerNorm, biases, q/k norms, tied embeddings, learned positions, dense layers before MoE
ones, shared experts, a router score bias. The models are built on a launched rank of their own (Megatron
needs a process group) on CPU; the count includes DeepSeek's router score bias, a buffer in Megatron and a
tensor of its checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import pytest

from primuspp.commands.app import main
from primuspp.models import PRESETS, ModelSpec
from primuspp.runtime.launch import WorkerContext, launch


def scaled(spec: ModelSpec) -> ModelSpec:
    """A tiny model of the same structure."""
    heads = 8
    kv = heads if spec.kv_heads == spec.heads else 2
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

#: a Llama layer, small: megatron-gpt's fields changed to GQA, RMSNorm, SwiGLU, RoPE, no biases
LLAMA_LAYER = dict(
    hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=704, norm="rmsnorm", swiglu=True, linear_bias=False,
    learned_positions=0,
)  # fmt: skip
#: at these lengths the attention scores' s^2 term is 37% and 54% of a dense layer's saved bytes (a wrong
#: coefficient shows), at 0.45x the CPU of 256 and 512
SEQ_LENS, BATCH = [128, 256], 2


def _no_params_class():
    import torch

    class NoParams(torch.nn.Module):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    return NoParams


def build_counts(ctx: WorkerContext, specs: dict[str, dict]) -> dict[str, int]:
    """On a rank of its own: each spec as a megatron-core GPTModel, its parameter (+ expert-bias) count."""
    import importlib.util

    import torch
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
            num_query_groups=spec.kv_heads,
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


#: an MoE layer as `primuspp train --moe-experts 4 --moe-topk 2 --moe-ffn 192 --moe-shared-ffn 192` builds
#: it: 4 experts of width 192 (not the hidden size, so that every saved width is told apart), top-2 routing,
#: one shared expert, no linear biases, the aux loss. Without a capacity factor every token goes to exactly
#: top_k experts, so the routed tokens (t x k, summed over the experts) do not depend on the random router's
#: balance: the prediction needs no measured token counts.
MOE_LAYER = dict(
    hidden=256, heads=8, ffn=1024, linear_bias=False, experts=4, top_k=2, expert_ffn=192, shared_experts=1
)

#: Layer kinds measured against `layer_memory` on megatron-core's local spec on CPU: name -> (spec fields
#: changed from megatron-gpt, recompute, MoE layer). MoE kinds are built by the megatron backend's own
#: builder (primuspp.backends.megatron.model and .moe).
LAYER_KINDS: dict[str, tuple[dict, str, bool]] = {
    # MHA, LayerNorm, 4h GeLU MLP with biases, learned positions (Korthikanti et al.'s GPT layer)
    "dense": (dict(hidden=256, heads=8, ffn=1024), "none", False),
    # Llama: GQA (8 heads, 2 KV groups), RMSNorm, SwiGLU, RoPE, no biases
    "gqa-swiglu": (LLAMA_LAYER, "none", False),
    "gqa-swiglu-selective": (LLAMA_LAYER, "selective", False),
    "dense-selective": (dict(hidden=256, heads=8, ffn=1024), "selective", False),
    "moe": (MOE_LAYER, "none", True),
    "moe-selective": (MOE_LAYER, "selective", True),
    # the same with a Llama attention and SwiGLU experts (learned positions kept: the backend's builder)
    "moe-gqa-swiglu": ({**MOE_LAYER, **LLAMA_LAYER, "learned_positions": 32, "ffn": 1024}, "none", True),
}


def _layer_config(spec: ModelSpec, layers: int, recompute: str, moe: bool = False):
    """bf16, no dropout, unfused softmax in bf16; an MoE layer's config comes from the megatron backend
    (`transformer_config` with `moe.settings`, what `primuspp train --moe-experts` uses)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    kw: dict = dict(
        hidden_size=spec.hidden,
        num_attention_heads=spec.heads,
        num_query_groups=spec.kv_heads,
        kv_channels=spec.head_dim,
        ffn_hidden_size=spec.ffn,
        gated_linear_unit=spec.swiglu,
        activation_func=F.silu if spec.swiglu else F.gelu,
        add_bias_linear=spec.linear_bias,
        normalization="RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm",
        use_cpu_initialization=True,
        params_dtype=torch.bfloat16,
        bf16=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=False,
        masked_softmax_fusion=False,
    )
    if recompute == "selective":
        kw["recompute_granularity"] = "selective"
    if moe:
        from primuspp.backends.megatron import model
        from primuspp.backends.megatron import moe as moe_

        shared = spec.shared_experts * spec.expert_ffn or None
        settings = moe_.settings(spec.experts, spec.top_k, spec.expert_ffn, shared)
        gpt = model.GPTSpec(hidden=spec.hidden, heads=spec.heads, vocab=spec.vocab, settings=settings)
        return model.transformer_config(gpt, layers, **kw)
    return TransformerConfig(num_layers=layers, **kw)


def _cpu_recompute() -> None:
    """megatron-core's checkpoint (selective recompute) saves and restores the CUDA RNG state: on a CPU-only
    torch, only the CPU state and the (CPU) tracker's."""
    import torch
    from megatron.core.tensor_parallel import random as rnd

    def get_states():
        return torch.get_rng_state(), None, rnd.get_cuda_rng_tracker().get_states()

    def set_states(cpu_state, _cuda_state, tracker_states) -> None:
        torch.set_rng_state(cpu_state)
        rnd.get_cuda_rng_tracker().set_states(tracker_states)

    rnd._get_all_rng_states = get_states
    rnd._set_all_rng_states = set_states


def saved_bytes(
    ctx: WorkerContext, kinds: list[str], seq_lens: list[int], batch: int
) -> dict[str, list[int]]:
    """On a rank of its own: bytes autograd saves per layer in one forward of a bf16 megatron-core decoder
    (local spec, no dropout, unfused softmax in bf16), per kind and sequence length: a two-layer decoder's
    saved bytes minus a one-layer decoder's (what the decoder shares, such as the causal mask, cancels);
    parameters excluded, each storage once."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    from primuspp.backends.megatron import cpu

    parallel_state.initialize_model_parallel(1, 1)
    cpu.apply()
    _cpu_recompute()
    torch.cuda.current_device = lambda: "cpu"  # RoPE's frequencies ask for the CUDA device

    def measure(spec: ModelSpec, layers: int, recompute: str, moe: bool, s: int) -> int:
        config = _layer_config(spec, layers, recompute, moe)
        if moe:  # the backend's builder: megatron-core's MoE layer with its experts module, no embedding
            from primuspp.backends.megatron.model import GPTSpec, _gpt

            gpt = GPTSpec(hidden=spec.hidden, heads=spec.heads, seq_len=s, vocab=spec.vocab)
            model = _gpt(gpt, config, pre=False, post=False)
        else:
            model = GPTModel(
                config,
                get_gpt_decoder_block_spec(config, use_transformer_engine=False),
                vocab_size=spec.vocab,
                max_sequence_length=s,
                pre_process=False,
                post_process=False,
                position_embedding_type="none" if spec.learned_positions else "rope",
            )
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params:
                seen[ptr] = t.untyped_storage().nbytes()
            return t

        x = torch.randn(s, batch, spec.hidden, dtype=torch.bfloat16, requires_grad=True)
        model.set_input_tensor(x)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = model(None, None, torch.ones(1, 1, s, s, dtype=torch.bool).triu(1))
        y.float().sum().backward()  # the recomputing backward runs on CPU too
        return sum(seen.values())

    out = {}
    for kind in kinds:
        fields, recompute, moe = LAYER_KINDS[kind]
        spec = PRESETS["megatron-gpt"].with_(**fields, layers=2)
        out[kind] = [
            measure(spec, 2, recompute, moe, s) - measure(spec, 1, recompute, moe, s) for s in seq_lens
        ]
    return out


def _child(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on one rank of its own (a process group of one, megatron's state and patches its own)."""
    (result,) = launch(fn, 1, *args)
    return result


def test_megatron_gpt_model_has_the_spec_parameter_count():
    specs = {name: asdict(spec) for name, spec in CASES.items()}
    counts = _child(build_counts, specs)
    assert counts == {name: spec.parameters for name, spec in CASES.items()}


@pytest.fixture(scope="module")
def measured_layers() -> dict[str, list[int]]:
    return _child(saved_bytes, list(LAYER_KINDS), SEQ_LENS, BATCH)


@pytest.mark.parametrize("kind", list(LAYER_KINDS))
def test_layer_activation_bytes_within_5_percent(kind, measured_layers):
    # megatron-core's local spec on CPU runs unfused kernels (attention with the s x s scores and GQA's K/V
    # repeated per head, torch's RMSNorm, SwiGLU and RoPE): the prediction takes them from the cpu profile
    from primuspp.models.hardware import load_hardware
    from primuspp.models.memory import layer_memory
    from primuspp.models.parallel import Parallel

    fields, recompute, moe = LAYER_KINDS[kind]
    spec = PRESETS["megatron-gpt"].with_(**fields, layers=2)
    kernels = load_hardware("cpu").kernels()
    for s, got in zip(SEQ_LENS, measured_layers[kind], strict=True):
        par = Parallel(seq_len=s, micro_batch_size=BATCH, recompute=recompute, **kernels)  # type: ignore[arg-type]
        want = layer_memory(spec, moe, par).activation
        assert abs(got - want) / want < 0.05, (kind, s, got, want)


@pytest.mark.parametrize("algorithm", ["1f1b", "zbv", "v-half", "dualpipe-v"])
def test_predicted_peak_activation_matches_primuspp_train(algorithm, capsys):
    # `primuspp train`'s default Megatron GPT (fp32 on CPU, 4 ranks, 8 microbatches): each rank's measured
    # peak of saved activations against the projection's peak from the schedule's own memory curve
    from primuspp.models.hardware import load_hardware
    from primuspp.models.parallel import Parallel
    from primuspp.models.project import project

    args = ["train", "--algo", algorithm, "--pp", "4", "--mb", "8", "--steps", "2", "--json", "--no-dump"]
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    run = json.loads(captured.out)
    measured = run["steps"][-1]["peak_activation_bytes"]
    mbs, vpp = run["micro_batch_size"], run["vpp"]
    par = Parallel(
        pp=4, vpp=vpp, micro_batch_size=mbs, global_batch_size=8 * mbs, seq_len=run["model"]["seq_len"]
    )
    par = replace(par, **load_hardware("cpu").kernels(), dtype_bytes=4)
    projection = project(PRESETS["megatron-gpt"], load_hardware("h100"), par, algorithm, layout="even")
    predicted = [r.activations for r in projection.per_rank]
    for rank, (want, got) in enumerate(zip(predicted, measured, strict=True)):
        assert abs(want - got) / got < 0.05, (rank, want, got)
