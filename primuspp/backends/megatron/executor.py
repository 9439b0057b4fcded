"""The Megatron executor: runs Megatron's own `forward_step` / `backward_step` for the schedule runner.

One executor serves one (table, pipeline rank); `begin()` hands it what one call of the forward-backward
function brings (the user's `forward_step_func`, the data iterators, the model chunks, the config). Stage
`s` of the table runs on model chunk `placement.stage_chunk[s]` of this rank.

- F: `schedules.forward_step` (the user's forward step, the loss conventions, `forward_data_store`);
  outputs are pseudo-freed after the hand-off when `config.deallocate_pipeline_outputs` is set, as
  Megatron does (the tensor handed to the runner keeps the data alive until it was sent).
- B / BW: `schedules.backward_step` (grad scaling on the last stage, input grad). On B the split linears
  (split.py) queue their weight grads into the cell's store; W runs them.
- Grad sync: the step runs inside `config.no_sync_func`. DDP learns that a parameter's gradient is final
  where it really is: the last B (non-split parameters, through DDP's hooks) or the last W (split
  parameters, split.py) of its stage on this rank, so the no-sync context is left around those nodes only
  (`grad_sync_func` unset), or `grad_sync_func[chunk]` runs after the stage's last W (set), as Megatron's
  interleaved schedule does after a chunk's last backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from primuspp.runtime.executor import Cell, TensorSpec
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.semantics import simple_parts
from primuspp.schedule.table import ScheduleTable

_B, _W, _BW, _F = NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.F


class MicrobatchIterator:
    """Hands a chunk's forward step the item of the microbatch being computed.

    Megatron's schedules call a chunk's forward step in microbatch order, so `next(data_iterator)` is the
    microbatch's data. A table may run a chunk's forwards in another order: this proxy pulls from the
    user's iterator in order and returns item `want` (the runner's microbatch), keeping the others until
    their forward comes."""

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source
        self.want = 0
        self._pulled = 0
        self._kept: dict[int, Any] = {}

    def __iter__(self) -> MicrobatchIterator:
        return self

    def __next__(self) -> Any:
        want = self.want
        if want in self._kept:
            return self._kept.pop(want)
        while True:
            item = next(self.source)
            index = self._pulled
            self._pulled += 1
            if index >= want:
                self.want = index + 1  # a second next() in the same forward takes the following item
                return item
            self._kept[index] = item


class GradSync:
    """`config.no_sync_func` (one, or one per chunk) entered and left like Megatron's schedules do."""

    def __init__(self, no_sync_func: Callable[[], Any] | Sequence[Callable[[], Any]] | None) -> None:
        if isinstance(no_sync_func, list | tuple):
            funcs = list(no_sync_func)

            def enter_all() -> contextlib.ExitStack:
                stack = contextlib.ExitStack()
                for f in funcs:
                    stack.enter_context(f())
                return stack

            self._factory: Callable[[], Any] = enter_all
        else:
            self._factory = no_sync_func or contextlib.nullcontext
        self._ctx: Any = None

    def disable(self) -> None:
        if self._ctx is None:
            self._ctx = self._factory()
            self._ctx.__enter__()

    def enable(self) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(None, None, None)

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        """Grad sync on for one node (the parameters whose last gradient lands here register as ready)."""
        self.enable()
        try:
            yield
        finally:
            self.disable()


@dataclass(kw_only=True, eq=False)
class Call:
    """What one call of the forward-backward function brings (see schedule.py)."""

    forward_step_func: Callable[..., Any]
    iterators: list[MicrobatchIterator | None]
    models: list[torch.nn.Module]
    config: Any
    num_microbatches: int
    spec: TensorSpec
    forward_only: bool
    collect_non_loss_data: bool
    first_val_step: bool | None
    cp_size: int
    sync: GradSync
    grad_sync_funcs: list[Callable[..., Any]] | None
    device: torch.device
    synced: set[int] = field(default_factory=set)
    data: dict[int, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from megatron.core.utils import get_model_type

        self.total_num_tokens = torch.zeros([], dtype=torch.int, device=self.device)
        self.model_type = get_model_type(self.models[0])

    def forward_data_store(self) -> list[Any]:
        """What the forward steps stored, in microbatch order (Megatron's order)."""
        return [item for mb in sorted(self.data) for item in self.data[mb]]


class MegatronExecutor:
    """Runs Megatron's forward/backward steps for one pipeline rank of `table` (see the module doc)."""

    def __init__(self, table: ScheduleTable, rank: int, device: torch.device) -> None:
        self.device = device
        #: run an FB node's parts at once (overlap.run_fb), or None: F then B (set per call, schedule.py)
        self.run_fb: Callable[[Callable[[], None], Callable[[], None]], None] | None = None
        pl = table.placement
        self.chunk = pl.stage_chunk
        self.call: Call | None = None
        self.multi_chunk = len(pl.stages_of_rank(rank)) > 1
        # the last node giving each stage's non-split grads (B/BW) and split grads (W/BW); first F per chunk
        self.last_b: dict[int, int] = {}
        self.last_w: dict[int, int] = {}
        self.first_f: dict[int, int] = {}
        for node in table.ranks[rank]:
            for part in simple_parts(node):
                kind, mb, s = part.kind, part.microbatch, part.stage
                if kind is _F:
                    self.first_f.setdefault(s, mb)
                if kind is _B or kind is _BW:
                    self.last_b[s] = mb
                if kind is _W or kind is _BW:
                    self.last_w[s] = mb

    def begin(self, call: Call) -> None:
        self.call = call

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec:
        return self.call.spec  # type: ignore[union-attr]

    def forward(self, cell: Cell, x: torch.Tensor | None) -> torch.Tensor | None:
        from megatron.core.pipeline_parallel.schedules import (
            check_first_val_step,
            deallocate_output_tensor,
            forward_step,
        )

        call = self.call
        assert call is not None
        mb, s = cell.microbatch, cell.stage
        c = self.chunk[s]
        if x is not None and not call.forward_only:
            x.requires_grad_()
        it = call.iterators[c]
        if it is not None:
            it.want = mb
        store: list[Any] = []
        output, num_tokens = forward_step(
            call.forward_step_func,
            it,
            call.models[c],
            call.num_microbatches,
            x,
            store,
            call.config,
            call.cp_size,
            collect_non_loss_data=call.collect_non_loss_data,
            is_first_microbatch=check_first_val_step(
                call.first_val_step, call.forward_only, self.first_f.get(s) == mb
            ),
            current_microbatch=mb,
            vp_stage=c if self.multi_chunk else None,
            is_last_stage=cell.last,
        )
        if store:
            call.data.setdefault(mb, []).extend(store)
        if cell.last:
            call.total_num_tokens += num_tokens
        if call.forward_only:
            return None if cell.last else output.detach()
        cell.data = (x, output)
        if cell.last:
            return None
        if call.config.deallocate_pipeline_outputs and output._base is None:
            handed = output.detach()  # keeps the data alive until the runner has sent it
            deallocate_output_tensor(output, True)
            return handed
        return output

    def _backward(self, cell: Cell, grad: torch.Tensor | None, sync: bool) -> torch.Tensor | None:
        from megatron.core.pipeline_parallel.schedules import backward_step

        call = self.call
        assert call is not None
        x, y = cell.data
        cell.data = None
        window = sync and call.grad_sync_funcs is None
        with call.sync.window() if window else contextlib.nullcontext():
            return backward_step(x, y, grad, call.model_type, call.config)

    def _after_last_w(self, stage: int) -> None:
        call = self.call
        assert call is not None
        if call.grad_sync_funcs is None:
            return
        c = self.chunk[stage]
        with call.sync.window():
            call.grad_sync_funcs[c](call.models[c].parameters())
        call.synced.add(c)

    def backward_input(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        return self._backward(cell, grad, self.last_b.get(cell.stage) == cell.microbatch)

    def backward_weight(self, cell: Cell) -> None:
        call = self.call
        assert call is not None
        last = self.last_w.get(cell.stage) == cell.microbatch
        if last and call.grad_sync_funcs is None:
            with call.sync.window():
                cell.wgrad.run()
        else:
            cell.wgrad.run()
        if last:
            self._after_last_w(cell.stage)

    def backward_full(self, cell: Cell, grad: torch.Tensor | None) -> torch.Tensor | None:
        s, mb = cell.stage, cell.microbatch
        gin = self._backward(cell, grad, self.last_b.get(s) == mb or self.last_w.get(s) == mb)
        if self.last_w.get(s) == mb:
            self._after_last_w(s)
        return gin
