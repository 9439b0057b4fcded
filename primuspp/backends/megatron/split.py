"""B/W split for Megatron's `ColumnParallelLinear` and `RowParallelLinear` (the output layer included).

Megatron computes a linear layer's weight gradient inside the backward of
`LinearWithGradAccumulationAndAsyncCommunication`, reached from both classes' `_forward_impl` (0.16.1 has
no usable built-in B/W split: `delay_wgrad_compute` is Transformer Engine + MoE overlap only, and the local
`ColumnParallelLinear.backward_dw` does nothing). `install()` replaces `_forward_impl` on both classes.
Inside a primuspp runner (a weight-grad store is recording, runtime/wgrad.py) the layer runs `_SplitLinear`
instead: its backward computes the input gradient and, on a B node, queues the weight-grad GEMM (`dW += gᵀx`,
`db += Σg`) into the (microbatch, stage)'s store for the W node; on a BW node it runs the same work at once.
Anywhere else (Megatron's own schedules, evaluation, a model outside a runner) Megatron's own function runs,
unchanged.

The weight and bias are not autograd inputs of `_SplitLinear` (they ride on the context), so autograd never
accumulates their gradient: the deferred work does, the way Megatron would —

- with Megatron DDP (the parameter has `main_grad`): `main_grad += dW`, then, when DDP overlaps its grad
  reduction, the parameter is registered as ready with its bucket group (what DDP's backward hook does),
  so the reduction starts once the last W of the parameter has run;
- without DDP: `param.grad += dW`, as autograd's AccumulateGrad would.

The GEMMs (forward, dgrad, wgrad) are the active kernel provider's (`primuspp.backends.kernels`; torch by
default). MoE experts (moe.py) use the grouped form of the same split (`kernels.grouped`).

Tensor parallelism: a column-parallel layer's input gradient is all-reduced over the TP group (async,
overlapping the weight-grad GEMM on a BW node). Sequence parallelism: a column-parallel layer all-gathers
its sequence-split input in F and reduce-scatters its input gradient in B; its weight gradient needs the
all-gathered input, which W gets one of two ways (`set_sp_wgrad`, `primuspp train --sp-wgrad`):
`keep` saves the gathered input from F until W (memory: the full-sequence input per layer and microbatch),
`regather` saves only the local piece and all-gathers it again in W (time: one more all-gather in W). Every
TP rank runs the same node list, so the W-time all-gathers meet in the same order on every rank.

Layers whose weight grad cannot be deferred this way run unsplit: frozen weights and Megatron's own
embedding-wgrad deferral (`grad_output_buffer`). `schedule.conflicts` reports the settings that would make
a split table wrong.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from primuspp.backends.kernels import active
from primuspp.backends.kernels.base import Kernels
from primuspp.backends.megatron.overlap import backward_group
from primuspp.runtime.wgrad import WeightGradStore, accumulate, recording_store

#: attribute set on a DDP parameter whose readiness must be signalled after its weight grad landed
GRAD_READY_ATTR = "_primuspp_grad_ready"

_ORIGINAL: dict[type, Any] = {}

#: how W of a column-parallel layer under sequence parallelism gets the all-gathered input
SP_WGRAD_MODES = ("keep", "regather")
_SP_WGRAD = ["regather"]


def set_sp_wgrad(mode: str) -> None:
    """`regather` (default) or `keep`: see the module doc."""
    if mode not in SP_WGRAD_MODES:
        raise ValueError(f"sp_wgrad {mode!r}: expected one of {', '.join(SP_WGRAD_MODES)}")
    _SP_WGRAD[0] = mode


def sp_wgrad() -> str:
    return _SP_WGRAD[0]


def _all_gather(x: torch.Tensor, group: Any) -> torch.Tensor:
    """`x` gathered along dim 0 (the sequence) over `group`, into a tensor of its own (not Megatron's
    shared buffer: a kept input must outlive the next layer's gather)."""
    size = [x.shape[0] * group.size(), *x.shape[1:]]
    out = torch.empty(size, dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def deposit(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Add a deferred weight gradient where Megatron keeps it: `main_grad` (then signal DDP readiness when
    it overlaps its reduction) or, without DDP, `param.grad`."""
    main = getattr(param, "main_grad", None)
    if main is None:
        accumulate(param, grad)
        return
    main.add_(grad)
    ready = getattr(param, GRAD_READY_ATTR, None)
    if ready is not None:
        ready()


def _weight_grad(
    kernels: Kernels, weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor, g: torch.Tensor
) -> None:
    from megatron.core.utils import prepare_input_tensors_for_wgrad_compute

    g2, x2 = prepare_input_tensors_for_wgrad_compute(g, x)
    deposit(weight, kernels.gemm_wgrad(g2, x2))
    if bias is not None:
        deposit(bias, g2.sum(dim=0))


def _regather_weight_grad(
    kernels: Kernels,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    x: torch.Tensor,
    g: torch.Tensor,
    group: Any,
) -> None:
    _weight_grad(kernels, weight, bias, _all_gather(x, group), g)


class _SplitLinear(torch.autograd.Function):
    """`y = x Wᵀ (+ b)` whose weight gradient goes through a weight-grad store. With `sp` set (sequence
    parallel, column-parallel layer): `x` is this rank's sequence piece, all-gathered before the GEMM; the
    input gradient is reduce-scattered back; W keeps or re-gathers the gathered input (`sp`)."""

    @staticmethod
    def forward(ctx, x, params, store, allreduce_dgrad, tp_group, sp=None):  # type: ignore[override]
        weight, bias = params
        total = _all_gather(x, tp_group) if sp else x
        ctx.save_for_backward(total if sp != "regather" else x)
        ctx.params = params
        ctx.store = store
        ctx.allreduce_dgrad = allreduce_dgrad
        ctx.tp_group = tp_group
        ctx.sp = sp
        ctx.kernels = kernels = active()
        out = kernels.gemm(total, weight)
        if bias is not None:
            out = out + bias
        return out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        (saved,) = ctx.saved_tensors
        weight, bias = ctx.params
        group = backward_group(ctx.tp_group)  # its twin in an overlapped FB node's backward (overlap.py)
        gx = ctx.kernels.gemm_dgrad(g, weight)
        handle = None
        if ctx.sp:
            piece = torch.empty(
                [gx.shape[0] // group.size(), *gx.shape[1:]], dtype=gx.dtype, device=gx.device
            )
            handle = dist.reduce_scatter_tensor(piece, gx.contiguous(), group=group, async_op=True)
            gx = piece
        elif ctx.allreduce_dgrad:
            handle = dist.all_reduce(gx, group=group, async_op=True)
        store: WeightGradStore = ctx.store
        if ctx.sp == "regather":
            work = partial(_regather_weight_grad, ctx.kernels, weight, bias, saved, g, group)
        else:
            work = partial(_weight_grad, ctx.kernels, weight, bias, saved, g)
        if store.defer:
            store.put(work, saved, g)
        else:
            if handle is not None and ctx.sp == "regather":
                handle.wait()  # one collective at a time on the TP group: W's all-gather comes after
                handle = None
            with torch.no_grad():
                work()
        if handle is not None:
            handle.wait()
        return gx, None, None, None, None, None


def _split_forward_impl(
    self: Any,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    gradient_accumulation_fusion: bool = False,
    allreduce_dgrad: bool = False,
    sequence_parallel: bool = False,
    grad_output_buffer: list | None = None,
    wgrad_deferral_limit: int | None = None,
    tp_group: Any = None,
    **kwargs: Any,
) -> torch.Tensor:
    store = recording_store()
    if (
        store is None
        or kwargs
        or not weight.requires_grad
        or not input.requires_grad
        or grad_output_buffer is not None
    ):
        return _ORIGINAL[_base(self)](
            self,
            input,
            weight,
            bias=bias,
            gradient_accumulation_fusion=gradient_accumulation_fusion,
            allreduce_dgrad=allreduce_dgrad,
            sequence_parallel=sequence_parallel,
            grad_output_buffer=grad_output_buffer,
            wgrad_deferral_limit=wgrad_deferral_limit,
            tp_group=tp_group,
            **kwargs,
        )
    if (allreduce_dgrad or sequence_parallel) and tp_group is None:
        from megatron.core.parallel_state import get_tensor_model_parallel_group

        tp_group = get_tensor_model_parallel_group()
    sp = sp_wgrad() if sequence_parallel else None
    return _SplitLinear.apply(input, (weight, bias), store, allreduce_dgrad, tp_group, sp)


def _base(layer: Any) -> type:
    for cls in type(layer).__mro__:
        if cls in _ORIGINAL:
            return cls
    raise TypeError(f"{type(layer).__name__} is not a split layer")


def _register_ready(ddp: Any, group: Any, param: torch.Tensor) -> None:
    group.register_grad_ready(param, ddp.force_all_reduce)


def signal_ready(models: list[Any]) -> None:
    """For Megatron DDP chunks that overlap their grad reduction: make each split parameter register as
    ready with its bucket group once its weight grad landed in `main_grad` (what DDP's backward hook does
    for the gradients autograd accumulates; split parameters bypass that hook). Idempotent."""
    for model in models:
        ddp_config = getattr(model, "ddp_config", None)
        if ddp_config is None or not ddp_config.overlap_grad_reduce:
            continue
        for param, group in getattr(model, "param_to_bucket_group", {}).items():
            if getattr(param, GRAD_READY_ATTR, None) is None:
                setattr(param, GRAD_READY_ATTR, partial(_register_ready, model, group, param))


def _classes() -> tuple[type, ...]:
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    return ColumnParallelLinear, RowParallelLinear


def install() -> None:
    """Route `ColumnParallelLinear` / `RowParallelLinear` through the split inside runners (idempotent)."""
    for cls in _classes():
        if cls not in _ORIGINAL:
            _ORIGINAL[cls] = cls.__dict__["_forward_impl"]
            cls._forward_impl = _split_forward_impl  # type: ignore[attr-defined]


def uninstall() -> None:
    """Restore Megatron's `_forward_impl` on both classes."""
    for cls, original in list(_ORIGINAL.items()):
        cls._forward_impl = original  # type: ignore[attr-defined]
        del _ORIGINAL[cls]
