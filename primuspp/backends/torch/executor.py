"""The plain-torch executor: one user `nn.Module` per virtual stage this rank holds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from primuspp.runtime.executor import Cell, TensorSpec

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Microbatch = tuple[torch.Tensor, torch.Tensor]


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
        torch.autograd.backward(y, self._seed(y) if grad is None else grad)
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
        torch.autograd.backward(y, self._seed(y) if grad is None else grad)
        return None if x is None else x.grad
