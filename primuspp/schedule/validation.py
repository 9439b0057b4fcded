"""Validation of a schedule table: structure, completeness, local order, FIFO pairing, termination.

Termination is checked under rendezvous semantics: the comm nodes standing between two compute nodes form
one batch, posted together as `batch_isend_irecv` does (memory nodes among them do not split it), and a
batch completes only when every peer has posted the batch holding the matching op. Messages pair by order
per (sender, receiver) pair, as on NCCL, which ignores tags. Every failure names the rank and the node; a
deadlock names the waiting cycle.

One pass over each rank's list does the local checks with integer keys (key = mb * stages + stage); the
messages it collects then feed the FIFO and termination checks.
"""

from __future__ import annotations

from primuspp.errors import ValidationError
from primuspp.schedule import compact_validation
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.semantics import ACT, ACT_PREV, GRAD, GRAD_NEXT, OWN_GRAD, SAVED, SEMANTICS
from primuspp.schedule.table import ScheduleTable

_F, _B, _W, _BW, _FB = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW, NodeKind.FB
_SEND_F, _RECV_F, _SEND_B, _RECV_B = NodeKind.SEND_F, NodeKind.RECV_F, NodeKind.SEND_B, NodeKind.RECV_B
_OFFLOAD, _RELOAD = NodeKind.OFFLOAD, NodeKind.RELOAD

# The per-kind checks below are written out (each with its own message). They check what the semantics
# table says each kind consumes, produces and carries; a table that says anything else (a new kind, a
# changed rule) stops the import here, naming the kind, rather than being validated by the wrong rules.
_CHECKED = {
    _F: ("compute", (ACT_PREV,), (ACT,), None, ()),
    _B: ("compute", (SAVED, GRAD_NEXT), (GRAD,), None, ()),
    _BW: ("compute", (SAVED, GRAD_NEXT), (GRAD,), None, ()),
    _W: ("compute", (OWN_GRAD,), (), None, ()),
    _FB: ("compute", (), (), None, ((_F,), (_B, _BW))),
    _SEND_F: ("comm", (), (), ACT, ()),
    _RECV_F: ("comm", (), (), ACT_PREV, ()),
    _SEND_B: ("comm", (), (), GRAD, ()),
    _RECV_B: ("comm", (), (), GRAD_NEXT, ()),
    _OFFLOAD: ("memory", (SAVED,), (), None, ()),
    _RELOAD: ("memory", (), (), None, ()),
}
for _kind, _sem in SEMANTICS.items():
    if _CHECKED.get(_kind) != (_sem.role, _sem.consumes, _sem.produces, _sem.carries, _sem.parts):
        raise ImportError(
            f"schedule/validation.py does not check node kind {_kind.text} as schedule/semantics.py "
            "describes it: teach its per-kind checks the new rule"
        )


def _where(rank: int, pos: int, node: Node) -> str:
    return f"rank {rank}: {node} (position {pos})"


def validate(table: ScheduleTable) -> None:
    """Raise ValidationError naming the first problem found; return None for a valid table.

    A table from `lower_comms` (compact storage) is first checked as array passes
    (`compact_validation.valid`); only if that cannot prove it valid does the walk below run, which finds
    and names the first problem. `validate_reference` is the walk alone."""
    if compact_validation.valid(table):
        return
    validate_reference(table)


def validate_reference(table: ScheduleTable) -> None:
    """The one-pass walk over the nodes: raise ValidationError naming the first problem found."""
    walk = _Walk(table)
    for r in range(len(table.ranks)):
        walk.rank(r)
    walk.check_complete()
    walk.check_fifo()
    walk.check_termination()


class _Walk:
    """State of the single pass. Messages are ints: 2 * key(producer mb, producer stage) + (0 F | 1 grad)."""

    def __init__(self, table: ScheduleTable) -> None:
        pl, m = table.placement, table.num_microbatches
        if m < 1:
            raise ValidationError(f"micro_batches must be >= 1 (got {m})")
        if len(table.ranks) != pl.pp:
            raise ValidationError(f"table has {len(table.ranks)} rank lists but placement has pp={pl.pp}")
        self.table, self.pl, self.m = table, pl, m
        self.n_stages = n = pl.num_stages
        size = m * n
        self.cnt_f, self.cnt_b, self.cnt_w, self.cnt_bw = (bytearray(size) for _ in range(4))
        self.fdone, self.gdone, self.bdone = bytearray(size), bytearray(size), bytearray(size)
        self.frecv, self.grecv = bytearray(size), bytearray(size)  # indexed by the producer's key
        self.sent = bytearray(2 * size)
        self.sends: list[dict[int, list[int]]] = []  # per rank: peer -> messages sent, in order
        self.recvs: list[dict[int, list[int]]] = []  # per rank: peer -> messages received, in order
        self.send_batch = [-1] * (2 * size)
        self.recv_batch = [-1] * (2 * size)
        self.batches: list[list[list[int]]] = []  # per rank: batches of ops (2 * msg + is_send)
        self.offloaded: set[tuple[int, int]] = set()
        routes = pl.routes
        self.route_member = (
            None if len(routes) == 1 else [[s in set(route) for s in range(n)] for route in routes]
        )

    # -- per node -------------------------------------------------------------------------------------

    def _locate(self, r: int, pos: int, node: Node, part: Node) -> int:
        mb, s = part.microbatch, part.stage
        if not 0 <= mb < self.m:
            raise ValidationError(f"{_where(r, pos, node)}: microbatch out of range 0..{self.m - 1}")
        if not 0 <= s < self.n_stages:
            raise ValidationError(f"{_where(r, pos, node)}: stage out of range 0..{self.n_stages - 1}")
        if self.pl.stage_rank[s] != r:
            raise ValidationError(f"{_where(r, pos, node)}: stage {s} lives on rank {self.pl.stage_rank[s]}")
        rm = self.route_member
        if rm is not None and not rm[mb % len(rm)][s]:
            raise ValidationError(f"{_where(r, pos, node)}: microbatch {mb} does not visit stage {s}")
        return mb * self.n_stages + s

    def rank(self, r: int) -> None:
        pl, n = self.pl, self.n_stages
        nxt, prv, srank = pl.next_stage, pl.prev_stage, pl.stage_rank
        fdone, gdone, bdone, frecv, grecv, sent = (
            self.fdone,
            self.gdone,
            self.bdone,
            self.frecv,
            self.grecv,
            self.sent,
        )
        cnt_f, cnt_w = self.cnt_f, self.cnt_w
        send_batch, recv_batch = self.send_batch, self.recv_batch
        sends_to: dict[int, list[int]] = {}
        recvs_from: dict[int, list[int]] = {}
        self.sends.append(sends_to)
        self.recvs.append(recvs_from)
        batches: list[list[int]] = []
        current: list[int] | None = None
        locate, route_member, m = self._locate, self.route_member, self.m
        for pos, node in enumerate(self.table.ranks[r]):
            kind = node.kind
            if kind.is_comm:
                mb, s, peer = node.microbatch, node.stage, node.peer
                if 0 <= mb < m and 0 <= s < n and srank[s] == r and route_member is None:
                    key = mb * n + s
                else:
                    key = locate(r, pos, node, node)
                is_send = kind.is_send
                if kind is _SEND_F:
                    q = nxt[s]
                    if not fdone[key]:
                        raise ValidationError(f"{_where(r, pos, node)} runs before F{node.microbatch}.{s}")
                    msg = 2 * key
                elif kind is _SEND_B:
                    q = prv[s]
                    if not gdone[key]:
                        raise ValidationError(
                            f"{_where(r, pos, node)} runs before the backward of {node.microbatch}.{s}"
                        )
                    msg = 2 * key + 1
                elif kind is _RECV_F:
                    q = prv[s]
                    msg = 2 * (key - s + q)
                else:
                    q = nxt[s]
                    msg = 2 * (key - s + q) + 1
                if q < 0 or peer is None or srank[q] != peer or peer == r:
                    what = {
                        _SEND_F: "output goes to",
                        _SEND_B: "input grad goes to",
                        _RECV_F: "input comes from",
                        _RECV_B: "output grad comes from",
                    }[kind]
                    raise ValidationError(f"{_where(r, pos, node)}: stage {s}'s {what} another rank")
                if is_send:
                    if sent[msg]:
                        raise ValidationError(f"{_where(r, pos, node)}: sent twice")
                    sent[msg] = 1
                    send_batch[msg] = len(batches)
                    lst = sends_to.get(peer)
                    if lst is None:
                        lst = sends_to[peer] = []
                else:
                    flag = frecv if kind is _RECV_F else grecv
                    if flag[msg >> 1]:
                        raise ValidationError(f"{_where(r, pos, node)}: received twice")
                    flag[msg >> 1] = 1
                    recv_batch[msg] = len(batches)
                    lst = recvs_from.get(peer)
                    if lst is None:
                        lst = recvs_from[peer] = []
                lst.append(msg)
                if current is None:
                    current = []
                current.append(2 * msg + is_send)
                continue
            if current is not None and kind.is_compute:
                batches.append(current)
                current = None
            if kind is _F:
                mb, s = node.microbatch, node.stage
                if 0 <= mb < m and 0 <= s < n and srank[s] == r and route_member is None:
                    key = mb * n + s
                else:
                    key = locate(r, pos, node, node)
                p = prv[s]
                if p >= 0:
                    pkey = key - s + p
                    if srank[p] == r:
                        if not fdone[pkey]:
                            raise ValidationError(
                                f"{_where(r, pos, node)} runs before F{node.microbatch}.{p}"
                            )
                    elif not frecv[pkey]:
                        raise ValidationError(
                            f"{_where(r, pos, node)} runs before RECV_F{node.microbatch}.{s}<{srank[p]}"
                        )
                if cnt_f[key]:
                    raise ValidationError(f"{_where(r, pos, node)}: F{node.microbatch}.{s} appears twice")
                cnt_f[key] = 1
                fdone[key] = 1
            elif kind is _B or kind is _BW:
                key = locate(r, pos, node, node)
                self._backward(r, pos, node, node, key)
            elif kind is _W:
                key = locate(r, pos, node, node)
                if not bdone[key]:
                    raise ValidationError(
                        f"{_where(r, pos, node)} runs before B{node.microbatch}.{node.stage}"
                    )
                if cnt_w[key]:
                    raise ValidationError(f"{_where(r, pos, node)}: appears twice")
                cnt_w[key] = 1
            elif kind is _FB:
                self._fused(r, pos, node)
            else:
                self._memory(r, pos, node)
        if current is not None:
            batches.append(current)
        self.batches.append(batches)
        if self.offloaded:
            mb, s = min(self.offloaded)
            raise ValidationError(f"rank {r}: OFFLOAD{mb}.{s} is never reloaded")

    def _backward(self, r: int, pos: int, node: Node, part: Node, key: int) -> None:
        pl = self.pl
        s, mb = part.stage, part.microbatch
        if not self.fdone[key]:
            raise ValidationError(f"{_where(r, pos, node)} runs before F{mb}.{s}")
        if self.offloaded and (mb, s) in self.offloaded:
            raise ValidationError(f"{_where(r, pos, node)} runs while {mb}.{s} is offloaded (no RELOAD yet)")
        q = pl.next_stage[s]
        if q >= 0:
            qkey = key - s + q
            if pl.stage_rank[q] == r:
                if not self.gdone[qkey]:
                    raise ValidationError(f"{_where(r, pos, node)} runs before the backward of {mb}.{q}")
            elif not self.grecv[qkey]:
                raise ValidationError(f"{_where(r, pos, node)} runs before RECV_B{mb}.{s}<{pl.stage_rank[q]}")
        c = self.cnt_b if part.kind is _B else self.cnt_bw
        if c[key]:
            raise ValidationError(f"{_where(r, pos, node)}: {part} appears twice")
        c[key] = 1
        self.gdone[key] = 1
        if part.kind is _B:
            self.bdone[key] = 1

    def _fused(self, r: int, pos: int, node: Node) -> None:
        fpart, bpart = node.parts
        fkey = self._locate(r, pos, node, fpart)
        bkey = self._locate(r, pos, node, bpart)
        s, p = fpart.stage, self.pl.prev_stage[fpart.stage]
        if p >= 0:
            pkey = fkey - s + p
            ok = self.fdone[pkey] if self.pl.stage_rank[p] == r else self.frecv[pkey]
            if not ok:
                raise ValidationError(f"{_where(r, pos, node)} runs before its input {fpart.microbatch}.{p}")
        self._backward(r, pos, node, bpart, bkey)
        if self.cnt_f[fkey]:
            raise ValidationError(f"{_where(r, pos, node)}: {fpart} appears twice")
        self.cnt_f[fkey] = 1
        self.fdone[fkey] = 1

    def _memory(self, r: int, pos: int, node: Node) -> None:
        key = self._locate(r, pos, node, node)
        mb, s = node.microbatch, node.stage
        if node.kind is _OFFLOAD:
            if not self.fdone[key]:
                raise ValidationError(f"{_where(r, pos, node)} runs before F{mb}.{s}")
            if self.gdone[key] or (mb, s) in self.offloaded:
                raise ValidationError(f"{_where(r, pos, node)}: nothing resident to offload")
            self.offloaded.add((mb, s))
        else:
            if (mb, s) not in self.offloaded:
                raise ValidationError(f"{_where(r, pos, node)} without an earlier OFFLOAD{mb}.{s}")
            self.offloaded.discard((mb, s))

    # -- whole table ----------------------------------------------------------------------------------

    def check_complete(self) -> None:
        pl, n = self.pl, self.n_stages
        cf, cb, cw, cbw = self.cnt_f, self.cnt_b, self.cnt_w, self.cnt_bw
        srank, nxt, prv = pl.stage_rank, pl.next_stage, pl.prev_stage
        sent, frecv, grecv = self.sent, self.frecv, self.grecv
        for mb in range(self.m):
            for s in pl.route_of(mb):
                key = mb * n + s
                rank = srank[s]
                if not cf[key]:
                    raise ValidationError(f"rank {rank}: missing F{mb}.{s}")
                if cbw[key] and (cb[key] or cw[key]):
                    raise ValidationError(f"rank {rank}: {mb}.{s} has both BW{mb}.{s} and a split B/W")
                if not cbw[key] and not cb[key]:
                    raise ValidationError(f"rank {rank}: missing backward of {mb}.{s} (BW{mb}.{s} or B+W)")
                if cb[key] and not cw[key]:
                    raise ValidationError(f"rank {rank}: missing W{mb}.{s} after B{mb}.{s}")
                q = nxt[s]
                if q >= 0 and srank[q] != rank:
                    if not sent[2 * key]:
                        raise ValidationError(
                            f"rank {rank}: missing SEND_F{mb}.{s}>{srank[q]} after F{mb}.{s}"
                        )
                    if not frecv[key]:
                        raise ValidationError(
                            f"rank {srank[q]}: missing RECV_F{mb}.{q}<{rank} before F{mb}.{q}"
                        )
                q = prv[s]
                if q >= 0 and srank[q] != rank:
                    if not sent[2 * key + 1]:
                        raise ValidationError(f"rank {rank}: missing SEND_B{mb}.{s}>{srank[q]}")
                    if not grecv[key]:
                        raise ValidationError(f"rank {srank[q]}: missing RECV_B{mb}.{q}<{rank}")

    def _msg_node(self, msg: int, is_send: bool) -> str:
        key, grad = msg >> 1, msg & 1
        mb, s = divmod(key, self.n_stages)
        pl = self.pl
        if is_send:
            peer = pl.stage_rank[pl.prev_stage[s] if grad else pl.next_stage[s]]
            return f"{'SEND_B' if grad else 'SEND_F'}{mb}.{s}>{peer}"
        dst = pl.prev_stage[s] if grad else pl.next_stage[s]
        return f"{'RECV_B' if grad else 'RECV_F'}{mb}.{dst}<{pl.stage_rank[s]}"

    def check_fifo(self) -> None:
        for a, sends_to in enumerate(self.sends):
            for b, sent in sends_to.items():
                got = self.recvs[b].get(a, [])
                if sent != got:
                    self._fifo_error(a, b, sent, got)

    def _fifo_error(self, a: int, b: int, sent: list[int], got: list[int]) -> None:
        k = next(i for i, (x, y) in enumerate(zip(sent, got, strict=False)) if x != y)
        raise ValidationError(
            f"FIFO mismatch rank {a} -> rank {b}: message #{k} is {self._msg_node(sent[k], True)} "
            f"on rank {a} but rank {b} receives {self._msg_node(got[k], False)} there"
        )

    def check_termination(self) -> None:
        srank = self.pl.stage_rank
        nxt, prv, n = self.pl.next_stage, self.pl.prev_stage, self.n_stages
        send_batch, recv_batch = self.send_batch, self.recv_batch
        batches = self.batches
        n_ranks = len(batches)
        pos = [0] * n_ranks  # rank r has posted batch pos[r]; all earlier ones completed
        pending = [0] * n_ranks
        waiting_on: dict[int, list[int]] = {}  # batch k of rank q -> ranks waiting for it: k * ranks + q
        work: list[int] = []

        def partner(op: int) -> tuple[int, int]:
            msg, is_send = op >> 1, op & 1
            s = (msg >> 1) % n
            if not is_send:  # our recv: the sender is the producer's rank
                return srank[s], send_batch[msg]
            dst = prv[s] if msg & 1 else nxt[s]
            return srank[dst], recv_batch[msg]

        def advance(r: int) -> None:
            """Post batch pos[r], and the following ones while each completes at once."""
            rb = batches[r]
            k = pos[r]
            while True:
                woken = waiting_on.pop(k * n_ranks + r, None)
                if woken:
                    for waiter in woken:
                        pending[waiter] -= 1
                        if pending[waiter] == 0:
                            work.append(waiter)
                if k >= len(rb):
                    return
                blocked = 0
                for op in rb[k]:
                    msg = op >> 1
                    s = (msg >> 1) % n
                    if op & 1:  # our send: the partner is the consumer's rank
                        q, kq = srank[prv[s] if msg & 1 else nxt[s]], recv_batch[msg]
                    else:  # our recv: the partner is the producer's rank
                        q, kq = srank[s], send_batch[msg]
                    if pos[q] < kq:
                        key = kq * n_ranks + q
                        if key in waiting_on:
                            waiting_on[key].append(r)
                        else:
                            waiting_on[key] = [r]
                        blocked += 1
                if blocked:
                    pending[r] = blocked
                    return
                k += 1
                pos[r] = k

        for r in range(n_ranks):
            advance(r)
        while work:
            r = work.pop()
            pos[r] += 1
            advance(r)

        stuck = [r for r in range(n_ranks) if pos[r] < len(batches[r])]
        if stuck:
            raise ValidationError(self._deadlock(pos, partner, stuck))

    def _deadlock(self, pos, partner, stuck) -> str:
        def blocker(r: int) -> tuple[str, int]:
            for op in self.batches[r][pos[r]]:
                q, kq = partner(op)
                if pos[q] < kq:
                    return self._msg_node(op >> 1, bool(op & 1)), q
            raise AssertionError("stuck rank without a blocker")

        path, seen, r = [], set(), stuck[0]
        while r not in seen:
            seen.add(r)
            path.append(r)
            r = blocker(r)[1]
        cycle = path[path.index(r) :]
        steps = [f"rank {a} waits at {blocker(a)[0]} for rank {blocker(a)[1]}" for a in cycle]
        return "deadlock under rendezvous semantics: " + "; ".join(steps) + f"; back to rank {cycle[0]}"
