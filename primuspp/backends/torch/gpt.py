"""A tiny GPT (embedding → blocks → head, causal attention) that cuts into any number of stages.

Every Linear and Embedding is split-capable (layers.py); LayerNorm parameters are not split (their
gradients are computed during B, which is cheap and changes nothing for correctness). Built on CPU under a
fixed seed, so every process that builds it gets the same weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from primuspp.backends.torch.layers import SplitEmbedding, SplitLinear, init_linear_
from primuspp.runtime.executor import TensorSpec


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 64
    seq_len: int = 16
    hidden: int = 32
    heads: int = 2
    layers: int = 4
    mlp_ratio: int = 4

    def boundary(self, micro_batch_size: int) -> TensorSpec:
        """The activation between any two stages: [micro_batch_size, seq_len, hidden] fp32."""
        return TensorSpec((micro_batch_size, self.seq_len, self.hidden), torch.float32)


class Embedding(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.tok = SplitEmbedding(cfg.vocab, cfg.hidden)
        self.pos = SplitEmbedding(cfg.seq_len, cfg.hidden)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[-1], device=ids.device)
        return self.tok(ids) + self.pos(positions)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = SplitLinear(h, 3 * h)
        self.proj = SplitLinear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = SplitLinear(h, cfg.mlp_ratio * h)
        self.out = SplitLinear(cfg.mlp_ratio * h, h)
        for layer in (self.qkv, self.proj, self.fc, self.out):
            init_linear_(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        shape = (b, t, self.heads, h // self.heads)
        q, k, v = (y.reshape(shape).transpose(1, 2) for y in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.hidden)
        self.out = SplitLinear(cfg.hidden, cfg.vocab)
        init_linear_(self.out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def gpt_layers(cfg: GPTConfig, seed: int = 0) -> list[nn.Module]:
    """[Embedding, Block × layers, Head], initialised under `seed`."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return [Embedding(cfg), *(Block(cfg) for _ in range(cfg.layers)), Head(cfg)]
    finally:
        torch.random.set_rng_state(gen_state)


def cut(layers: Sequence[nn.Module], parts: int) -> list[nn.Sequential]:
    """Contiguous, balanced groups of layers (the first groups get one more when it does not divide)."""
    if not 1 <= parts <= len(layers):
        raise ValueError(f"cannot cut {len(layers)} layers into {parts} parts")
    base, extra = divmod(len(layers), parts)
    out, i = [], 0
    for p in range(parts):
        n = base + (1 if p < extra else 0)
        out.append(nn.Sequential(*layers[i : i + n]))
        i += n
    return out


def gpt_parts(cfg: GPTConfig, parts: int, seed: int = 0) -> list[nn.Sequential]:
    """The tiny GPT cut into `parts` model parts (one per virtual stage, or per part for bidirectional)."""
    return cut(gpt_layers(cfg, seed), parts)


def gpt_microbatches(
    cfg: GPTConfig, micro_batch_size: int, num_microbatches: int, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random (tokens, next-token targets) pairs, deterministic under `seed`."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num_microbatches):
        seq = torch.randint(0, cfg.vocab, (micro_batch_size, cfg.seq_len + 1), generator=gen)
        out.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return out


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
