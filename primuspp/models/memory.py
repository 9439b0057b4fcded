"""Memory per rank in bytes: weights, gradients and optimizer state (Megatron's accounting), and the
activations one microbatch leaves saved in one layer.

Weights: bf16 parameters (2 B), fp32 main gradients (4 B), Adam's fp32 master copy and two moments (12 B):
18 B per parameter; with the distributed optimizer the 12 B are sharded over the data-parallel group
(6 + 12/DP; expert parameters over the expert-data-parallel group). Megatron's precision-aware optimizer
keeps bf16 main gradients and / or bf16 moments (`Parallel.main_grad_bytes`, `moment_bytes`): 2 + 2 + 8.

Activations follow Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(2022), tensor by tensor, so that they extend to GQA, SwiGLU, MoE and MLA: per layer the saved inputs of
the norms, of every GEMM and of the attention core, bf16. For their GPT layer (MHA, 4h GeLU MLP, unfused
softmax, dropout) the count with `dropout=True` equals their s·b·h·(34 + 5·a·s/h) without TP,
s·b·h·(10 + 24/t + 5as/(ht)) with TP, s·b·h·(34 + 5as/h)/t with TP and sequence parallel, and drops the
5as/h term with selective recompute (tested against their formula). Models without dropout save 2·s·b·h (its
two hidden masks) and the s² mask less. With flash attention (the default on GPUs) the s² softmax is not
saved, only its fp32 log-sum-exp. Norms also save their per-token statistics (not in Korthikanti's count).

What a layer saves depends on its kernels, which the GPU profile names (`attention`, `norm`, `activation`):
fused GPU kernels (flash attention, TE norms, Megatron's fused SwiGLU and RoPE) save the tensors above;
megatron-core's local spec on CPU (unfused torch ops) saves more — GQA's K and V repeated to every head,
RMSNorm's fp32 intermediates, SwiGLU's SiLU output, RoPE's cos/sin — counted tensor by tensor as
measured with saved-tensor hooks (tests/megatron/test_model_params.py).

`w_kept` is what the weight-gradient pass (W) still needs after B: the GEMMs' inputs and their output
gradients; B frees the rest.

Sequence parallelism with `sp_wgrad="keep"` (Parallel): each column-parallel linear keeps its all-gathered,
full-sequence input from F until W instead of its sequence piece (sp_gathered_inputs of them per
layer, and the output layer's): (1 - 1/t) x its input more, in the activation and in `w_kept`. With
`regather` W gathers it again (time: costs.sp_regather_ms) and nothing more is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.models.parallel import Parallel
from primuspp.models.spec import ModelSpec


@dataclass(frozen=True)
class LayerMemory:
    """Bytes one microbatch leaves saved in one layer between its F and its B (`activation`), and the part
    of that kept until W (may exceed it: W also keeps the output gradients B produced)."""

    activation: float
    w_kept: float


def layer_memory(spec: ModelSpec, moe: bool, par: Parallel, dropout: bool = False) -> LayerMemory:
    """Saved activation bytes of one microbatch in one layer on one rank."""
    BYTES = par.dtype_bytes
    t = par.tokens  # this rank's tokens: CP splits the sequence
    tp = par.tp
    h = spec.hidden
    a = 1.0 / tp if par.sp else 1.0  # hidden-sized tensors: split by sequence parallel only
    hidden = BYTES * t * h * a
    nh = spec.heads
    if par.recompute == "full":  # B re-runs F: what it saves for W is as without recompute
        return LayerMemory(hidden, _w_kept(spec, moe, par, t, a) + _sp_keep_bytes(spec, moe, par))
    act = 2 * norm_bytes(spec, par, t * a)  # the two norms
    # attention block
    b, s, cp = par.micro_batch_size, par.seq_len, par.cp
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        act += hidden  # input of the down projections (norm output)
        act += BYTES * t * 2 * (spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)  # latents
        act += BYTES * t * nh * (2 * qk + 2 * spec.v_head_dim) / tp  # Q, K, V, attention output
    else:
        act += hidden  # QKV input
        act += BYTES * t * spec.head_dim * _qkv_units(spec, par) / tp
        act += BYTES * t * nh * spec.head_dim / tp  # attention output = output projection input
        if not par.fused_activation and not spec.learned_positions:
            act += 4 * BYTES * s / cp * spec.head_dim  # torch's RoPE: cos and sin, for Q and for K
    if par.flash_attention:
        act += 4 * b * nh * s / cp / tp  # fp32 log-sum-exp
    elif par.recompute != "selective":
        act += BYTES * b * nh * s * s / cp / tp  # softmax output (CP: this rank's queries x all keys)
        if dropout:
            act += 3 * b * nh * s * s / cp / tp  # dropout mask (1 B) and dropout output (2 B)
    if dropout:
        act += 2 * t * h * a  # the two hidden dropouts' masks
    # MLP / MoE block
    if moe:
        k, e = spec.top_k, spec.expert_ffn
        act += hidden  # router input (norm output)
        act += router_bytes(spec, par, t * a)
        act += BYTES * t * k * h  # permuted tokens: the experts' fc1 input
        # fc1 output ... fc2 input; the routing weights scale the activation's output inside the expert
        # (megatron-core's default), so the combine saves nothing token-sized; unfused, that product is
        # one more tensor of the expert's width
        units = _mlp_units(spec, par) + (0 if par.fused_activation else 1)
        act += BYTES * t * k * e * units / tp
        if spec.shared_experts:
            w = spec.shared_experts * e
            act += BYTES * t * w * _mlp_units(spec, par) / tp
    else:
        act += hidden  # fc1 input
        act += BYTES * t * spec.ffn * _mlp_units(spec, par) / tp
    extra = _sp_keep_bytes(spec, moe, par)
    return LayerMemory(act + extra, _w_kept(spec, moe, par, t, a) + extra)


def _sp_keep_bytes(spec: ModelSpec, moe: bool, par: Parallel, inputs: int | None = None) -> float:
    """What keeping the gathered inputs adds (sequence parallel, `sp_wgrad="keep"`): the other ranks'
    pieces of each column-parallel input."""
    if not par.sp or par.sp_wgrad != "keep":
        return 0.0

    n = sp_gathered_inputs(spec, moe) if inputs is None else inputs
    t = par.tokens  # this rank's tokens: CP splits the sequence
    return n * par.dtype_bytes * t * spec.hidden * (1 - 1 / par.tp)


def router_bytes(spec: ModelSpec, par: Parallel, tokens: float) -> float:
    """What megatron-core's top-k router and token permutation save for `tokens` tokens: the fp32 scores
    and the routing probabilities (bf16) and map (bool) over all experts, the top-k indices (int64) and
    probabilities (fp32), the permuted tokens' probabilities and their sort indices (int64). Small next to
    the hidden tensors; counted because a model with many experts and few hidden units feels them."""
    n, k = spec.experts, spec.top_k
    return tokens * (4 * n + par.dtype_bytes * n + n + 8 * k + 4 * k + par.dtype_bytes * k + 8 * k)


def norm_bytes(spec: ModelSpec, par: Parallel, tokens: float) -> float:
    """What one norm saves for `tokens` tokens: its input and its per-token statistics (LayerNorm: mean and
    1/sigma, RMSNorm: 1/rms, fp32). torch's unfused RMSNorm (megatron-core's local spec on CPU) instead
    saves an fp32 copy of its input and the fp32 normalised tensor."""
    stats = 4 * tokens * (2 if spec.norm == "layernorm" else 1)
    if spec.norm == "rmsnorm" and not par.fused_norm:
        return 8 * tokens * spec.hidden + stats
    return par.dtype_bytes * tokens * spec.hidden + stats


def _qkv_units(spec: ModelSpec, par: Parallel) -> float:
    """Q, K and V as attention saves them, in head_dim x tokens elements (before TP).

    Fused attention (flash) saves Q, K and V as they are. Megatron's unfused local attention without
    recompute repeats K and V to every head (GQA), so it saves 3 x heads; where it saves a slice of the
    fused QKV projection output (V always with MHA, Q/K without RoPE) the whole output stays alive. With
    selective recompute the checkpoint saves Q, K and V before the repeat: the QKV output (V is a view of
    it), plus Q when it is a copy (GQA's reshape, RoPE) and K when RoPE made a copy."""
    nh, kv = spec.heads, spec.kv_heads
    qkv = nh + 2 * kv
    if par.flash_attention:
        return qkv
    rope, gqa = not spec.learned_positions, kv != nh
    if par.recompute == "selective":
        return qkv + (nh if gqa or rope else 0) + (kv if rope else 0)
    if gqa:
        return 3 * nh
    return qkv + (nh + kv if rope else 0)


def _mlp_units(spec: ModelSpec, par: Parallel) -> float:
    """Saved MLP intermediates per token, in units of its width (before TP): fc1's output (x2 for SwiGLU's
    two halves) and fc2's input; torch's unfused SwiGLU also keeps the SiLU output and a copy of the linear
    half."""
    if not spec.swiglu:
        return 2
    return 3 if par.fused_activation else 5


def _w_kept(spec: ModelSpec, moe: bool, par: Parallel, t: int, a: float) -> float:
    """Inputs and output gradients of the layer's GEMMs: what W needs after B."""
    BYTES = par.dtype_bytes
    tp, h, nh = par.tp, spec.hidden, spec.heads
    hidden = BYTES * t * h * a
    up = 2 if spec.swiglu else 1
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        inputs = (
            hidden
            + BYTES * t * (spec.q_lora_rank + spec.kv_lora_rank)
            + BYTES * t * nh * spec.v_head_dim / tp
        )
        outputs = (
            BYTES * t * (spec.q_lora_rank + spec.kv_lora_rank + spec.qk_rope_head_dim)
            + BYTES * t * nh * (qk + spec.qk_nope_head_dim + spec.v_head_dim) / tp
            + hidden
        )
    else:
        d = spec.head_dim
        inputs = hidden + BYTES * t * nh * d / tp
        outputs = BYTES * t * (nh + 2 * spec.kv_heads) * d / tp + hidden
    if moe:
        k, e = spec.top_k, spec.expert_ffn
        inputs += hidden + BYTES * t * k * h + BYTES * t * k * e / tp
        outputs += 4 * t * a * spec.experts + BYTES * t * k * e * up / tp + BYTES * t * k * h
        if spec.shared_experts:
            w = spec.shared_experts * e
            inputs += BYTES * t * w / tp
            outputs += BYTES * t * w * up / tp + hidden
    else:
        inputs += hidden + BYTES * t * spec.ffn / tp
        outputs += BYTES * t * spec.ffn * up / tp + hidden
    return inputs + outputs


def head_memory(spec: ModelSpec, par: Parallel) -> LayerMemory:
    """The last part: final norm input, output layer input, and the fp32 softmax of the vocab-parallel
    cross-entropy (kept for its backward)."""
    BYTES = par.dtype_bytes
    t = par.tokens
    a = 1.0 / par.tp if par.sp else 1.0
    act = 2 * BYTES * t * spec.hidden * a + 4 * t * spec.vocab / par.tp
    kept = BYTES * t * spec.hidden * a + BYTES * t * spec.vocab / par.tp
    extra = _sp_keep_bytes(spec, False, par, inputs=1)  # the output layer's gathered input
    return LayerMemory(act + extra, kept + extra)


@dataclass(frozen=True)
class StateBytes:
    """Weights, gradients and optimizer state of one rank, bytes."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def optimizer_bytes_per_param(par: Parallel) -> int:
    """Adam's state per parameter: the fp32 master copy and the two moments (12 by default)."""
    return 4 + 2 * par.moment_bytes


def state_bytes(dense_params: float, expert_params: float, par: Parallel) -> StateBytes:
    """`dense_params` / `expert_params`: parameters this rank holds (already divided by TP / EP)."""
    params = dense_params + expert_params
    per = optimizer_bytes_per_param(par)
    if par.distributed_optimizer:
        optimizer = per * dense_params / par.grad_dp + per * expert_params / par.expert_dp
    else:
        optimizer = per * params
    return StateBytes(2 * params, par.main_grad_bytes * params, optimizer)


def sp_gathered_inputs(spec: ModelSpec, moe: bool) -> int:
    """Column-parallel linears of a layer that all-gather their hidden-sized input under sequence
    parallelism: the QKV projection (MLA: the q and kv down projections) and the MLP's fc1 (MoE: the shared
    experts' fc1; routed experts get their tokens from the dispatch)."""
    attention = 2 if spec.mla and spec.q_lora_rank else 1
    if moe:
        return attention + (1 if spec.shared_experts else 0)
    return attention + 1
