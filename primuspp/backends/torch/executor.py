"""The plain-torch executor: one user `nn.Module` per virtual stage this rank holds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.overrides import has_torch_function

from primuspp.runtime.executor import Cell, TensorSpec

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Microbatch = tuple[torch.Tensor, torch.Tensor]

_engine_backward = getattr(torch.autograd.graph, "_engine_run_backward", None)


def run_backward(y: torch.Tensor, grad: torch.Tensor) -> None:
    """`torch.autograd.backward(y, grad)` without its generic argument handling.

    For a small stage the public function's Python work (tuple wrapping, symbolic shape comparisons) is a
    measurable share of a p2p-bound step: forward plus backward of a Linear(8, 8) takes 45 us through it
    and 36 us through the engine entry on an idle core (89 vs 34 on a busy one). That entry is the one the
    public function ends in (it keeps the compiler context and logging hooks); tensor subclasses
    (`__torch_function__`) still go through the public function. The engine does not check a root
    gradient's shape, so that is done here.
    """
    if grad.shape != y.shape:
        raise RuntimeError(
            f"Mismatch in shape: grad has a shape of {tuple(grad.shape)} and output has a shape of "
            f"{tuple(y.shape)}"
        )
    if _engine_backward is None or has_torch_function((y, grad)):
        torch.autograd.backward(y, grad)
    else:
        _engine_backward((y,), (grad,), False, False, (), allow_unreachable=True, accumulate_grad=True)


class ModuleExecutor:
    """Runs stage modules forward and backward for the runner.

    The first stage of a route takes the microbatch input (`microbatches[mb][0]`); the last one computes
    `loss_fn(output, microbatches[mb][1]) / num_microbatches` (Megatron's scaling) and backward starts from
    it. `losses` holds the scaled loss of every microbatch whose last stage runs here (reset per step).
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
        self.device = device
        self.microbatches: Sequence[Microbatch] = ()
        self.losses: dict[int, torch.Tensor] = {}
        #: raise at this (kind, microbatch, stage), for failure-handling tests
        self.fault: tuple[str, int, int] | None = None
        self._seeds: dict[tuple[torch.Size, torch.dtype, int], torch.Tensor] = {}

    def begin_step(self, microbatches: Sequence[Microbatch]) -> None:
        self.microbatches = microbatches
        self.losses = {}

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
        y = self.stages[cell.stage](x)
        if cell.last:
            loss = self.loss_fn(y, self._on_device(self.microbatches[mb][1]))
            # scaled by 1/m outside autograd: the reported loss is loss / m, and backward starts from
            # the seed (1 / m) `(loss / m).backward()` would hand to the loss (same division: bit-identical)
            self.losses[mb] = loss.detach() / len(self.microbatches)
            cell.data = (None if cell.first else x, loss)
            return None
        cell.data = (None if cell.first else x, y)
        return y

    def _on_device(self, t: torch.Tensor) -> torch.Tensor:
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
        run_backward(y, self._seed(y) if grad is None else grad)
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
        run_backward(y, self._seed(y) if grad is None else grad)
        return None if x is None else x.grad
