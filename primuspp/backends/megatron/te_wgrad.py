"""Transformer Engine's own weight-gradient deferral, driven by primuspp's W nodes.

A TE linear or grouped-linear module built with `delay_wgrad_compute=True` (Megatron passes its
`TransformerConfig.delay_wgrad_compute` to its TE wrappers) computes only the input gradient in its backward
and queues the weight-gradient GEMM in its own `wgrad_store`, a FIFO; `module.backward_dw()` pops the oldest
entry, computes it, and runs the module's `wgrad_accumulation_and_reduce_hooks` (where Megatron DDP, built
with `delay_wgrad_compute`, registers its grad-ready hook for those weights: TE marks them
`skip_backward_post_hook`). So the deferral itself, the accumulation into `main_grad` and the DDP readiness
are TE's and Megatron's; this module only decides *when* `backward_dw()` runs:

- `attach(models)` puts a forward hook on every module that follows the protocol (`backward_dw()` and a
  `wgrad_store` whose `delay_wgrad_compute()` is true). Inside a primuspp runner (a weight-grad store is
  recording, runtime/wgrad.py) the hook puts a gradient hook on the module's output, which fires when the
  backward reaches the module, just before the module's own backward queues its GEMM;
- on a B node (the store defers) that gradient hook queues `module.backward_dw` into the cell's store, in
  backward order, and the W node runs the store: each module's GEMM then runs in W;
- on a BW node (unsplit) it asks autograd to call `module.backward_dw()` when this backward pass ends, so
  the weight gradient is complete when the node ends, as an unsplit backward's would be.

Outside a runner nothing is added (Megatron's own schedules call `backward_dw()` themselves).

TE's queue is one FIFO per module, so a W pops the module's oldest pending entry: when a rank runs W nodes
in another microbatch order than their B nodes, a W computes another microbatch's GEMM of that module. The
gradient summed over the step is the same (every entry is popped by the step's last W), and the step's last
W of a stage still runs the last pending GEMMs. The tensors TE keeps for its queue are not seen by
primuspp's activation meter.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from primuspp.errors import ConfigError
from primuspp.runtime.wgrad import WeightGradStore, recording_store

#: attribute marking a module whose forward hook is installed (attach() is idempotent)
_ATTACHED = "_primuspp_te_wgrad"


#: the first Transformer Engine release whose linear modules take `delay_wgrad_compute` (Megatron's bound too)
MIN_TE = (2, 3)


def _release(version: str) -> tuple[int, ...]:
    """`2.10.0+cu12` -> (2, 10, 0): the leading numeric release parts."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


@functools.cache
def unsupported() -> str | None:
    """None when Transformer Engine >= 2.3 imports here and its `Linear` and `GroupedLinear` take
    `delay_wgrad_compute` and have `backward_dw`; otherwise why not, in one phrase."""
    try:
        import transformer_engine
        import transformer_engine.pytorch as te
    except Exception as err:
        return f"transformer_engine.pytorch does not import here ({type(err).__name__}: {err})"
    version = str(getattr(transformer_engine, "__version__", "0"))
    if _release(version) < MIN_TE:
        return f"Transformer Engine {version} is older than 2.3 (the first with delay_wgrad_compute)"
    for name in ("Linear", "GroupedLinear"):
        cls = getattr(te, name, None)
        if cls is None or not callable(getattr(cls, "backward_dw", None)):
            return f"Transformer Engine {version} has no {name}.backward_dw"
        if "delay_wgrad_compute" not in inspect.signature(cls.__init__).parameters:
            return f"Transformer Engine {version}'s {name} takes no delay_wgrad_compute"
    return None


#: Megatron's selective-recompute modules that hold linear layers (recomputed in the backward)
_RECOMPUTED_LINEARS = ("mlp", "moe", "shared_experts", "mla_up_proj")


def recompute_conflicts(granularity: str | None, modules: Iterable[str] | None) -> list[str]:
    """Activation recomputation that would re-run TE modules inside the backward, as `name=value (why)`:
    a module recomputed there runs outside any forward node, so its deferred weight grad would stay in TE's
    queue and never reach a W node."""
    why = "a recomputed TE linear's delayed weight grad would never reach primuspp's W node"
    if granularity == "full":
        return [f"recompute_granularity=full with delay_wgrad_compute=True ({why})"]
    if granularity == "selective":
        hit = [m for m in modules or () if m in _RECOMPUTED_LINEARS]
        if hit:
            return [f"recompute_modules={list(modules or ())} with delay_wgrad_compute=True ({why})"]
    return []


def defers(module: Any) -> bool:
    """Does `module` follow TE's deferral protocol with the deferral on: `backward_dw()` and a
    `wgrad_store` whose `delay_wgrad_compute()` is true?"""
    store = getattr(module, "wgrad_store", None)
    if store is None or not callable(getattr(module, "backward_dw", None)):
        return False
    delayed = getattr(store, "delay_wgrad_compute", None)
    return bool(delayed()) if callable(delayed) else False


def deferring_modules(models: Iterable[torch.nn.Module]) -> Iterator[torch.nn.Module]:
    """The modules of `models` (model chunks) whose weight grads TE defers, in module order."""
    for model in models:
        for module in model.modules():
            if defers(module):
                yield module


def attach(models: Iterable[torch.nn.Module]) -> int:
    """Make primuspp's B/W nodes drive `backward_dw()` of every deferring TE module in `models`
    (idempotent). Returns how many modules defer.

    A Megatron DDP chunk (it has `ddp_config`) holding such modules must be built with
    `delay_wgrad_compute=True`, else ConfigError: only then does DDP take those weights' gradients from
    `backward_dw()` (its hook on the parameter would see no gradient in B and miss the one W produces)."""
    count = 0
    for model in models:
        found = list(deferring_modules([model]))
        ddp_config = getattr(model, "ddp_config", None)
        if found and ddp_config is not None and not getattr(ddp_config, "delay_wgrad_compute", False):
            raise ConfigError(
                "delay_wgrad_compute: the model's Transformer Engine modules delay their weight grads but "
                "its DistributedDataParallelConfig has delay_wgrad_compute=False (DDP would miss those "
                "gradients); build DDP with delay_wgrad_compute=True",
                key="delay_wgrad_compute",
            )
        for module in found:
            count += 1
            if not getattr(module, _ATTACHED, False):
                module.register_forward_hook(_on_forward)
                setattr(module, _ATTACHED, True)
    return count


def _first_tensor(output: Any) -> torch.Tensor | None:
    """The module's main output: the tensor, or the first of a tuple (`(out, bias)` with `return_bias`)."""
    if isinstance(output, tuple | list):
        output = output[0] if output else None
    return output if isinstance(output, torch.Tensor) else None


def _on_forward(module: torch.nn.Module, _args: Any, output: Any) -> None:
    store = recording_store()
    if store is None or not torch.is_grad_enabled():
        return
    out = _first_tensor(output)
    if out is None or not out.requires_grad:
        return
    out.register_hook(functools.partial(_on_backward, module, store))


def _on_backward(module: Any, store: WeightGradStore, _grad: torch.Tensor) -> None:
    """Runs as the backward reaches `module`'s output (before the module's backward queues its GEMM)."""
    if store.defer:
        store.put(module.backward_dw)  # the W node runs it
    else:
        torch.autograd.Variable._execution_engine.queue_callback(module.backward_dw)
