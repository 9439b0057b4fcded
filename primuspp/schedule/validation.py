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
from primuspp.schedule.semantics import (
    ACT,
    ACT_PREV,
    COMPLETION,
    FREES,
    GRAD,
    GRAD_NEXT,
    OWN_GRAD,
    RECV_OF,
    SAVED,
    SEMANTICS,
    SEND_OF,
    STASHES,
)
from primuspp.schedule.table import ScheduleTable

# Every rule below is read from the semantics table: what a node consumes must exist before it (made on this
# rank, or received), what it produces and leaves exists after it, each kind `COMPLETION` names runs at most
# once per (microbatch, stage) and one way of each requirement runs in full, `STASHES` pairs a node taking
# the saved activation away with one bringing it back, and comm kinds move the datum they carry. The words
# of the messages are per datum (and the kinds' names), so a new kind is validated without an edit here;
# a new datum or memory effect needs its line below.

#: per carried datum: (the other stage is the next one, a grad (not an activation), this rank produced it
#: (SEND), how the peer mismatch is worded)
_CARRIED = {
    ACT: (True, 0, True, "output goes to"),
    GRAD: (False, 1, True, "input grad goes to"),
    ACT_PREV: (False, 0, False, "input comes from"),
    GRAD_NEXT: (True, 1, False, "output grad comes from"),
}
_KNOWN_DATA = {ACT_PREV, GRAD_NEXT, SAVED, OWN_GRAD}
for _kind, _sem in SEMANTICS.items():
    if (_sem.role == "comm" and _sem.carries not in _CARRIED) or set(_sem.consumes) - _KNOWN_DATA:
        raise ImportError(
            f"schedule/validation.py does not know a datum node kind {_kind.text} consumes or carries: "
            "teach it the new datum"
        )


def _names(kinds) -> str:
    return "/".join(k.text for k in kinds)


def _past(verb: str) -> str:
    return verb + ("d" if verb.endswith("e") else "ed")


#: the kinds (by name) that make each datum on this rank, for "runs before ..." messages
_MAKERS = {
    what: _names(k for k, sem in SEMANTICS.items() if what in sem.produces + sem.leaves)
    for what in (ACT, SAVED, OWN_GRAD)
}
#: counted kinds: those `COMPLETION` names, each run at most once per (mb, stage)
_COUNTED = tuple(dict.fromkeys(k for _, ways in COMPLETION for way in ways for k in way))
#: the opening effect of each kind that opens a stash pair / that each closing kind closes
_OPENS = {k: e for k, sem in SEMANTICS.items() for e in sem.at_start + sem.at_end if e in STASHES}
_CLOSES = {
    k: e
    for k, sem in SEMANTICS.items()
    for e in STASHES
    for c in sem.at_start + sem.at_end
    if c == STASHES[e]
}
_OPENERS = {e: _names(k for k, o in _OPENS.items() if o == e) for e in STASHES}
_CLOSERS = {e: _names(k for k, c in _CLOSES.items() if c == e) for e in STASHES}
#: per non-comm kind: (consumes, produces, leaves, frees the saved activation, opens, closes, counter index)
_RULES = {
    k.text: (
        sem.consumes,
        sem.produces,
        sem.leaves,
        any(e in FREES for e in sem.at_start + sem.at_end),
        _OPENS.get(k),
        _CLOSES.get(k),
        _COUNTED.index(k) if k in _COUNTED else -1,
    )
    for k, sem in SEMANTICS.items()
    if sem.role != "comm" and not sem.parts
}
#: per comm kind: what `_CARRIED` says of its datum
_COMM = {k.text: _CARRIED[sem.carries] for k, sem in SEMANTICS.items() if sem.role == "comm"}
# (the tables above are keyed by the kind's text: an Enum member hashes in Python, a str in C)
_COMPOSITE = {k.text for k, sem in SEMANTICS.items() if sem.parts}


def _way(way, mb: int, s: int, several: str = "") -> str:
    """One way of a requirement, in a message: `BW3.1` (one kind), `B+W` or `a split B/W` (several)."""
    if len(way) == 1:
        return f"{way[0][0]}{mb}.{s}"
    return f"{several}{'/'.join(k for k, _ in way)}" if several else "+".join(k for k, _ in way)


def _ways(name: str, ways, mb: int, s: int) -> str:
    """A missing requirement: `F3.1` (done one way, by one kind), else `backward of 3.1 (BW3.1 or B+W)`."""
    if len(ways) == 1 and len(ways[0]) == 1:
        return _way(ways[0], mb, s)
    return f"{name} of {mb}.{s} ({' or '.join(_way(way, mb, s) for way in ways)})"


def _where(rank: int, pos: int, node: Node) -> str:
    return f"rank {rank}: {node} (position {pos})"


def _before(what: str, mb: int, s: int) -> str:
    """What a node needing `what` of (mb, s) runs before, in a message."""
    return f"the backward of {mb}.{s}" if what == GRAD else f"{_MAKERS[what]}{mb}.{s}"


def validate(table: ScheduleTable) -> None:
    """Raise ValidationError naming the first problem found; return None for a valid table.

    A table from `lower_comms` (compact storage) is first checked as array passes
    (`compact_validation.valid`); only if that cannot prove it valid does the walk below run, which finds
    and names the first problem. `validate_walk` is the walk alone."""
    if compact_validation.valid(table):
        return
    validate_walk(table)


def validate_walk(table: ScheduleTable) -> None:
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
        self.counts = [bytearray(size) for _ in _COUNTED]
        # what exists per key: the activation / input grad made (ACT, GRAD), what was left on the rank
        # (SAVED, OWN_GRAD), the saved activation freed
        self.has = {what: bytearray(size) for what in (ACT, GRAD, SAVED, OWN_GRAD)}
        self.freed = bytearray(size)
        self.frecv, self.grecv = bytearray(size), bytearray(size)  # indexed by the producer's key
        self.sent = bytearray(2 * size)
        self.sends: list[dict[int, list[int]]] = []  # per rank: peer -> messages sent, in order
        self.recvs: list[dict[int, list[int]]] = []  # per rank: peer -> messages received, in order
        self.send_batch = [-1] * (2 * size)
        self.recv_batch = [-1] * (2 * size)
        self.batches: list[list[list[int]]] = []  # per rank: batches of ops (2 * msg + is_send)
        self.stashed: dict[tuple[int, int], NodeKind] = {}  # (mb, stage) taken away -> the kind that did
        # `_RULES` as this walk's arrays, for the inlined path of `rank`: per kind, (waits for the previous
        # stage's activation, for the next stage's input grad, the local arrays that must be set, uses the
        # saved activation (not while stashed), the arrays it sets, its counter, 1 opens / 2 closes a stash)
        self.plans = {}
        for text, (consumes, produces, leaves, frees, opens, closes, counter) in _RULES.items():
            local = tuple(self.has[w] for w in consumes if w not in (ACT_PREV, GRAD_NEXT))
            marks = tuple(self.has[w] for w in produces + leaves) + ((self.freed,) if frees else ())
            self.plans[text] = (
                ACT_PREV in consumes,
                GRAD_NEXT in consumes,
                local,
                SAVED in consumes and opens is None,
                marks,
                self.counts[counter] if counter >= 0 else None,
                1 if opens is not None else 2 if closes is not None else 0,
            )
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
        n, m = self.n_stages, self.m
        nxt, prv, srank = self.pl.next_stage, self.pl.prev_stage, self.pl.stage_rank
        made_act, made_grad = self.has[ACT], self.has[GRAD]
        frecv, grecv, sent = self.frecv, self.grecv, self.sent
        send_batch, recv_batch = self.send_batch, self.recv_batch
        sends_to: dict[int, list[int]] = {}
        recvs_from: dict[int, list[int]] = {}
        self.sends.append(sends_to)
        self.recvs.append(recvs_from)
        batches: list[list[int]] = []
        current: list[int] | None = None
        locate, route_member, check, record = self._locate, self.route_member, self._check, self._record
        plans, stashed, comm_rules, composite = self.plans, self.stashed, _COMM, _COMPOSITE
        for pos, node in enumerate(self.table.ranks[r]):
            kind = node.kind
            mb, s = node.microbatch, node.stage
            if kind.is_comm:
                if 0 <= mb < m and 0 <= s < n and srank[s] == r and route_member is None:
                    key = mb * n + s
                else:
                    key = locate(r, pos, node, node)
                peer = node.peer
                toward_next, grad, is_send, what = comm_rules[kind.text]
                q = nxt[s] if toward_next else prv[s]
                if is_send:
                    if not (made_grad if grad else made_act)[key]:
                        raise ValidationError(
                            f"{_where(r, pos, node)} runs before {_before(GRAD if grad else ACT, mb, s)}"
                        )
                    msg = 2 * key + grad
                else:
                    msg = 2 * (key - s + q) + grad
                if q < 0 or peer is None or srank[q] != peer or peer == r:
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
                    flag = grecv if grad else frecv
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
            text = kind.text
            if text in composite:
                # every part placed, then every part's inputs (in order), then what each part makes (the last
                # part first: a part's duplicate is named before an earlier part's)
                parts = node.parts
                keys = [locate(r, pos, node, part) for part in parts]
                for part, key in zip(parts, keys, strict=True):
                    check(r, pos, node, part, key)
                for part, key in zip(reversed(parts), reversed(keys), strict=True):
                    record(r, pos, node, part, key)
                continue
            if 0 <= mb < m and 0 <= s < n and srank[s] == r and route_member is None:
                key = mb * n + s
            else:
                key = locate(r, pos, node, node)
            # `_check` and `_record` inlined for a simple node (every node goes through here): the checks
            # as booleans; any failure, and the stash pairs' checks, go to `_check`, which words the message
            from_prev, from_next, local, saved, marks, count, stash = plans[text]
            ok = True
            if from_prev:
                q = prv[s]
                if q >= 0:
                    ok = made_act[key - s + q] if srank[q] == r else frecv[key - s + q]
            if from_next and ok:
                q = nxt[s]
                if q >= 0:
                    ok = made_grad[key - s + q] if srank[q] == r else grecv[key - s + q]
            for arr in local:
                if not arr[key]:
                    ok = False
            if saved and stashed and (mb, s) in stashed:
                ok = False
            if not ok or stash:
                check(r, pos, node, node, key)
            if count is not None:
                if count[key]:
                    raise ValidationError(f"{_where(r, pos, node)}: {node} appears twice")
                count[key] = 1
            for arr in marks:
                arr[key] = 1
            if stash:
                if stash == 1:
                    stashed[(mb, s)] = kind
                else:
                    del stashed[(mb, s)]
        if current is not None:
            batches.append(current)
        self.batches.append(batches)
        if self.stashed:
            (mb, s), opener = min(self.stashed.items())
            closer = _CLOSERS[_OPENS[opener]]
            raise ValidationError(f"rank {r}: {opener.text}{mb}.{s} is never {_past(closer.lower())}")

    def _check(self, r: int, pos: int, node: Node, part: Node, key: int) -> None:
        """Raise if something `part` (of `node`) needs is not there yet: its inputs, a stash pair's state."""
        consumes, _, _, _, opens, closes, _ = _RULES[part.kind.text]
        mb, s = part.microbatch, part.stage
        pl = self.pl
        for what in consumes:
            if what in (ACT_PREV, GRAD_NEXT):
                grad = what == GRAD_NEXT
                q = pl.next_stage[s] if grad else pl.prev_stage[s]
                if q < 0:
                    continue
                qkey = key - s + q
                if pl.stage_rank[q] == r:
                    if self.has[GRAD if grad else ACT][qkey]:
                        continue
                    missing = _before(GRAD if grad else ACT, mb, q)
                else:
                    if (self.grecv if grad else self.frecv)[qkey]:
                        continue
                    missing = f"{RECV_OF[GRAD if grad else ACT].text}{mb}.{s}<{pl.stage_rank[q]}"
                if what == ACT_PREV and part is not node:
                    missing = f"its input {mb}.{q}"
                raise ValidationError(f"{_where(r, pos, node)} runs before {missing}")
            if not self.has[what][key]:
                raise ValidationError(f"{_where(r, pos, node)} runs before {_before(what, mb, s)}")
            if what == SAVED and self.stashed and opens is None and (mb, s) in self.stashed:
                opener = self.stashed[(mb, s)]
                closer = _CLOSERS[_OPENS[opener]]
                raise ValidationError(
                    f"{_where(r, pos, node)} runs while {mb}.{s} is {_past(opener.text.lower())} "
                    f"(no {closer} yet)"
                )
        if opens is not None and (self.freed[key] or (mb, s) in self.stashed):
            raise ValidationError(f"{_where(r, pos, node)}: nothing resident to {part.kind.text.lower()}")
        if closes is not None and (mb, s) not in self.stashed:
            raise ValidationError(f"{_where(r, pos, node)} without an earlier {_OPENERS[closes]}{mb}.{s}")

    def _record(self, r: int, pos: int, node: Node, part: Node, key: int) -> None:
        """What `part` makes: it is counted (twice is an error), its outputs and what it leaves exist."""
        _, produces, leaves, frees, opens, closes, counter = _RULES[part.kind.text]
        if counter >= 0:
            count = self.counts[counter]
            if count[key]:
                raise ValidationError(f"{_where(r, pos, node)}: {part} appears twice")
            count[key] = 1
        has = self.has
        for what in produces:
            has[what][key] = 1
        for what in leaves:
            has[what][key] = 1
        if frees:
            self.freed[key] = 1
        if opens is not None:
            self.stashed[(part.microbatch, part.stage)] = part.kind
        elif closes is not None:
            del self.stashed[(part.microbatch, part.stage)]

    # -- whole table ----------------------------------------------------------------------------------

    def check_complete(self) -> None:
        pl, n = self.pl, self.n_stages
        counts = self.counts
        srank, nxt, prv = pl.stage_rank, pl.next_stage, pl.prev_stage
        sent, frecv, grecv = self.sent, self.frecv, self.grecv
        send_f, recv_f, send_b, recv_b = (
            x.text for x in (SEND_OF[ACT], RECV_OF[ACT], SEND_OF[GRAD], RECV_OF[GRAD])
        )
        # per requirement: its counters, and the patterns of them (bit i: counter i ran) that do it one way
        needs = []
        for name, ways in COMPLETION:
            kinds = list(dict.fromkeys(k for way in ways for k in way))
            full = {sum(1 << kinds.index(k) for k in way) for way in ways}
            needs.append((tuple(counts[_COUNTED.index(k)] for k in kinds), full, name, ways))
        for mb in range(self.m):
            for s in pl.route_of(mb):
                key = mb * n + s
                rank = srank[s]
                for counters, full, name, ways in needs:
                    ran, bit = 0, 1
                    for c in counters:
                        if c[key]:
                            ran |= bit
                        bit <<= 1
                    if ran not in full:
                        self._incomplete(rank, mb, s, key, name, ways)
                q = nxt[s]
                if q >= 0 and srank[q] != rank:
                    if not sent[2 * key]:
                        raise ValidationError(
                            f"rank {rank}: missing {send_f}{mb}.{s}>{srank[q]} after {_before(ACT, mb, s)}"
                        )
                    if not frecv[key]:
                        raise ValidationError(
                            f"rank {srank[q]}: missing {recv_f}{mb}.{q}<{rank} before {_before(ACT, mb, q)}"
                        )
                q = prv[s]
                if q >= 0 and srank[q] != rank:
                    if not sent[2 * key + 1]:
                        raise ValidationError(f"rank {rank}: missing {send_b}{mb}.{s}>{srank[q]}")
                    if not grecv[key]:
                        raise ValidationError(f"rank {srank[q]}: missing {recv_b}{mb}.{q}<{rank}")

    def _incomplete(self, rank: int, mb: int, s: int, key: int, name: str, ways) -> None:
        """Raise the message for a requirement of `COMPLETION` that (mb, s) did not do exactly one way."""
        counts = self.counts
        ways = [[(k.text, counts[_COUNTED.index(k)]) for k in way] for way in ways]
        ran = [way for way in ways if any(c[key] for _, c in way)]
        if not ran:
            raise ValidationError(f"rank {rank}: missing {_ways(name, ways, mb, s)}")
        if len(ran) > 1:
            one, other = (_way(way, mb, s, "a split ") for way in ran[:2])
            raise ValidationError(f"rank {rank}: {mb}.{s} has both {one} and {other}")
        done = ran[0]
        for i, (k, c) in enumerate(done):
            if not c[key]:
                after = f" after {done[i - 1][0]}{mb}.{s}" if i else ""
                raise ValidationError(f"rank {rank}: missing {k}{mb}.{s}{after}")

    def _msg_node(self, msg: int, is_send: bool) -> str:
        key, grad = msg >> 1, msg & 1
        mb, s = divmod(key, self.n_stages)
        pl = self.pl
        what = GRAD if grad else ACT
        if is_send:
            peer = pl.stage_rank[pl.prev_stage[s] if grad else pl.next_stage[s]]
            return f"{SEND_OF[what].text}{mb}.{s}>{peer}"
        dst = pl.prev_stage[s] if grad else pl.next_stage[s]
        return f"{RECV_OF[what].text}{mb}.{dst}<{pl.stage_rank[s]}"

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
