"""ScheduleRunner: execute one rank's node list of any valid schedule table.

The runner walks `table.ranks[rank]` and dispatches by node kind. Compute nodes go to the executor (see
`executor.py`); the comm nodes standing between two compute nodes are posted as one batch right before the
next compute node (p2p.py); OFFLOAD/RELOAD move a cell's saved activations (memory.py). Per-(microbatch,
stage) state lives in dicts local to one `step()` call and is popped by the node that needs it last, so a
step leaves nothing behind; a leftover means the table or the executor is broken and is reported.

Receives may run ahead of their batch when the transport completes every op on its own (gloo): posting a
receive never blocks there, and receives from one peer stay in table order, so the messages pair exactly as
the table says. A receive posted early lets the sender's data go out at once instead of waiting for the
receiver to ask for it: on gloo that halves the latency of a hand-off. With coalesced batches (NCCL) a batch
completes as a whole, so there every op is posted at its table position.

Every compute node is timed (timing.py) and the activation meter is sampled after it; `step()` returns a
`RankStep` the caller turns into the shared trace model (trace.py). An exception inside a node becomes a
`NodeFailure` naming the rank and the node.
"""

from __future__ import annotations

import math
import socket
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from primuspp.errors import PrimusppError
from primuspp.runtime.executor import Cell, Executor
from primuspp.runtime.memory import ActivationMeter, SavedRecord
from primuspp.runtime.p2p import P2P, Request
from primuspp.runtime.timing import clock_for
from primuspp.runtime.wgrad import WeightGradStore
from primuspp.schedule.nodes import Node, NodeKind, format_node, parse_node
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from primuspp.trace.timeline import Interval

_F, _B, _W, _BW, _FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB
_SEND_F, _RECV_F, _SEND_B, _RECV_B = NodeKind.SEND_F, NodeKind.RECV_F, NodeKind.SEND_B, NodeKind.RECV_B
_OFFLOAD = NodeKind.OFFLOAD

_HOST = socket.gethostname()

# program op codes
_COMPUTE, _BATCH, _MEMORY = 0, 1, 2


class NodeFailure(PrimusppError):
    """A node raised: `rank R failed at NODE: error`."""

    def __init__(self, rank: int, node: str, error: BaseException) -> None:
        detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        super().__init__(f"rank {rank} failed at {node}: {detail}")
        self.rank = rank
        self.node = node


@dataclass
class RankStep:
    """What one rank measured in one step (times in ms from its step start, memory in bytes)."""

    rank: int
    intervals: list[Interval]
    memory: list[tuple[float, float]]
    peak_bytes: int
    #: (kind "F"/"B", microbatch, producer stage, peer rank, ms): sends when posted, receives when waited
    sends: list[tuple[str, int, int, int, float]] = field(default_factory=list)
    recvs: list[tuple[str, int, int, int, float]] = field(default_factory=list)
    #: the step start on the host's monotonic clock (ns; None for device clocks) and the host's name: ranks
    #: of one host share that clock, so their timelines can be put on one time axis
    origin_ns: int | None = None
    host: str = ""


class ScheduleRunner:
    """Runs rank `rank`'s part of `table` with `executor`, one training step per `step()` call.

    `p2p` is required when the table has comm nodes on this rank. `meter` counts saved activations (pass
    False to switch accounting off, or an `ActivationMeter` built with the parameters to exclude).
    `observer(node)` is called after each node (tests use it to look between nodes). Where the transport
    allows it, receives are posted ahead of their table position: at most `recv_ahead` of them (None: no
    limit; 0: none ahead) and at most `recv_ahead_bytes` of receive buffers beyond those of the batch at
    hand (these buffers are not activations: the meter does not count them).
    """

    def __init__(
        self,
        table: ScheduleTable,
        rank: int,
        executor: Executor,
        *,
        p2p: P2P | None = None,
        meter: ActivationMeter | bool = True,
        observer: Callable[[Node], None] | None = None,
        check: bool = True,
        recv_ahead: int | None = None,
        recv_ahead_bytes: int = 64 * 2**20,
    ) -> None:
        if not 0 <= rank < table.pp:
            raise ValueError(f"rank {rank} outside 0..{table.pp - 1}")
        if check:
            validate(table)
        self.table, self.rank, self.executor, self.p2p = table, rank, executor, p2p
        if meter is True:
            meter = ActivationMeter()
        self.meter: ActivationMeter | None = meter or None
        self.observer = observer
        #: why the last step failed (the runner then refuses further steps), or None
        self.failed: str | None = None
        self.program = self._compile(table.ranks[rank])
        if recv_ahead is not None and recv_ahead < 0:
            raise ValueError(f"recv_ahead must be >= 0 or None, got {recv_ahead}")
        #: receives posted ahead of their batch (0: every op at its table position), and their byte budget
        self.recv_ahead = recv_ahead if p2p is not None and p2p.independent_ops else 0
        self.recv_ahead_bytes = recv_ahead_bytes
        self._recvs = [o for op, item, _ in self.program if op == _BATCH for o in item if not o[0]]
        self._batch_plan: list[tuple[tuple, int]] = []  # per batch: its sends, receives up to its end
        count = 0
        for op, item, _ in self.program:
            if op == _BATCH:
                count += sum(1 for o in item if not o[0])
                self._batch_plan.append((tuple(o for o in item if o[0]), count))
        # (microbatch, stage) whose backward runs here; a forward-only table (evaluation) keeps no cells
        self._backward = {
            (part.microbatch, part.stage)
            for node in table.ranks[rank]
            for part in (node.parts if node.kind is _FB else (node,))
            if part.kind is _B or part.kind is _BW
        }
        if p2p is None and any(op == _BATCH for op, _, _ in self.program):
            raise ValueError(f"rank {rank}: the table has p2p nodes here but no P2P was given")

    def _compile(self, nodes: tuple[Node, ...]) -> list[tuple[int, Any, str]]:
        """(op, item, label) per step: comm nodes grouped into batches, each posted right before the next
        compute node (or at the end). Everything that does not change between steps is worked out here:
        labels, dict keys, the boundary each message carries."""
        prv = self.table.placement.prev_stage
        program: list[tuple[int, Any, str]] = []
        batch: list[tuple] = []

        def flush() -> None:
            label = "batch [" + " ".join(op[-1] for op in batch) + "]"
            program.append((_BATCH, tuple(batch), label))
            batch.clear()

        for node in nodes:
            kind = node.kind
            if kind.is_comm:
                mb, s = node.microbatch, node.stage
                fwd = kind is _SEND_F or kind is _RECV_F
                # (is_send, forward direction, local key, peer, boundary (mb, stage), label)
                boundary = (mb, s if kind is _SEND_F or kind is _RECV_B else prv[s])
                batch.append((kind.is_send, fwd, (mb, s), node.peer, boundary, format_node(node)))
                continue
            if kind.is_compute and batch:
                flush()
            program.append((_COMPUTE if kind.is_compute else _MEMORY, node, format_node(node)))
        if batch:
            flush()
        return program

    @staticmethod
    def _batch_node(op: tuple) -> Node:
        return parse_node(op[-1])

    def step(self, sync_start: bool = True) -> RankStep:
        """Run one step. With `sync_start` the ranks meet at a barrier first (their clocks then agree).

        After a step failed the runner refuses to run another: receives it posted may still be pending on
        the transport and would take the next step's messages."""
        if self.failed is not None:
            raise RuntimeError(
                f"rank {self.rank}: this runner failed ({self.failed}); its posted receives may still be "
                "pending, so it cannot run another step (start a new process group)"
            )
        ex, meter, p2p, observer = self.executor, self.meter, self.p2p, self.observer
        # an executor may run an FB node's two parts at once: run_fb(run_f, run_b) (megatron: overlap.py)
        run_fb = getattr(ex, "run_fb", None)
        rank = self.rank
        pl = self.table.placement
        nxt, prv, srank, chunk = pl.next_stage, pl.prev_stage, pl.stage_rank, pl.stage_chunk
        device = ex.device
        clock = clock_for(device)
        backward_keys = self._backward
        fwd_in: dict[tuple[int, int], torch.Tensor | Request] = {}
        bwd_in: dict[tuple[int, int], torch.Tensor | Request] = {}
        out_f: dict[tuple[int, int], torch.Tensor] = {}
        out_b: dict[tuple[int, int], torch.Tensor] = {}
        cells: dict[tuple[int, int], Cell] = {}
        pending_sends: list[Request] = []
        prune_at = [32]
        marks: list[tuple[Node, object, object]] = []
        mem_marks: list[tuple[object, int]] = []
        sends: list[tuple[str, int, int, int, object]] = []
        recvs: list[tuple[str, int, int, int, object]] = []

        def take(store: dict, key: tuple[int, int]) -> torch.Tensor | None:
            value = store.pop(key, None)
            if type(value) is Request:
                try:
                    value = value.wait()
                except Exception as err:
                    raise RuntimeError(f"waiting for {value.label}: {err}") from err
                tag = "F" if store is fwd_in else "B"
                producer = prv[key[1]] if store is fwd_in else nxt[key[1]]
                recvs.append((tag, key[0], producer, srank[producer], clock.mark()))
            return value

        def forward(node: Node) -> None:
            mb, s = node.microbatch, node.stage
            key = (mb, s)
            x = take(fwd_in, key)
            q = nxt[s]
            cell = Cell(mb, s, prv[s] < 0, q < 0, WeightGradStore(meter))
            if meter is not None:
                cell.saved = SavedRecord()
                with cell.wgrad.recording(), meter.saving(cell.saved):
                    y = ex.forward(cell, x)
            else:
                with cell.wgrad.recording():
                    y = ex.forward(cell, x)
            if key in backward_keys:
                cells[key] = cell
            if q >= 0:
                if y is None:
                    raise RuntimeError(f"the executor returned no output for stage {s}")
                if srank[q] == rank:
                    fwd_in[(mb, q)] = y.detach()
                else:
                    out_f[key] = y

        def backward(node: Node) -> None:
            mb, s = node.microbatch, node.stage
            key = (mb, s)
            g = take(bwd_in, key)
            if node.kind is _B:
                cell = cells[key]
                cell.wgrad.defer = True
                gin = ex.backward_input(cell, g)
                cell.wgrad.defer = False
            else:
                cell = cells.pop(key)
                gin = ex.backward_full(cell, g)
            q = prv[s]
            if q >= 0:
                if gin is None:
                    raise RuntimeError(f"the executor returned no input gradient for stage {s}")
                if srank[q] == rank:
                    bwd_in[(mb, q)] = gin
                else:
                    out_b[key] = gin

        boundary_spec, empty, mark = ex.boundary_spec, torch.empty, clock.mark

        def post(batch: tuple[tuple, ...]) -> None:
            ops = []
            slots = []
            for is_send, fwd, key, peer, (smb, sstage), text in batch:
                spec = boundary_spec(smb, sstage)
                if is_send:
                    t = (out_f if fwd else out_b).pop(key)
                    if (
                        t.shape != spec.shape and tuple(t.shape) != tuple(spec.shape)
                    ) or t.dtype != spec.dtype:
                        raise RuntimeError(
                            f"{text}: tensor is {tuple(t.shape)} {t.dtype} but the executor's "
                            f"boundary_spec says {tuple(spec.shape)} {spec.dtype}"
                        )
                    if t.requires_grad:
                        t = t.detach()
                    if not t.is_contiguous():
                        t = t.contiguous()
                    ops.append((True, t, peer, text))
                    slots.append(None)
                    sends.append(("F" if fwd else "B", key[0], key[1], peer, mark()))
                else:
                    ops.append((False, empty(spec.shape, dtype=spec.dtype, device=device), peer, text))
                    slots.append((fwd_in if fwd else bwd_in, key))
            requests = p2p.post(ops)  # type: ignore[union-attr]
            for request, slot in zip(requests, slots, strict=True):
                if slot is None:
                    pending_sends.append(request)
                else:
                    slot[0][slot[1]] = request
            if len(pending_sends) > prune_at[0]:  # release sent tensors whose transfer is over (NCCL)
                pending_sends[:] = [r for r in pending_sends if not r.done()]
                prune_at[0] = max(32, 2 * len(pending_sends))  # amortised: gloo only knows after wait()

        ahead, all_recvs, plan = self.recv_ahead, self._recvs, self._batch_plan
        n_recvs = len(all_recvs)
        posted = [0, 0]  # receives posted so far, batches met so far
        buffer_end = [0]  # buffer bytes of the receives before each one, and in all
        if ahead != 0:
            for op in all_recvs:
                spec = boundary_spec(*op[4])
                buffer_end.append(buffer_end[-1] + math.prod(spec.shape) * spec.dtype.itemsize)

        def post_recvs(done: int) -> None:
            """Post the receives the limits allow ahead of the first `done` ones (which are due now)."""
            upto = n_recvs if ahead is None else min(n_recvs, done + ahead)
            fits = bisect_right(buffer_end, buffer_end[done] + self.recv_ahead_bytes) - 1
            upto = max(done, min(upto, fits))
            if upto > posted[0]:
                post(all_recvs[posted[0] : upto])
                posted[0] = upto

        def run_batch(batch: tuple[tuple, ...]) -> None:
            if ahead == 0:
                post(batch)
                return
            sends, recv_end = plan[posted[1]]
            posted[1] += 1
            if sends:
                post(sends)
            post_recvs(recv_end)

        if sync_start and p2p is not None:
            p2p.barrier()
        if meter is not None:
            meter.reset_peak()
        clock.start()
        mem_start = meter.current if meter is not None else 0
        label = "step start"
        try:
            if ahead != 0:
                post_recvs(0)
            for op, item, label in self.program:  # noqa: B007 (label names the failing node)
                if op == _COMPUTE:
                    node: Node = item
                    kind = node.kind
                    # wait for inputs outside the timed interval
                    if kind is _F:
                        key = (node.microbatch, node.stage)
                        if type(fwd_in.get(key)) is Request:
                            fwd_in[key] = take(fwd_in, key)  # type: ignore[assignment]
                        start = clock.mark()
                        forward(node)
                    elif kind is _W:
                        start = clock.mark()
                        ex.backward_weight(cells.pop((node.microbatch, node.stage)))
                    elif kind is _FB:
                        fpart, bpart = node.parts
                        fkey, bkey = (fpart.microbatch, fpart.stage), (bpart.microbatch, bpart.stage)
                        if type(fwd_in.get(fkey)) is Request:
                            fwd_in[fkey] = take(fwd_in, fkey)  # type: ignore[assignment]
                        if type(bwd_in.get(bkey)) is Request:
                            bwd_in[bkey] = take(bwd_in, bkey)  # type: ignore[assignment]
                        start = clock.mark()
                        if run_fb is None:
                            forward(fpart)
                            backward(bpart)
                        else:
                            run_fb(partial(forward, fpart), partial(backward, bpart))
                    else:
                        key = (node.microbatch, node.stage)
                        if type(bwd_in.get(key)) is Request:
                            bwd_in[key] = take(bwd_in, key)  # type: ignore[assignment]
                        start = clock.mark()
                        backward(node)
                    end = clock.mark()
                    marks.append((node, start, end))
                    if meter is not None:
                        mem_marks.append((end, meter.current))
                elif op == _BATCH:
                    run_batch(item)
                else:
                    node = item
                    cell = cells[(node.microbatch, node.stage)]
                    if meter is not None and cell.saved is not None:
                        if node.kind is _OFFLOAD:
                            meter.offload(cell.saved, device)
                        else:
                            meter.reload(cell.saved, device)
                if observer is not None:
                    observer(item if op != _BATCH else self._batch_node(item[-1]))
            label = "step end (waiting for sends)"
            for request in pending_sends:
                request.wait()
            pending_sends.clear()
            left = [
                f"{what} {k}"
                for what, d in (
                    ("input", fwd_in),
                    ("grad", bwd_in),
                    ("output", out_f),
                    ("input grad", out_b),
                    ("cell", cells),
                )
                for k in d
            ]
            if left:
                raise RuntimeError(f"state left after the last node: {', '.join(left[:6])}")
        except NodeFailure as failure:
            self.failed = str(failure)
            raise
        except Exception as err:
            failure = NodeFailure(rank, label, err)
            self.failed = str(failure)
            raise failure from err
        clock.finish()
        ms = clock.ms
        intervals = []
        for node, start, end in marks:
            s = node.stage
            back = None
            if node.kind is _FB:
                bp = node.parts[1]
                back = (bp.kind.value, bp.microbatch, bp.stage, chunk[bp.stage])
            iv = Interval(node.kind.value, node.microbatch, s, chunk[s], ms(start), ms(end), back)
            intervals.append(iv)
        memory = [(0.0, float(mem_start))] + [(ms(t), float(level)) for t, level in mem_marks]
        return RankStep(
            rank,
            intervals,
            memory,
            meter.peak if meter is not None else 0,
            [(k, mb, s, peer, ms(t)) for k, mb, s, peer, t in sends],
            [(k, mb, s, peer, ms(t)) for k, mb, s, peer, t in recvs],
            clock.origin_ns,
            _HOST,
        )
