"""The plain-torch executor: one user `nn.Module` per virtual stage this rank holds."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.modules.module as _module_hooks
from torch import nn
from torch.overrides import has_torch_function

from primuspp.runtime.executor import Cell, TensorSpec

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Microbatch = tuple[torch.Tensor, torch.Tensor]

_engine_backward = getattr(torch.autograd.graph, "_engine_run_backward", None)
_engine = getattr(torch.autograd.Variable, "_execution_engine", None)  # a torch internal: None if absent
_autograd_log = logging.getLogger("torch.autograd.graph")


def run_backward(y: torch.Tensor, grad: torch.Tensor, on_cpu: bool = False) -> None:
    """`torch.autograd.backward(y, grad)` without its generic argument handling.

    For a small stage the public function's Python work (tuple wrapping, symbolic shape comparisons) is a
    measurable share of a p2p-bound step: forward plus backward of a Linear(8, 8) takes 45 us through it
    and 36 us through the engine entry on an idle core (89 vs 34 on a busy one). That entry is the one the
    public function ends in: it stashes the caller's context for the engine's device threads and attaches
    logging hooks when torch.autograd's logger is at DEBUG. A graph on the CPU (`on_cpu`) runs on this
    thread, so there (logging not at DEBUG) the engine is called directly: 1.5 us less per backward.
    Tensor subclasses (`__torch_function__`) still go through the public function. The engine does not
    check a root gradient's shape, so that is done here.
    """
    if grad.shape != y.shape:
        raise RuntimeError(
            f"Mismatch in shape: grad has a shape of {tuple(grad.shape)} and output has a shape of "
            f"{tuple(y.shape)}"
        )
    if _engine_backward is None or has_torch_function((y, grad)):
        torch.autograd.backward(y, grad)
    elif on_cpu and _engine is not None and not _autograd_log.isEnabledFor(logging.DEBUG):
        _engine.run_backward((y,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)
    else:
        _engine_backward((y,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)


def _callable(module: nn.Module) -> Callable[..., torch.Tensor]:
    """What calling `module` runs: its `forward` itself when `Module.__call__` would go straight to it (no
    hooks on the module or global ones, not compiled, not tracing: the check of `Module._call_impl`), else
    the module. Saves the call machinery's Python (~2.5 us per forward); checked at each step's start, so a
    hook registered during a step takes effect at the next one. These are torch internals: if a torch
    version lacks one of them, the module itself is called (the general path)."""
    try:
        return _direct_forward(module)
    except AttributeError:
        return module


def _direct_forward(module: nn.Module) -> Callable[..., torch.Tensor]:
    if (
        type(module).__call__ is not nn.Module.__call__
        or type(module)._call_impl is not nn.Module._call_impl
        or type(module)._wrapped_call_impl is not nn.Module._wrapped_call_impl
        or module._compiled_call_impl is not None
        or torch._C._get_tracing_state()
        or module._backward_hooks
        or module._backward_pre_hooks
        or module._forward_hooks
        or module._forward_pre_hooks
        or _module_hooks._global_backward_pre_hooks
        or _module_hooks._global_backward_hooks
        or _module_hooks._global_forward_hooks
        or _module_hooks._global_forward_pre_hooks
    ):
        return module
    return module.forward


class ModuleExecutor:
    """Runs stage modules forward and backward for the runner.

    The first stage of a route takes the microbatch input (`microbatches[mb][0]`); the last one computes
    `loss_fn(output, microbatches[mb][1]) / num_microbatches` (Megatron's scaling) and backward starts from
    it. `losses` holds the loss of every microbatch whose last stage runs here (detached, not yet divided by
    the number of microbatches; reset per step): `scaled_losses()` divides them all in one operation.
    Split layers defer their weight gradients on B; BW computes everything at once.
    """

    def __init__(
        self,
        stages: Mapping[int, nn.Module],
        loss_fn: LossFn,
        boundary: TensorSpec | Callable[[int, int], TensorSpec],
        device: torch.device,
    ) -> None:
        self.stages = dict(stages)
        self.loss_fn = loss_fn
        self._boundary = boundary
        #: one spec for every boundary, fixed: the runner may ask `boundary_spec` once, not every step
        self.static_boundary = isinstance(boundary, TensorSpec)
        self.device = device
        self.microbatches: Sequence[Microbatch] = ()
        self.losses: dict[int, torch.Tensor] = {}
        #: raise at this (kind, microbatch, stage), for failure-handling tests
        self.fault: tuple[str, int, int] | None = None
        self._seeds: dict[tuple[torch.Size, torch.dtype, int], torch.Tensor] = {}
        self._calls: dict[int, Callable[..., torch.Tensor]] = dict(self.stages)  # see begin_step
        self._cpu = device.type == "cpu"

    def begin_step(self, microbatches: Sequence[Microbatch]) -> None:
        self.microbatches = microbatches
        self.losses = {}
        self._calls = {s: _callable(m) for s, m in self.stages.items()}

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec:
        b = self._boundary
        return b if isinstance(b, TensorSpec) else b(microbatch, stage)

    def _check_fault(self, kind: str, cell: Cell) -> None:
        if self.fault == (kind, cell.microbatch, cell.stage):
            raise RuntimeError(f"injected fault at {kind}{cell.microbatch}.{cell.stage}")

    def forward(self, cell: Cell, x: torch.Tensor | None) -> torch.Tensor | None:
        if self.fault is not None:
            self._check_fault("F", cell)
        mb = cell.microbatch
        if cell.first:
            x = self._on_device(self.microbatches[mb][0])
        elif x is not None and x.is_floating_point():
            x.requires_grad_()
        y = self._calls[cell.stage](x)
        if cell.last:
            loss = self.loss_fn(y, self._on_device(self.microbatches[mb][1]))
            # scaled by 1/m outside autograd and after the step, all at once (`scaled_losses`): the
            # reported loss is loss / m, and backward starts from the seed (1 / m) `(loss / m).backward()`
            # would hand to the loss (the same division, elementwise: bit-identical)
            self.losses[mb] = loss.detach()
            cell.data = (None if cell.first else x, loss)
            return None
        cell.data = (None if cell.first else x, y)
        return y

    def scaled_losses(self) -> dict[int, float]:
        """This step's losses divided by the number of microbatches (one division, one conversion)."""
        losses, m = self.losses, len(self.microbatches)
        if not losses:
            return {}
        if len(losses) == 1:
            values = [float(v / m) for v in losses.values()]
        else:
            values = (torch.stack(list(losses.values())) / m).tolist()
        return dict(zip(losses, values, strict=True))

    def _on_device(self, t: torch.Tensor) -> torch.Tensor:
        if self._cpu and t.is_cpu:  # no `torch.device` object built for the comparison
            return t
        return t if t.device == self.device else t.to(self.device, non_blocking=True)

    def _seed(self, loss: torch.Tensor) -> torch.Tensor:
        """The gradient of the scaled loss (loss / m) with respect to the loss: ones / m (cached; the engine
        never takes over a seed something else still holds)."""
        key = (loss.shape, loss.dtype, len(self.microbatches))
        seed = self._seeds.get(key)
        if seed is None:
            seed = self._seeds[key] = torch.ones_like(loss, memory_format=torch.preserve_format) / key[2]
        return seed

    def backward_input(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        if self.fault is not None:
            self._check_fault("B", cell)
        x, y = cell.data
        cell.data = None
        run_backward(y, self._seed(y) if grad is None else grad, self._cpu)
        return None if x is None else x.grad

    def backward_weight(self, cell: Cell) -> None:
        if self.fault is not None:
            self._check_fault("W", cell)
        cell.wgrad.run()

    def backward_full(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        if self.fault is not None:
            self._check_fault("BW", cell)
        # the same work as B: the runner has the store compute weight grads at once
        x, y = cell.data
        cell.data = None
        run_backward(y, self._seed(y) if grad is None else grad, self._cpu)
        return None if x is None else x.grad
