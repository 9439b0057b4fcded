"""Per-(microbatch, stage) weight-gradient store: the mechanism behind the B/W split.

A split layer (e.g. `backends.torch.layers.SplitLinear`) captures the store that is *recording* when its
forward runs (the runner makes the cell's store current around each F node). In its backward it always
computes the input gradient; when the store is deferring (the runner sets that for a B node) it queues the
weight-gradient work (`dW += gᵀx`, `db += Σg`) as a closure instead of computing it, and the W node runs the
queue. Outside a runner (no store recorded) or for a BW node it computes everything at once, exactly like an
unsplit layer.

The store is created by the runner for each (microbatch, stage) and dropped after its W: nothing here is
global except the context variable naming the store of the forward now running (reset after each F).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from primuspp.runtime.memory import ActivationMeter

_RECORDING: ContextVar[WeightGradStore | None] = ContextVar("primuspp_wgrad_store", default=None)


class WeightGradStore:
    """Queued weight-gradient closures of one (microbatch, stage).

    `defer` is read by split layers during backward: True queues the weight-grad work, False computes it in
    place. Tensors a closure keeps alive (the layer input and the output gradient) are registered with the
    activation meter, so activation accounting sees what a B node leaves behind for its W.
    """

    __slots__ = ("_meter", "_queue", "defer")

    def __init__(self, meter: ActivationMeter | None = None) -> None:
        self.defer = False
        self._queue: list[tuple[Callable[[], None], Any]] = []
        self._meter = meter

    def put(self, work: Callable[[], None], *tensors: torch.Tensor) -> None:
        """Queue `work`; `tensors` are what it holds (for accounting only)."""
        held = self._meter.hold(tensors) if self._meter is not None else None
        self._queue.append((work, held))

    def run(self) -> None:
        """Run and drop the queued work, in queue order (the order backward produced it)."""
        queue, self._queue = self._queue, []
        with torch.no_grad():
            for work, _held in queue:
                work()
        queue.clear()

    def __len__(self) -> int:
        return len(self._queue)

    @contextmanager
    def recording(self) -> Iterator[WeightGradStore]:
        """Make this the store split layers capture while a forward runs."""
        token = _RECORDING.set(self)
        try:
            yield self
        finally:
            _RECORDING.reset(token)


#: the runner's form of `WeightGradStore.recording()` (no generator per forward): `token = begin(store)`,
#: then `end(token)` after the forward
begin_recording = _RECORDING.set
end_recording = _RECORDING.reset


def recording_store() -> WeightGradStore | None:
    """The store of the forward now running, or None outside a runner."""
    return _RECORDING.get()


def accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    """`param.grad += grad` as autograd's AccumulateGrad does (the first gradient is stored as is)."""
    if param.grad is None:
        param.grad = grad
    else:
        param.grad += grad
