"""Point-to-point traffic of a pipeline: one `batch_isend_irecv` call per comm batch, in table order.

Messages between two ranks pair by posting order (NCCL ignores tags), so every op uses one tag and the
table's FIFO guarantee is what pairs them, on gloo exactly as on NCCL. With NCCL the batch is coalesced
into one work; a consumer then waits on that work (it completes with the whole batch, as rendezvous
semantics assume). Same-rank hand-offs never come here: the runner passes those tensors directly.

For a backend without coalescing (gloo) `batch_isend_irecv` is a loop of `isend`/`irecv` in list order,
one work per op, each completing on its own.

A gloo work object is not destroyed the moment its `wait()` returns: gloo's device thread signals the
waiter before it lets go of the work's buffer, and the buffer's destructor spins (`sched_yield`) until it
has. Destroyed at once, a receive's work burned that spin on the main thread for nearly every message (8 %
of a p2p-bound step's samples); `Request.wait()` therefore hands its works to its P2P's `retired` queue,
which keeps the last `RETIRED` of them alive (dropped by later waits, in this step or the next), by when
the device thread is long done with them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True, slots=True)
class Message:
    """What one p2p op does: send to or receive from pipeline rank `peer`; `label` names it in errors."""

    send: bool
    peer: int
    label: str


#: completed works a P2P keeps alive (see the module docstring): a few, since each holds its tensor
RETIRED = 4


class Request:
    """A posted receive or send; `wait()` returns its tensor once the transfer completed."""

    __slots__ = ("_retired", "_works", "message", "tensor")

    def __init__(
        self, tensor: torch.Tensor, works: list[Any], message: Message, retired: deque | None = None
    ) -> None:
        self.tensor = tensor
        self._works = works
        self.message = message
        self._retired = retired

    @property
    def label(self) -> str:
        return self.message.label

    def wait(self) -> torch.Tensor:
        works = self._works
        if works:
            for work in works:
                work.wait()
            self._works = []
            if self._retired is not None:
                self._retired.extend(works)
        return self.tensor

    def done(self) -> bool:
        """True once the transfer is known to be over (gloo only knows after `wait()`: False until then)."""
        return all(work.is_completed() for work in self._works)


class P2P:
    """Posts comm batches over a process group. `ranks[r]` is the global rank of pipeline rank r (default:
    the same number)."""

    def __init__(self, group: Any = None, ranks: Sequence[int] | None = None) -> None:
        self.group = group
        self.ranks = list(ranks) if ranks is not None else None
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        #: every op completes on its own (gloo): a receive may be posted before its batch without waiting
        #: for the rest of it (with coalescing backends, NCCL, a batch completes as a whole)
        self.independent_ops = (
            dist.get_backend(pg) == "gloo" and not pg._get_backend(torch.device("cpu")).supports_coalescing
        )
        #: completed works kept alive a little longer (gloo: see the module docstring)
        self.retired: deque | None = deque(maxlen=RETIRED) if self.independent_ops else None

    def post(self, messages: Sequence[Message], tensors: Sequence[torch.Tensor]) -> list[Request]:
        """Post `messages[i]` on `tensors[i]` (the tensor to send, or the buffer to receive into) as one
        batch, in order; one request per message."""
        ranks, retired = self.ranks, self.retired
        group, isend, irecv = self.group, dist.isend, dist.irecv
        p2p_ops = [
            dist.P2POp(isend if msg.send else irecv, tensor, ranks[msg.peer] if ranks else msg.peer, group)
            for msg, tensor in zip(messages, tensors, strict=True)
        ]
        works = dist.batch_isend_irecv(p2p_ops)
        if len(works) == len(messages):
            return [Request(t, [w], m, retired) for m, t, w in zip(messages, tensors, works, strict=True)]
        # coalesced (NCCL): every op completes with the batch
        works = list(works)
        return [Request(t, works, m) for m, t in zip(messages, tensors, strict=True)]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
