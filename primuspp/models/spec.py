"""A decoder-only transformer described by its shapes: dense or MoE, MHA/GQA or MLA, and its parameter count.

Counts follow the checkpoint's tensors exactly (the numbers a model card or a safetensors index publishes):
every weight and bias, every norm's scale (and bias for LayerNorm), the router, and both embedding matrices
unless they are tied. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from primuspp.errors import ConfigError
from primuspp.schedule.limits import MAX_LAYERS, MAX_WIDTH, bounded_int

Norm = Literal["rmsnorm", "layernorm"]
#: the sizes every model has (the others may be 0: absent or derived)
REQUIRED = ("layers", "hidden", "ffn", "heads", "vocab")
#: counts bounded by MAX_LAYERS (loops over layers, an expert per table row); every other size by MAX_WIDTH
_MAX = dict.fromkeys(
    ("layers", "experts", "top_k", "shared_experts", "first_dense_layers", "moe_layer_freq"), MAX_LAYERS
)


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder transformer. `head_dim` defaults to hidden / heads.

    MoE: `experts` > 0 routes each token to `top_k` of them (each an MLP of width `expert_ffn`), plus
    `shared_experts` always-on experts of the same width; the first `first_dense_layers` layers and those
    not on the `moe_layer_freq` grid are dense (width `ffn`). `router_bias` counts a per-expert score bias
    (DeepSeek-V3's `e_score_correction_bias`, a parameter in its checkpoint; a buffer in Megatron).

    MLA (DeepSeek): `kv_lora_rank` > 0 replaces Q/K/V projections by low-rank ones (`q_lora_rank` 0: a plain
    query projection), with per-head `qk_nope_head_dim` + `qk_rope_head_dim` for queries and keys and
    `v_head_dim` for values.
    """

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    vocab: int
    kv_heads: int = 0  # 0 (stored as heads): MHA
    head_dim: int = 0  # 0 (stored as hidden // heads)
    tied_embeddings: bool = False
    norm: Norm = "rmsnorm"
    swiglu: bool = True
    linear_bias: bool = False  # a bias on every linear layer (GPT-2 / Megatron's default)
    qkv_bias: bool = False  # a bias on the Q, K and V projections only (Qwen2)
    qk_norm: bool = False  # per-head RMSNorm of queries and keys (Qwen3)
    learned_positions: int = 0  # > 0: a learned absolute position table of this many rows (else RoPE)
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    first_dense_layers: int = 0
    moe_layer_freq: int = 1
    router_bias: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):  # every size bounded (a bool is no size): what it implies stays small
            if f.type == "int":
                low = 1 if f.name in REQUIRED else 0
                bounded_int(getattr(self, f.name), f"model.{f.name}", low, _MAX.get(f.name, MAX_WIDTH))
        if not self.head_dim and self.hidden % self.heads:
            raise ConfigError(
                f"model.hidden={self.hidden}: not a multiple of model.heads={self.heads} (set head_dim)",
                key="model.hidden",
            )
        # normal form: equal specs compare equal however they were written
        object.__setattr__(self, "kv_heads", self.kv_heads or self.heads)
        object.__setattr__(self, "head_dim", self.head_dim or self.hidden // self.heads)
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"model.kv_heads={self.kv_heads}: must divide model.heads={self.heads}", key="model.kv_heads"
            )
        if self.experts:
            if not 1 <= self.top_k <= self.experts:
                raise ConfigError(
                    f"model.top_k={self.top_k}: must be between 1 and model.experts={self.experts}",
                    key="model.top_k",
                )
            if self.expert_ffn < 1:
                raise ConfigError("model.expert_ffn: must be >= 1 for a MoE model", key="model.expert_ffn")
            if self.moe_layer_freq < 1:
                raise ConfigError("model.moe_layer_freq: must be >= 1", key="model.moe_layer_freq")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ConfigError(f"model.norm={self.norm!r}: expected rmsnorm or layernorm", key="model.norm")
        if self.mla and not (self.qk_nope_head_dim + self.qk_rope_head_dim and self.v_head_dim):
            raise ConfigError(
                "model.kv_lora_rank: MLA needs qk_nope_head_dim/qk_rope_head_dim and v_head_dim",
                key="model.kv_lora_rank",
            )

    # --- derived shapes -------------------------------------------------------------------------------
    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether transformer layer `layer` (0-based) has a routed MoE block."""
        return self.moe and layer >= self.first_dense_layers and layer % self.moe_layer_freq == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    def with_(self, **changes: object) -> ModelSpec:
        """A copy with `changes`; a head width or KV-head count that was derived (hidden / heads, MHA) is
        derived again from the new sizes unless given."""
        if "head_dim" not in changes and self.head_dim * self.heads == self.hidden:
            changes["head_dim"] = 0
        if "kv_heads" not in changes and self.kv_heads == self.heads:
            changes["kv_heads"] = 0
        return replace(self, **changes)

    # --- parameters -----------------------------------------------------------------------------------
    def norm_params(self, width: int) -> int:
        return width * (2 if self.norm == "layernorm" else 1)

    def attention_params(self) -> int:
        """Q, K, V and output projections (or MLA's low-rank ones), their biases and q/k norms."""
        h, nh = self.hidden, self.heads
        bias = self.linear_bias
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.norm_params(self.q_lora_rank) + self.q_lora_rank * nh * qk
                q += (self.q_lora_rank + nh * qk) * bias
            else:
                q = h * nh * qk + nh * qk * bias
            kv_down = self.kv_lora_rank + self.qk_rope_head_dim
            kv = h * kv_down + self.norm_params(self.kv_lora_rank)
            kv += self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
            kv += (kv_down + nh * (self.qk_nope_head_dim + self.v_head_dim)) * bias
            out = nh * self.v_head_dim * h + h * bias
            return q + kv + out
        d, g = self.head_dim, self.kv_heads
        qkv_out = (nh + 2 * g) * d
        params = h * qkv_out + nh * d * h
        if bias or self.qkv_bias:
            params += qkv_out
        if bias:
            params += h
        if self.qk_norm:
            params += 2 * self.norm_params(d)
        return params

    def mlp_params(self, width: int) -> int:
        """One MLP (dense block or one expert) of inner width `width`."""
        up = (2 if self.swiglu else 1) * width
        params = self.hidden * up + width * self.hidden
        if self.linear_bias:
            params += up + self.hidden
        return params

    def router_params(self) -> int:
        return self.experts * self.hidden + (self.experts if self.router_bias else 0)

    def layer_params(self, layer: int) -> int:
        """All parameters of transformer layer `layer`: two norms, attention and its MLP or MoE block."""
        params = 2 * self.norm_params(self.hidden) + self.attention_params()
        if self.is_moe_layer(layer):
            return (
                params
                + self.router_params()
                + (self.experts + self.shared_experts) * self.mlp_params(self.expert_ffn)
            )
        return params + self.mlp_params(self.ffn)

    def active_layer_params(self, layer: int) -> int:
        """Parameters one token uses in layer `layer` (routed experts: only `top_k` of them)."""
        if not self.is_moe_layer(layer):
            return self.layer_params(layer)
        unused = (self.experts - self.top_k) * self.mlp_params(self.expert_ffn)
        return self.layer_params(layer) - unused

    def embedding_params(self) -> int:
        """Input embedding (+ learned positions): on the first pipeline stage."""
        return self.vocab * self.hidden + self.learned_positions * self.hidden

    def head_params(self) -> int:
        """Final norm and output layer (0 rows when tied): on the last pipeline stage."""
        return self.norm_params(self.hidden) + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def parameters(self) -> int:
        """Total parameter count (the checkpoint's element count)."""
        return (
            self.embedding_params()
            + self.head_params()
            + sum(self.layer_params(i) for i in range(self.layers))
        )

    @property
    def active_parameters(self) -> int:
        """Parameters used per token: total less the routed experts a token does not visit (router, shared
        experts and both embeddings count)."""
        return (
            self.embedding_params()
            + self.head_params()
            + sum(self.active_layer_params(i) for i in range(self.layers))
        )

    def identity(self) -> dict[str, str | int]:
        """The model as `--json` documents name it: name, parameters, active parameters."""
        return {"name": self.name, "parameters": self.parameters, "active_parameters": self.active_parameters}
