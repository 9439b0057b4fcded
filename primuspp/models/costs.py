"""Time of one microbatch through one transformer layer (F, B, W in ms) from its FLOPs, the GPU's peaks and
efficiencies, and its collectives; plus the embedding and the head (final norm, output layer, loss).

- GEMMs: forward 2·m·n·k FLOPs; B (input gradient) and W (weight gradient) the same each. TP divides them.
  Each GEMM runs at the profile's `gemm` efficiency for its size (per-rank FLOPs of that one GEMM).
- Attention core (softmax(QK^T)V, causal: half the square): forward at `attention` efficiency, backward
  2.5x the forward, all in B (it has no weights). Norms, residuals, activation functions: memory-bound
  (bytes over HBM bandwidth), all in B too.
- TP (Megatron): two all-reduces per layer forward and two backward (with sequence parallel: all-gather +
  reduce-scatter, the same bytes); with `tp_comm_overlap` (Megatron's --tp-comm-overlap, TE's pipelined
  GEMM + collective) only what they take beyond the layer's GEMMs shows. MoE with EP: a dispatch and a
  combine all-to-all each way; with `ep_comm_overlap` (Megatron's --overlap-moe-expert-parallel-comm, the
  other microbatch's compute hides them) only what they take beyond the layer's compute shows. Experts'
  GEMMs run at the profile's `grouped_gemm` fraction of a dense GEMM of their size.
- W has no communication, except under sequence parallelism with
  `sp_wgrad="regather"` (the default; Megatron's own backward re-gathers too): each column-parallel
  linear's W all-gathers its input again (`sp_regather_ms`); with `keep` W reads the input F gathered, and
  memory.py counts it full-sequence.
- Recompute: `selective` re-runs the attention core in B; `full` re-runs the whole layer's forward in B.
- CP (context parallel, Megatron's p2p ring): every rank holds mbs x seq / CP tokens (two of the 2 x CP
  chunks, so the causal attention work is the same on every rank: 1/CP of it). Per layer the forward passes
  K and V around the ring in CP - 1 steps, the backward passes K/V again and dK/dV back (twice the bytes);
  each step's transfer overlaps the attention core on the chunk already there, so only what the ring
  takes beyond (CP - 1)/CP of the attention core's time is added (`cp_exposed_ms`).
"""

from __future__ import annotations

from dataclasses import dataclass

from primuspp.models.hardware import Hardware
from primuspp.models.memory import LayerMemory, head_memory, layer_memory, sp_gathered_inputs
from primuspp.models.parallel import Parallel
from primuspp.models.spec import ModelSpec

BYTES = 2  # bf16 activations and communication
#: Bytes moved through HBM per token per layer by the memory-bound ops (norms, residuals, RoPE, the
#: activation function), in units of hidden (x hidden) and of the MLP width (x ffn); a planning constant.
ELEMENTWISE_HIDDEN = 16
ELEMENTWISE_FFN = 6
ATTENTION_BACKWARD = 2.5


@dataclass(frozen=True)
class LayerCost:
    """One microbatch through one layer (or the embedding / head) on one rank: ms and bytes."""

    forward: float
    backward: float
    wgrad: float
    flops: float  # model FLOPs of F + B + W (no recompute), this rank
    memory: LayerMemory
    comm: float = 0.0  # of `forward` (and again of `backward`): exposed TP / EP communication, ms
    comm_hidden: float = 0.0  # TP / EP communication of F (and again of B) hidden behind its compute, ms


def _gemm_ms(flops: float, hw: Hardware, par: Parallel) -> float:
    return flops / (hw.peak(par.dtype) * hw.efficiency.gemm_fraction(flops)) * 1e3


def _ring_ms(bytes_: float, group: int, factor: float, hw: Hardware, spread: int = 1) -> float:
    """A ring collective over `group` ranks: `factor` x (group-1)/group x bytes on the link, plus latency."""
    if group <= 1:
        return 0.0
    link = hw.link(group, spread)
    steps = factor * (group - 1)
    return (steps / group * bytes_ / (link.bandwidth * hw.efficiency.comm) + steps * link.latency) * 1e3


def tp_collective_ms(spec: ModelSpec, par: Parallel, hw: Hardware) -> float:
    """One TP all-reduce (or all-gather + reduce-scatter) of a layer's hidden states."""
    tokens = par.tokens
    return _ring_ms(tokens * spec.hidden * BYTES, par.tp, 2.0, hw)


def sp_regather_ms(spec: ModelSpec, moe: bool, par: Parallel, hw: Hardware) -> float:
    """W's extra all-gathers of one layer under sequence parallelism with `sp_wgrad="regather"`."""
    if not par.sp or par.sp_wgrad != "regather":
        return 0.0
    tokens = par.tokens  # this rank's tokens: CP splits the sequence
    return sp_gathered_inputs(spec, moe) * _ring_ms(tokens * spec.hidden * BYTES, par.tp, 1.0, hw)


def a2a_ms(spec: ModelSpec, par: Parallel, hw: Hardware) -> float:
    """One MoE all-to-all (dispatch or combine) over the EP group."""
    if par.ep <= 1:
        return 0.0
    tokens = par.tokens / (par.tp if par.sp else 1)
    link = hw.link(par.ep, spread=par.tp)
    bytes_ = tokens * spec.top_k * spec.hidden * BYTES * (par.ep - 1) / par.ep
    return (bytes_ / (link.bandwidth * hw.efficiency.comm) + (par.ep - 1) * link.latency) * 1e3


def attention_gemms(spec: ModelSpec, tokens: int) -> list[float]:
    """Forward FLOPs of the attention block's GEMMs (whole layer, before TP)."""
    h, nh = spec.hidden, spec.heads
    if spec.mla:
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        q = (
            [2 * tokens * h * spec.q_lora_rank, 2 * tokens * spec.q_lora_rank * nh * qk]
            if spec.q_lora_rank
            else [2 * tokens * h * nh * qk]
        )
        kv = [
            2 * tokens * h * (spec.kv_lora_rank + spec.qk_rope_head_dim),
            2 * tokens * spec.kv_lora_rank * nh * (spec.qk_nope_head_dim + spec.v_head_dim),
        ]
        return [*q, *kv, 2 * tokens * nh * spec.v_head_dim * h]
    d = spec.head_dim
    return [2 * tokens * h * (nh + 2 * spec.kv_heads) * d, 2 * tokens * nh * d * h]


def attention_core_flops(spec: ModelSpec, par: Parallel) -> float:
    """Forward FLOPs of QK^T and AV for one microbatch (causal: half), whole layer, on one CP rank (CP's
    2 x CP chunks, paired first with last, give every rank the same 1/CP share of the causal triangle)."""
    b, s, nh = par.micro_batch_size, par.seq_len, spec.heads
    if spec.mla:
        qk, v = spec.qk_nope_head_dim + spec.qk_rope_head_dim, spec.v_head_dim
    else:
        qk = v = spec.head_dim
    return 0.5 * 2 * b * nh * s * s * (qk + v) / par.cp


def cp_ring_ms(spec: ModelSpec, par: Parallel, hw: Hardware) -> float:
    """The context-parallel ring of one layer's forward: CP - 1 steps, each passing this rank's K and V
    (its tokens, its TP share of the KV heads) to the next CP rank, which are TP ranks apart."""
    if par.cp <= 1:
        return 0.0
    if spec.mla:
        per_token = spec.heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim + spec.v_head_dim)
    else:
        per_token = 2 * spec.kv_heads * spec.head_dim
    bytes_ = par.tokens * per_token / par.tp * BYTES
    link = hw.link(par.cp, spread=par.tp)
    return (par.cp - 1) * (bytes_ / (link.bandwidth * hw.efficiency.comm) + link.latency) * 1e3


def cp_exposed_ms(ring_ms: float, core_ms: float, cp: int) -> float:
    """What of a ring is not hidden: step i's transfer overlaps the attention on the chunk step i - 1
    brought (CP - 1 of the CP equal attention steps), so only the excess of the ring shows."""
    if cp <= 1:
        return 0.0
    return max(0.0, ring_ms - core_ms * (cp - 1) / cp)


def mlp_gemms(spec: ModelSpec, tokens: float, width: int) -> list[float]:
    up = 2 if spec.swiglu else 1
    return [2 * tokens * spec.hidden * width * up, 2 * tokens * width * spec.hidden]


def layer_cost(spec: ModelSpec, moe: bool, par: Parallel, hw: Hardware) -> LayerCost:
    """F, B, W (ms) of one microbatch through one dense (`moe` False) or MoE layer on one rank."""
    tokens = par.tokens
    tp = par.tp
    gemm_ms = 0.0
    gemm_flops = 0.0
    for f in attention_gemms(spec, tokens):
        gemm_ms += _gemm_ms(f / tp, hw, par)
        gemm_flops += f / tp
    width = spec.ffn
    a2a_f = 0.0
    if moe:
        router = 2 * tokens * spec.hidden * spec.experts
        gemm_ms += _gemm_ms(router, hw, par)
        gemm_flops += router
        # each rank computes top_k x its tokens on its local experts (balanced routing); one expert's GEMM
        # sees the tokens the whole EP group sends it
        per_expert_tokens = tokens * spec.top_k * par.ep / spec.experts
        local_experts = spec.experts // par.ep
        for f in mlp_gemms(spec, per_expert_tokens, spec.expert_ffn):
            gemm_ms += local_experts * _gemm_ms(f / tp, hw, par) / hw.efficiency.grouped_gemm
            gemm_flops += local_experts * f / tp
        if spec.shared_experts:
            for f in mlp_gemms(spec, tokens, spec.shared_experts * spec.expert_ffn):
                gemm_ms += _gemm_ms(f / tp, hw, par)
                gemm_flops += f / tp
        # dispatch + combine; in fp8 runs the dispatch moves fp8 tokens (DeepSeek-V3, Megatron's fp8 dispatch)
        a2a_f = (1.5 if par.dtype == "fp8" else 2.0) * a2a_ms(spec, par, hw)
        width = spec.top_k * spec.expert_ffn + spec.shared_experts * spec.expert_ffn
    else:
        for f in mlp_gemms(spec, tokens, spec.ffn):
            gemm_ms += _gemm_ms(f / tp, hw, par)
            gemm_flops += f / tp
    core = attention_core_flops(spec, par) / tp
    core_ms = core / (hw.peak(par.dtype) * hw.efficiency.attention) * 1e3
    elementwise_bytes = tokens * BYTES * (ELEMENTWISE_HIDDEN * spec.hidden + ELEMENTWISE_FFN * width) / tp
    elem_ms = elementwise_bytes / hw.hbm_bandwidth * 1e3
    ring = cp_ring_ms(spec, par, hw)
    cp_f = cp_exposed_ms(ring, core_ms, par.cp)
    cp_b = cp_exposed_ms(2 * ring, ATTENTION_BACKWARD * core_ms, par.cp)  # K/V again, then dK/dV back
    tp_f = 2 * tp_collective_ms(spec, par, hw)
    comm_f = max(0.0, tp_f - gemm_ms) if par.tp_comm_overlap else tp_f
    comm_f += max(0.0, a2a_f - gemm_ms - core_ms) if par.ep_comm_overlap else a2a_f
    hidden = tp_f + a2a_f - comm_f
    forward = gemm_ms + core_ms + elem_ms + comm_f + cp_f
    backward = gemm_ms + ATTENTION_BACKWARD * core_ms + 2 * elem_ms + comm_f + cp_b
    if par.recompute == "selective":
        backward += core_ms + cp_f
    elif par.recompute == "full":
        backward += forward
    flops = 3 * gemm_flops + (1 + ATTENTION_BACKWARD) * core
    wgrad = gemm_ms + sp_regather_ms(spec, moe, par, hw)
    return LayerCost(forward, backward, wgrad, flops, layer_memory(spec, moe, par), comm_f, hidden)


def head_cost(spec: ModelSpec, par: Parallel, hw: Hardware) -> LayerCost:
    """Final norm, output layer (vocab-parallel over TP) and cross-entropy on the last part."""
    tokens = par.tokens
    f = 2 * tokens * spec.hidden * spec.vocab / par.tp
    gemm = _gemm_ms(f, hw, par)
    # softmax / cross-entropy over fp32 logits: read and write them a few times
    ce_ms = 4 * tokens * spec.vocab / par.tp * 4 / hw.hbm_bandwidth * 1e3
    regather = 0.0
    if par.sp and par.sp_wgrad == "regather":  # the output layer is column-parallel too
        regather = _ring_ms(tokens * spec.hidden * BYTES, par.tp, 1.0, hw)
    return LayerCost(gemm + ce_ms, gemm + ce_ms, gemm + regather, 3 * f, head_memory(spec, par))


def embedding_cost(spec: ModelSpec, par: Parallel, hw: Hardware) -> LayerCost:
    """The embedding lookup (memory-bound; its gradient is a scatter-add, counted as W)."""
    tokens = par.tokens
    ms = tokens * spec.hidden * BYTES / hw.hbm_bandwidth * 1e3
    return LayerCost(ms, 0.0, ms, 0.0, LayerMemory(0.0, 0.0))


def p2p_ms(spec: ModelSpec, par: Parallel, hw: Hardware) -> float:
    """One activation (or its gradient) between pipeline neighbours: gpus / pp ranks apart."""
    tokens = par.tokens
    bytes_ = tokens * spec.hidden * BYTES / (par.tp if par.sp else 1)
    link = hw.link(2, spread=par.gpus // par.pp)
    return (link.latency + bytes_ / (link.bandwidth * hw.efficiency.comm)) * 1e3


def p2p_bytes(spec: ModelSpec, par: Parallel) -> float:
    return par.tokens * spec.hidden * par.dtype_bytes / (par.tp if par.sp else 1)
