"""The executor protocol: what a backend implements so the runner can execute any schedule table.

The runner owns the schedule, the p2p traffic, the timing and the per-(microbatch, stage) state; an executor
only knows how to run one stage of one microbatch forward or backward. Three executors are planned on this
interface: plain torch modules (`backends/torch`), Megatron's forward/backward step (`backends/megatron`),
and an emulator that sleeps cost-model durations and hands correctly shaped dummy tensors to the real p2p.

Per-(microbatch, stage) state lives in a `Cell` the runner creates at the F node and drops after the last
backward node (W or BW). An executor keeps whatever it needs in `cell.data` (e.g. the input and output
tensors of the stage); it must not keep per-microbatch state anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from primuspp.runtime.memory import SavedRecord
from primuspp.runtime.wgrad import WeightGradStore


class TensorSpec(NamedTuple):
    """Shape and dtype of a tensor crossing a stage boundary (its gradient has the same)."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32


@dataclass(eq=False, slots=True)
class Cell:
    """Runner-owned state of one (microbatch, stage), alive from its F to its W or BW.

    `wgrad` collects the weight-grad work a B node defers (run by W); `saved` is the activation meter's
    record of the tensors autograd saved during F (used for accounting and OFFLOAD/RELOAD); `data` is the
    executor's own (inputs, outputs, loss...). `first`/`last` say whether the stage starts or ends the
    microbatch's route (data loading / loss).
    """

    microbatch: int
    stage: int
    first: bool
    last: bool
    wgrad: WeightGradStore
    saved: SavedRecord | None = None
    data: Any = None


@runtime_checkable
class Executor(Protocol):
    """What a backend implements. All tensors live on `device`.

    - `boundary_spec(mb, s)`: the tensor that leaves stage `s` toward the next stage of `mb`'s route (the
      runner allocates receive buffers from it: no shape handshake on the hot path).
    - `forward(cell, x)`: run the stage; `x` is None on the first stage of the route (the executor loads the
      microbatch itself). Return the output for the next stage, or None on the last stage of the route (the
      executor computes the loss there, divided by the number of microbatches, as Megatron does).
    - `backward_input(cell, grad)` (B): input gradient only; split layers queue their weight-grad work into
      `cell.wgrad` (the runner has set it to defer). `grad` is None on the last stage (backward from the
      loss). Return the input gradient, or None on the first stage.
    - `backward_weight(cell)` (W): run the deferred weight-grad work (`cell.wgrad.run()`), plus anything the
      backend does once a weight gradient is final (e.g. Megatron's DDP grad-ready hooks).
    - `backward_full(cell, grad)` (BW): input and weight gradients at once.
    """

    device: torch.device

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec: ...

    def forward(self, cell: Cell, x: torch.Tensor | None) -> torch.Tensor | None: ...

    def backward_input(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None: ...

    def backward_weight(self, cell: Cell) -> None: ...

    def backward_full(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None: ...
