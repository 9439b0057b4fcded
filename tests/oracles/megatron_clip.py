"""megatron-core's own gradient clipping, the reference tests/megatron/test_post_validation.py holds
`StepValidator` to (`TrainSpec(clip=megatron_clip)`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def megatron_clip(params: list[torch.nn.Parameter], clip_grad: float) -> float:
    """Clip the parameters' `.grad` in place as megatron-core's optimizer does (its ChainedOptimizer of a
    dense and an expert optimizer): `get_grad_norm_fp32` over each one's group, the two norms combined,
    `clip_grad_by_total_norm_fp32` with the total. The global norm (a collective: every rank calls it)."""
    import math

    from megatron.core import parallel_state
    from megatron.core.optimizer import clip_grads
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
    from megatron.core.transformer.module import param_is_not_shared

    dense = [p for p in params if getattr(p, "allreduce", True)]
    expert = [p for p in params if not getattr(p, "allreduce", True)]
    parts = [(dense, parallel_state.get_model_parallel_group())]
    if expert:
        parts.append((expert, parallel_state.get_expert_tensor_model_pipeline_parallel_group()))
    with contextlib.ExitStack() as stack:
        if params and params[0].device.type == "cpu":
            stack.enter_context(_megatron_norm_on_cpu())
        norms = []
        for ps, group in parts:
            grads = [
                p.grad
                for p in ps
                if p.grad is not None and param_is_not_shared(p) and param_is_not_tensor_parallel_duplicate(p)
            ]
            norms.append(clip_grads.get_grad_norm_fp32(grads, grad_stats_parallel_group=group))
        norm = norms[0] if len(norms) == 1 else math.sqrt(sum((n if n else 0.0) ** 2 for n in norms))
        # through `decoupled_grad`: the plain path asserts CUDA tensors; the arithmetic is the same
        for p in params:
            p.decoupled_grad = p.grad  # type: ignore[attr-defined]
        try:
            clip_grads.clip_grad_by_total_norm_fp32(params, clip_grad, norm, use_decoupled_grad=True)
        finally:
            for p in params:
                del p.decoupled_grad  # type: ignore[attr-defined]
    return float(norm)


@contextlib.contextmanager
def _megatron_norm_on_cpu() -> Iterator[None]:
    """megatron-core's norm and clip allocate their scratch tensors on "cuda": on the CPU for the call."""
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads

    from primuspp.backends.megatron import cpu

    saved = clip_grads.torch, utils.torch
    clip_grads.torch = utils.torch = cpu._TORCH_ON_CPU  # type: ignore[attr-defined]
    try:
        yield
    finally:
        clip_grads.torch, utils.torch = saved  # type: ignore[attr-defined]
