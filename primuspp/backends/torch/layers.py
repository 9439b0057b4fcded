"""Split-capable layers: a backward that can defer its weight gradient to the W node.

`SplitLinear` and `SplitEmbedding` behave exactly like `nn.Linear` / `nn.Embedding` outside a runner. Inside
a runner, their forward captures the (microbatch, stage)'s `WeightGradStore`; their backward always returns
the input gradient and, when the store defers (a B node), queues the weight-gradient work
(`dW += gᵀx`, `db += Σg`; for the embedding the dense scatter-add of the output gradient) for the W node.
Deferred and immediate paths run the same kernels, so B + W gives bit-identical gradients to a plain
backward of the same layers.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from primuspp.runtime.wgrad import WeightGradStore, accumulate, recording_store


def _linear_wgrad(
    x: torch.Tensor, g: torch.Tensor, with_bias: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    g2 = g.reshape(-1, g.shape[-1])
    gw = g2.t().mm(x.reshape(-1, x.shape[-1]))
    gb = g2.sum(0) if with_bias else None
    return gw, gb


def _linear_deferred(
    weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, g: torch.Tensor
) -> None:
    gw, gb = _linear_wgrad(x, g, bias is not None)
    accumulate(weight, gw)
    if bias is not None:
        accumulate(bias, gb)  # type: ignore[arg-type]


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):  # type: ignore[override]
        # parameters ride on ctx, not in save_for_backward: with saved-tensor hooks active, autograd hands
        # back a new tensor object for a saved tensor, and the deferred work must reach the Parameter itself
        ctx.save_for_backward(x)
        ctx.store = store
        ctx.weight = weight
        ctx.bias = bias
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        weight = ctx.weight
        gx = g.matmul(weight) if ctx.needs_input_grad[0] else None
        if not ctx.needs_input_grad[1]:  # frozen weights
            return gx, None, None, None
        store: WeightGradStore | None = ctx.store
        bias = ctx.bias
        if store is not None and store.defer:
            store.put(partial(_linear_deferred, weight, bias, x, g), x, g)
            return gx, None, None, None
        gw, gb = _linear_wgrad(x, g, bias is not None)
        return gx, gw, gb, None


class SplitLinear(nn.Linear):
    """`nn.Linear` whose weight gradient a B node defers to the W node."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        store = recording_store()
        if store is None and not torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        return _LinearFn.apply(x, self.weight, self.bias, store)


def _embedding_wgrad(ids: torch.Tensor, g: torch.Tensor, num: int) -> torch.Tensor:
    return torch.ops.aten.embedding_dense_backward(g, ids, num, -1, False)


def _embedding_deferred(weight: torch.Tensor, ids: torch.Tensor, g: torch.Tensor) -> None:
    accumulate(weight, _embedding_wgrad(ids, g, weight.shape[0]))


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ids, weight, store):  # type: ignore[override]
        ctx.save_for_backward(ids)
        ctx.store = store
        ctx.weight = weight
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (ids,) = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return None, None, None
        store: WeightGradStore | None = ctx.store
        weight = ctx.weight
        if store is not None and store.defer:
            store.put(partial(_embedding_deferred, weight, ids, g), ids, g)
            return None, None, None
        return None, _embedding_wgrad(ids, g, weight.shape[0]), None


class SplitEmbedding(nn.Embedding):
    """`nn.Embedding` (no padding index, no max_norm) whose weight gradient a B node defers to W."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        store = recording_store()
        if store is None and not torch.is_grad_enabled():
            return F.embedding(ids, self.weight)
        return _EmbeddingFn.apply(ids, self.weight, store)


def split_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters whose gradient a B node defers (those of the split layers in `module`)."""
    params = []
    for sub in module.modules():
        if isinstance(sub, SplitLinear | SplitEmbedding):
            params.extend(p for p in sub.parameters(recurse=False))
    return params


def init_linear_(layer: nn.Linear, std: float | None = None) -> None:
    """GPT-style init (normal weights, zero bias); deterministic under the caller's seed."""
    nn.init.normal_(layer.weight, std=std if std is not None else 1.0 / math.sqrt(layer.in_features))
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
