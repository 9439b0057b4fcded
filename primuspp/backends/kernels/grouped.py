"""The grouped GEMM of MoE experts with a B/W split: `y_e = x_e·W_eᵀ` for every expert e at once.

Backward computes the input gradient of all experts now (`grouped_dgrad`); the weight gradients (the
variable-K grouped GEMM `dy_eᵀ·x_e`, from the saved per-expert inputs) go through the weight-grad store of
the forward: queued for the W node when the store defers (a B node), computed at once otherwise (a BW node,
or no store). The weights are not autograd inputs (they ride on the context), so autograd never accumulates
their gradient: `deposit(weight, grad)` does, as the split linears of the Megatron backend do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch

from primuspp.backends.kernels import active
from primuspp.backends.kernels.base import Kernels
from primuspp.runtime.wgrad import WeightGradStore, accumulate

Deposit = Callable[[torch.Tensor, torch.Tensor], None]


def _wgrad(
    kernels: Kernels,
    deposit: Deposit,
    ws: Sequence[torch.Tensor],
    x: torch.Tensor,
    dy: torch.Tensor,
    splits: Sequence[int],
) -> None:
    for w, g in zip(ws, kernels.grouped_wgrad(dy, x, splits), strict=True):
        deposit(w, g)


class _GroupedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ws, splits, store, deposit, kernels):  # type: ignore[override]
        ctx.save_for_backward(x)
        ctx.ws, ctx.splits, ctx.store, ctx.deposit, ctx.kernels = ws, splits, store, deposit, kernels
        return kernels.grouped_gemm(x, ws, splits)

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        kernels: Kernels = ctx.kernels
        dy = dy.contiguous()
        dx = kernels.grouped_dgrad(dy, ctx.ws, ctx.splits)
        work = partial(_wgrad, kernels, ctx.deposit, ctx.ws, x, dy, ctx.splits)
        store: WeightGradStore | None = ctx.store
        if store is not None and store.defer:
            store.put(work, x, dy)
        else:
            with torch.no_grad():
                work()
        return dx, None, None, None, None, None


def grouped_linear(
    x: torch.Tensor,
    ws: Sequence[torch.Tensor],
    splits: Sequence[int],
    store: WeightGradStore | None = None,
    deposit: Deposit = accumulate,
    kernels: Kernels | None = None,
) -> torch.Tensor:
    """Rows `splits[e]` of x (contiguous, in expert order) times `ws[e]ᵀ` ([out, in]), weight grads through
    `store` (see the module docstring); `kernels` defaults to the active provider."""
    if sum(splits) != x.shape[0] or len(splits) != len(ws):
        raise ValueError(f"splits {list(splits)} do not cover {x.shape[0]} rows of {len(ws)} experts")
    sizes = tuple(int(s) for s in splits)
    return _GroupedLinear.apply(x, tuple(ws), sizes, store, deposit, kernels or active())
