"""ScheduleRunner: execute one rank's node list of any valid schedule table.

At construction the rank's nodes are compiled into a program of `Instruction`s, everything that does not
change between steps resolved once: the handler of each node kind (the `HANDLERS` table, checked against
`schedule/semantics.py` so a node kind without a handler fails at import), the (microbatch, stage) keys,
where each input comes from and where each output goes (this rank or a SEND), and the comm nodes standing
between two compute nodes grouped into one batch of typed `CommOp`s, posted right before the next compute
node (p2p.py). A step is then one loop over the program: `instruction.run(state, instruction)`.

Per-(microbatch, stage) state lives in a `StepState` made by each `step()` and is popped by the node that
needs it last, so a step leaves nothing behind; a leftover means the table or the executor is broken and is
reported. OFFLOAD/RELOAD move a cell's saved activations (memory.py).

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
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from primuspp.errors import PrimusppError
from primuspp.runtime.executor import Cell, Executor
from primuspp.runtime.memory import ActivationMeter, SavedRecord
from primuspp.runtime.p2p import P2P, Message, Request
from primuspp.runtime.timing import clock_for
from primuspp.runtime.wgrad import WeightGradStore, begin_recording, end_recording
from primuspp.schedule import semantics as sem
from primuspp.schedule.nodes import Node, NodeKind, format_node
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from primuspp.trace.timeline import Interval

_HOST = socket.gethostname()


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
    #: host wall time of the whole `step()` after the start barrier: every node, the wait for the last
    #: sends and (on a device) for the device to finish; the intervals' span is the pipeline part of it
    wall_ms: float = 0.0


# -- the program -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommOp(Message):
    """One SEND/RECV node of a batch, resolved at construction.

    `forward`: it carries an activation (F direction), else an input gradient. `key`: the (microbatch,
    stage) slot on this rank (the output a send takes, the input a receive fills). `boundary`: the (mb,
    stage) whose `boundary_spec` gives the tensor. `record`: (kind "F"/"B", microbatch, stage, peer) for the
    RankStep's send log."""

    forward: bool = True
    key: tuple[int, int] = (0, 0)
    boundary: tuple[int, int] = (0, 0)
    node: Node | None = None
    record: tuple[str, int, int, int] = ("F", 0, 0, 0)


#: what a simple (non-composite) kind does, given the step state and the resolved part: returns the tensor
#: it produces for another stage (an activation or an input gradient), or None
Body = Callable[["StepState", "Part"], "torch.Tensor | None"]


@dataclass(eq=False, slots=True)
class Part:
    """One simple node (or one part of a composite node), resolved at construction."""

    body: Body
    kind: NodeKind
    microbatch: int
    stage: int
    key: tuple[int, int]
    first: bool  # the stage starts the microbatch's route (no input from another stage)
    last: bool  # the stage ends it (the loss is computed here)
    keep: bool  # F only: the cell is kept for a backward on this rank
    #: 0: no input to wait for; 1: an activation (fwd_in); 2: an output gradient (bwd_in)
    wait: int = 0
    #: (kind "F"/"B", microbatch, producer stage, peer rank) logged when the wait resolves a receive
    recv: tuple[str, int, int, int] | None = None
    #: where the produced tensor goes: 0 nowhere, 1 this rank (the consumer's input slot), 2 a SEND
    out: int = 0
    out_forward: bool = True  # an activation (fwd_in / out_f), else an input gradient (bwd_in / out_b)
    out_key: tuple[int, int] = (0, 0)  # the slot it goes to
    missing: str = ""  # the error when the executor returned nothing to hand on


@dataclass(eq=False, slots=True)
class Instruction:
    """One entry of a rank's program: `run(state, self)` executes it."""

    run: Callable[[StepState, Instruction], None]
    node: Node  # the node (a batch: its last comm node), for the observer
    label: str  # names the node in a NodeFailure
    parts: tuple[Part, ...] = ()
    #: a comm batch: its ops; with receives posted ahead: its sends and the count of receives due by its end
    ops: tuple[CommOp, ...] = ()
    sends: tuple[CommOp, ...] = ()
    recv_end: int = 0
    #: compute: the interval's (kind, microbatch, stage, chunk) and an FB's backward part
    interval: tuple[str, int, int, int] = ("F", 0, 0, 0)
    back: tuple[str, int, int, int] | None = None


class StepState:
    """Everything one `step()` touches: the executor, p2p, clock, the per-(microbatch, stage) slots and the
    measurements. `ins[d]` / `outs[d]` are the input / output slots by direction (1: activations, 0:
    gradients)."""

    __slots__ = (
        "ahead",
        "all_recvs",
        "boundary_spec",
        "buffer_end",
        "bwd_in",
        "cells",
        "device",
        "ex",
        "fwd_in",
        "ins",
        "mark",
        "marks",
        "mem_marks",
        "meter",
        "out_b",
        "out_f",
        "outs",
        "p2p",
        "pending_sends",
        "posted",
        "prune_at",
        "recv_ahead_bytes",
        "recv_specs",
        "recvs",
        "run_fb",
        "sends",
    )

    def __init__(
        self, runner: ScheduleRunner, mark: Callable[[], Any], meter: ActivationMeter | None
    ) -> None:
        ex = runner.executor
        self.ex, self.p2p, self.meter, self.mark = ex, runner.p2p, meter, mark
        self.device = ex.device
        self.boundary_spec = ex.boundary_spec
        #: an executor may run an FB node's two parts at once: run_fb(run_f, run_b) (megatron: overlap.py)
        self.run_fb = getattr(ex, "run_fb", None)
        self.fwd_in: dict[tuple[int, int], torch.Tensor | Request] = {}
        self.bwd_in: dict[tuple[int, int], torch.Tensor | Request] = {}
        self.out_f: dict[tuple[int, int], torch.Tensor] = {}
        self.out_b: dict[tuple[int, int], torch.Tensor] = {}
        self.ins = (self.bwd_in, self.fwd_in)
        self.outs = (self.out_b, self.out_f)
        self.cells: dict[tuple[int, int], Cell] = {}
        self.pending_sends: list[Request] = []
        self.prune_at = 32
        self.marks: list[tuple[Instruction, Any, Any]] = []
        self.mem_marks: list[tuple[Any, int]] = []
        self.sends: list[tuple[tuple[str, int, int, int], Any]] = []
        self.recvs: list[tuple[tuple[str, int, int, int], Any]] = []
        self.ahead, self.all_recvs = runner.recv_ahead, runner._recvs
        self.recv_ahead_bytes = runner.recv_ahead_bytes
        self.posted = 0  # receives posted so far (receives ahead)
        self.buffer_end = [0]  # receive buffer bytes before each receive, and in all
        #: the boundary spec of each receive (receives ahead: asked once per step, for the budget and the
        #: buffer)
        self.recv_specs: list[Any] = []
        if self.ahead != 0:
            total = 0
            for op in self.all_recvs:
                spec = self.boundary_spec(*op.boundary)
                self.recv_specs.append(spec)
                total += math.prod(spec.shape) * spec.dtype.itemsize
                self.buffer_end.append(total)

    def leftovers(self) -> list[str]:
        if not (self.fwd_in or self.bwd_in or self.out_f or self.out_b or self.cells):
            return []
        return [
            f"{what} {k}"
            for what, d in (
                ("input", self.fwd_in),
                ("grad", self.bwd_in),
                ("output", self.out_f),
                ("input grad", self.out_b),
                ("cell", self.cells),
            )
            for k in d
        ]


# -- handlers ---------------------------------------------------------------------------------------------


def _resolve(st: StepState, part: Part) -> None:
    """Wait for the part's received input (outside the timed interval) and put the tensor in its slot."""
    slots = st.ins[part.wait == 1]
    value = slots.get(part.key)
    if type(value) is Request:
        try:
            slots[part.key] = value.wait()
        except Exception as err:
            raise RuntimeError(f"waiting for {value.label}: {err}") from err
        st.recvs.append((part.recv, st.mark()))  # type: ignore[arg-type]


def _hand_on(st: StepState, part: Part, y: torch.Tensor | None) -> None:
    """Put a produced tensor where its consumer takes it: this rank's input slot, or the SEND's."""
    if y is None:
        raise RuntimeError(part.missing)
    if part.out == 1:
        st.ins[part.out_forward][part.out_key] = y.detach() if part.out_forward else y
    else:
        st.outs[part.out_forward][part.key] = y


def _forward(st: StepState, part: Part) -> torch.Tensor | None:
    x = st.fwd_in.pop(part.key, None)
    meter = st.meter
    store = WeightGradStore(meter)
    cell = Cell(part.microbatch, part.stage, part.first, part.last, store)
    token = begin_recording(store)
    try:
        if meter is not None:
            cell.saved = SavedRecord()  # what an OFFLOAD may move
            meter.begin_saving(cell.saved)
            try:
                y = st.ex.forward(cell, x)
            finally:
                meter.end_saving()
        else:
            y = st.ex.forward(cell, x)
    finally:
        end_recording(token)
    if part.keep:
        st.cells[part.key] = cell
    return y


def _backward_input(st: StepState, part: Part) -> torch.Tensor | None:
    g = st.bwd_in.pop(part.key, None)
    cell = st.cells[part.key]
    cell.wgrad.defer = True
    gin = st.ex.backward_input(cell, g)
    cell.wgrad.defer = False
    return gin


def _backward_full(st: StepState, part: Part) -> torch.Tensor | None:
    g = st.bwd_in.pop(part.key, None)
    return st.ex.backward_full(st.cells.pop(part.key), g)


def _backward_weight(st: StepState, part: Part) -> None:
    st.ex.backward_weight(st.cells.pop(part.key))


def _offload(st: StepState, part: Part) -> None:
    cell = st.cells[part.key]
    if st.meter is not None and cell.saved is not None:
        st.meter.offload(cell.saved, st.device)


def _reload(st: StepState, part: Part) -> None:
    cell = st.cells[part.key]
    if st.meter is not None and cell.saved is not None:
        st.meter.reload(cell.saved, st.device)


#: node kind -> what it does. Composite kinds (FB) have no entry: they run their parts' handlers; comm kinds
#: have none either: they become the `CommOp`s of a batch. `_check_handlers` holds this table to
#: `semantics.SEMANTICS` at import, so a node kind added there without a handler here fails at once.
HANDLERS: dict[NodeKind, Body] = {
    NodeKind.F: _forward,
    NodeKind.B: _backward_input,
    NodeKind.BW: _backward_full,
    NodeKind.W: _backward_weight,
    NodeKind.OFFLOAD: _offload,
    NodeKind.RELOAD: _reload,
}
#: a comm kind's datum: (direction (True: activation), this rank produced it (SEND))
_CARRIES = {
    sem.ACT: (True, True),
    sem.ACT_PREV: (True, False),
    sem.GRAD: (False, True),
    sem.GRAD_NEXT: (False, False),
}


def _check_handlers() -> None:
    missing = []
    for kind, row in sem.SEMANTICS.items():
        if row.role == "comm":
            if row.carries not in _CARRIES:
                missing.append(f"{kind.name} (carries {row.carries!r})")
        elif row.parts:
            missing += [
                f"{k.name} (part of {kind.name})" for ks in row.parts for k in ks if k not in HANDLERS
            ]
        elif kind not in HANDLERS:
            missing.append(kind.name)
    if missing:
        raise RuntimeError(f"runtime/runner.py has no handler for node kind(s) {', '.join(missing)}")


_check_handlers()


def _run_compute(st: StepState, ins: Instruction) -> None:
    """A compute node: wait for every part's input, then run the parts (a composite node, FB, has two) in
    order as one timed interval."""
    for part in ins.parts:
        if part.wait:
            _resolve(st, part)
    mark = st.mark
    start = mark()
    if st.run_fb is not None and len(ins.parts) == 2:
        # the executor runs an FB node's F and B parts at once (megatron: overlap.py)
        st.run_fb(partial(_run_part, st, ins.parts[0]), partial(_run_part, st, ins.parts[1]))
    else:
        for part in ins.parts:
            _run_part(st, part)
    end = mark()
    st.marks.append((ins, start, end))
    if st.meter is not None:
        st.mem_marks.append((end, st.meter.current))


def _run_part(st: StepState, part: Part) -> None:
    y = part.body(st, part)
    if part.out:
        _hand_on(st, part, y)


def _run_memory(st: StepState, ins: Instruction) -> None:
    part = ins.parts[0]
    part.body(st, part)


def _post(st: StepState, ops: tuple[CommOp, ...] | list[CommOp], specs: list[Any] | None = None) -> None:
    """Post one batch: sends take their slot's tensor, receives get a fresh buffer from `boundary_spec`
    (`specs`: the receives' specs, in order, where already asked)."""
    tensors = []
    spec_of, mark, sends = st.boundary_spec, st.mark, st.sends
    i = 0
    for op in ops:
        if op.send:
            t = _send_tensor(st, op)
            sends.append((op.record, mark()))
        else:
            spec = spec_of(*op.boundary) if specs is None else specs[i]
            t = torch.empty(spec.shape, dtype=spec.dtype, device=st.device)
            i += 1
        tensors.append(t)
    requests = st.p2p.post(ops, tensors)  # type: ignore[union-attr]
    ins, pending = st.ins, st.pending_sends
    for op, request in zip(ops, requests, strict=True):
        if op.send:
            pending.append(request)
        else:
            ins[op.forward][op.key] = request
    if len(pending) > st.prune_at:  # release sent tensors whose transfer is over (NCCL)
        pending[:] = [r for r in pending if not r.done()]
        st.prune_at = max(32, 2 * len(pending))  # amortised: gloo only knows after wait()


def _send_tensor(st: StepState, op: CommOp) -> torch.Tensor:
    """The tensor a send takes from its slot, checked against `boundary_spec`, detached and contiguous."""
    t = st.outs[op.forward].pop(op.key)
    spec = st.boundary_spec(*op.boundary)
    if (t.shape != spec.shape and tuple(t.shape) != tuple(spec.shape)) or t.dtype != spec.dtype:
        raise RuntimeError(
            f"{op.label}: tensor is {tuple(t.shape)} {t.dtype} but the executor's "
            f"boundary_spec says {tuple(spec.shape)} {spec.dtype}"
        )
    if t.requires_grad:
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t


def _post_recvs(st: StepState, done: int) -> None:
    """Post the receives the limits allow ahead of the first `done` ones (which are due now)."""
    n = len(st.all_recvs)
    if st.posted == n:  # all posted already (the default on gloo: at the step start)
        return
    upto = n if st.ahead is None else min(n, done + st.ahead)
    fits = bisect_right(st.buffer_end, st.buffer_end[done] + st.recv_ahead_bytes) - 1
    upto = max(done, min(upto, fits))
    if upto > st.posted:
        _post(st, st.all_recvs[st.posted : upto], st.recv_specs[st.posted : upto])
        st.posted = upto


def _run_batch(st: StepState, ins: Instruction) -> None:
    """A comm batch at its table position (every op posted now)."""
    _post(st, ins.ops)


def _run_batch_ahead(st: StepState, ins: Instruction) -> None:
    """A comm batch when receives run ahead: its sends now, receives up to the limits."""
    if ins.sends:
        _post(st, ins.sends)
    if st.posted != len(st.all_recvs):
        _post_recvs(st, ins.recv_end)


# -- the runner -------------------------------------------------------------------------------------------


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
        if recv_ahead is not None and recv_ahead < 0:
            raise ValueError(f"recv_ahead must be >= 0 or None, got {recv_ahead}")
        #: receives posted ahead of their batch (0: every op at its table position), and their byte budget
        self.recv_ahead = recv_ahead if p2p is not None and p2p.independent_ops else 0
        self.recv_ahead_bytes = recv_ahead_bytes
        self.program: list[Instruction] = self._compile(table.ranks[rank])
        #: every receive of the step, in program order (posted ahead from this list)
        self._recvs = tuple(op for ins in self.program for op in ins.ops if not op.send)
        if p2p is None and any(ins.ops for ins in self.program):
            raise ValueError(f"rank {rank}: the table has p2p nodes here but no P2P was given")

    # -- compilation ------------------------------------------------------------------------------------

    def _compile(self, nodes: tuple[Node, ...]) -> list[Instruction]:
        """The program: one instruction per compute or memory node, comm nodes grouped into a batch posted
        right before the next compute node (or at the end)."""
        # (microbatch, stage) whose backward (a kind consuming the output grad) runs here; a forward-only
        # table (evaluation) keeps no cells
        backward = {
            (p.microbatch, p.stage)
            for node in nodes
            for p in sem.simple_parts(node)
            if sem.GRAD_NEXT in sem.SEMANTICS[p.kind].consumes
        }
        program: list[Instruction] = []
        batch: list[CommOp] = []
        recvs = 0

        def flush() -> None:
            nonlocal recvs
            ops = tuple(batch)
            recvs += sum(1 for op in ops if not op.send)
            run = _run_batch if self.recv_ahead == 0 else _run_batch_ahead
            label = "batch [" + " ".join(op.label for op in ops) + "]"
            sends = tuple(op for op in ops if op.send)
            program.append(Instruction(run, ops[-1].node, label, ops=ops, sends=sends, recv_end=recvs))  # type: ignore[arg-type]
            batch.clear()

        chunk = self.table.placement.stage_chunk
        for node in nodes:
            row = sem.SEMANTICS[node.kind]
            if row.role == "comm":
                batch.append(self._comm_op(node))
                continue
            if row.role == "compute" and batch:
                flush()
            parts = tuple(self._part(p, backward) for p in sem.simple_parts(node))
            if row.role != "compute":
                program.append(Instruction(_run_memory, node, format_node(node), parts))
                continue
            back = None
            if row.parts:
                bp = node.parts[-1]
                back = (bp.kind.value, bp.microbatch, bp.stage, chunk[bp.stage])
            program.append(
                Instruction(
                    _run_compute,
                    node,
                    format_node(node),
                    parts,
                    interval=(node.kind.value, node.microbatch, node.stage, chunk[node.stage]),
                    back=back,
                )
            )
        if batch:
            flush()
        return program

    def _comm_op(self, node: Node) -> CommOp:
        forward, produced = _CARRIES[sem.SEMANTICS[node.kind].carries]  # type: ignore[index]
        mb, s = node.microbatch, node.stage
        prv = self.table.placement.prev_stage
        # the tensor is the output of s (an activation sent, an output gradient received) or of prev[s]
        boundary = (mb, s if forward == produced else prv[s])
        record = ("F" if forward else "B", mb, s, node.peer)
        return CommOp(
            node.kind.is_send, node.peer, format_node(node), forward, (mb, s), boundary, node, record
        )

    def _part(self, node: Node, backward: set[tuple[int, int]]) -> Part:
        pl = self.table.placement
        srank = pl.stage_rank
        mb, s = node.microbatch, node.stage
        prv, nxt = pl.prev_stage[s], pl.next_stage[s]
        row = sem.SEMANTICS[node.kind]
        part = Part(HANDLERS[node.kind], node.kind, mb, s, (mb, s), prv < 0, nxt < 0, (mb, s) in backward)
        if sem.ACT_PREV in row.consumes and prv >= 0:
            part.wait, part.recv = 1, ("F", mb, prv, srank[prv])
        elif sem.GRAD_NEXT in row.consumes and nxt >= 0:
            part.wait, part.recv = 2, ("B", mb, nxt, srank[nxt])
        for what in row.produces:  # ACT goes to the next stage, GRAD to the previous one
            q = sem.consumer_stage(what, s, pl)
            if q < 0:
                continue
            part.out = 1 if srank[q] == self.rank else 2
            part.out_forward = what == sem.ACT
            part.out_key = (mb, q)
            part.missing = (
                f"the executor returned no output for stage {s}"
                if what == sem.ACT
                else f"the executor returned no input gradient for stage {s}"
            )
        return part

    # -- one step ---------------------------------------------------------------------------------------

    def step(self, sync_start: bool = True) -> RankStep:
        """Run one step. With `sync_start` the ranks meet at a barrier first (their clocks then agree).

        After a step failed the runner refuses to run another: receives it posted may still be pending on
        the transport and would take the next step's messages."""
        if self.failed is not None:
            raise RuntimeError(
                f"rank {self.rank}: this runner failed ({self.failed}); its posted receives may still be "
                "pending, so it cannot run another step (start a new process group)"
            )
        meter, p2p, observer = self.meter, self.p2p, self.observer
        clock = clock_for(self.executor.device)
        st = StepState(self, clock.mark, meter)
        if sync_start and p2p is not None:
            p2p.barrier()
        if meter is not None:
            meter.reset_peak()
        wall0 = time.perf_counter_ns()
        clock.start()
        mem_start = meter.current if meter is not None else 0
        label = "step start"
        try:
            if st.ahead != 0:
                _post_recvs(st, 0)
            for ins in self.program:
                label = ins.label
                ins.run(st, ins)
                if observer is not None:
                    observer(ins.node)
            label = "step end (waiting for sends)"
            for request in st.pending_sends:
                request.wait()
            st.pending_sends.clear()
            left = st.leftovers()
            if left:
                raise RuntimeError(f"state left after the last node: {', '.join(left[:6])}")
        except NodeFailure as failure:
            self.failed = str(failure)
            raise
        except Exception as err:
            failure = NodeFailure(self.rank, label, err)
            self.failed = str(failure)
            raise failure from err
        clock.finish()
        wall_ms = (time.perf_counter_ns() - wall0) / 1e6
        marks, mem, sent, got = st.marks, st.mem_marks, st.sends, st.recvs
        # every mark converted in one call: starts and ends, memory samples, sends, receives
        times = clock.ms_all(
            [t for _, a, b in marks for t in (a, b)]
            + [t for t, _ in mem]
            + [t for _, t in sent]
            + [t for _, t in got]
        )
        n, k = 2 * len(marks), 2 * len(marks) + len(mem)
        intervals = [
            Interval(*ins.interval, times[2 * i], times[2 * i + 1], ins.back)  # type: ignore[misc]
            for i, (ins, _, _) in enumerate(marks)
        ]
        memory = [(0.0, float(mem_start))] + [
            (t, float(level)) for t, (_, level) in zip(times[n:k], mem, strict=True)
        ]
        j = k + len(sent)
        sent_ms = [(*rec, t) for (rec, _), t in zip(sent, times[k:j], strict=True)]  # type: ignore[misc]
        got_ms = [(*rec, t) for (rec, _), t in zip(got, times[j:], strict=True)]  # type: ignore[misc]
        return RankStep(
            self.rank,
            intervals,
            memory,
            meter.peak if meter is not None else 0,
            sent_ms,  # type: ignore[arg-type]
            got_ms,  # type: ignore[arg-type]
            clock.origin_ns,
            _HOST,
            wall_ms,
        )
