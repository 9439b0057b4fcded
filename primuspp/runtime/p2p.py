"""Point-to-point traffic of a pipeline: one `batch_isend_irecv` call per comm batch, in table order.

Messages between two ranks pair by posting order (NCCL ignores tags), so every op uses one tag and the
table's FIFO guarantee is what pairs them, on gloo exactly as on NCCL. With NCCL the batch is coalesced
into one work; a consumer then waits on that work (it completes with the whole batch, as rendezvous
semantics assume). Same-rank hand-offs never come here: the runner passes those tensors directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist


class Request:
    """A posted receive or send; `wait()` returns its tensor once the transfer completed."""

    __slots__ = ("_works", "label", "tensor")

    def __init__(self, tensor: torch.Tensor, works: list[Any], label: str) -> None:
        self.tensor = tensor
        self._works = works
        self.label = label

    def wait(self) -> torch.Tensor:
        works = self._works
        if works:
            for work in works:
                work.wait()
            self._works = []
        return self.tensor

    def done(self) -> bool:
        return all(work.is_completed() for work in self._works)


class P2P:
    """Posts comm batches over a process group. `ranks[r]` is the global rank of pipeline rank r."""

    def __init__(self, group: Any = None, ranks: Sequence[int] | None = None) -> None:
        self.group = group
        self.ranks = list(ranks) if ranks is not None else None

    def post(self, ops: list[tuple[bool, torch.Tensor, int, str]]) -> list[Request]:
        """Post `(is_send, tensor, peer pipeline rank, label)` ops as one batch; one request per op."""
        ranks, group, isend, irecv = self.ranks, self.group, dist.isend, dist.irecv
        p2p_ops = [
            dist.P2POp(isend if is_send else irecv, tensor, ranks[peer] if ranks else peer, group)
            for is_send, tensor, peer, _ in ops
        ]
        works = dist.batch_isend_irecv(p2p_ops)
        if len(works) == len(ops):
            return [Request(op[1], [w], op[3]) for op, w in zip(ops, works, strict=True)]
        # coalesced (NCCL): every op completes with the batch
        works = list(works)
        return [Request(op[1], works, op[3]) for op in ops]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
