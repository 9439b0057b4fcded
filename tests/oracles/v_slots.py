"""Readable references of the V slot grid's passes (`v_grid`, `v_rows`, `v_squeeze`): per op and per slot,
on lists. An op id is (mb * stages + stage) * 3 + kind; `occ[r][t]` the op rank r runs in slot t (-1:
free), `slot[op]` its slot."""

from __future__ import annotations

F, B, W = 0, 1, 2


class Lists:
    """A slot grid as lists: `slot`, `occ` and each stage's rank, edited in place by the references."""

    def __init__(self, sched) -> None:
        self.p, self.n = sched.p, sched.n
        self.rank = [min(s, self.n - 1 - s) for s in range(self.n)]
        self.slot, self.occ = sched.slot.tolist(), sched.occ.tolist()

    def earliest(self, op: int) -> int:
        """One slot after the later of the op's inputs: the previous stage's F for an F, the cell's F or B
        for a B or W, and the next stage's B for a B."""
        kind, s = op % 3, op // 3 % self.n
        if kind == F:
            return self.slot[op - 3] + 1 if s else 0
        e = self.slot[op - 1] + 1
        if kind == B and s < self.n - 1:
            e = max(e, self.slot[op + 3] + 1)
        return e

    def by_slot(self, kinds: tuple[int, ...]) -> list[int]:
        """The ops of these kinds in slot order, then rank order."""
        width = len(self.occ[0])
        col = [[row[t] for row in self.occ] for t in range(width)]
        return [op for ops in col for op in ops if op >= 0 and op % 3 in kinds]

    def move(self, op: int, t: int) -> None:
        row = self.occ[self.rank[op // 3 % self.n]]
        row[self.slot[op]], row[t], self.slot[op] = -1, op, t


def place_ws(g: Lists) -> None:
    """Each free slot runs the W of the oldest completed B whose W has not run."""
    for row in g.occ:
        pending: list[int] = []
        for t, op in enumerate(row):
            if op >= 0 and op % 3 == B:
                pending.append(op + 1)
            elif op < 0 and pending:
                w = pending.pop(0)
                row[t], g.slot[w] = w, t


def strip_ws(g: Lists) -> None:
    for w in range(W, len(g.slot), 3):
        if g.slot[w] >= 0:
            g.occ[g.rank[w // 3 % g.n]][g.slot[w]] = -1
            g.slot[w] = -1


def profile(row: list[int]) -> list[int]:
    """Live chunk activations during each slot (an F counts from its slot, a W until the end of its
    slot), then the level after the last slot."""
    out, live = [], 0
    for op in row:
        if op >= 0 and op % 3 == F:
            live += 1
        out.append(live)
        if op >= 0 and op % 3 == W:
            live -= 1
    return [*out, live]


def walk(row: list[int]) -> tuple[list[int], list[int]]:
    """(pending W's, live chunks) before each slot and after the last, W's derived: a B makes a W pending,
    a free slot runs one if any, freeing a chunk."""
    pend, live, q, lv = [], [], 0, 0
    for op in row:
        pend.append(q)
        live.append(lv)
        if op >= 0:
            if op % 3 == F:
                lv += 1
            else:
                q += 1
        elif q:
            q, lv = q - 1, lv - 1
    return [*pend, q], [*live, lv]


def tighten(g: Lists) -> None:
    """Every op, in slot order, as early as its inputs and its rank's previous op allow."""
    ops = g.by_slot((F, B, W))
    ready = [0] * g.p
    for op in ops:
        r = g.rank[op // 3 % g.n]
        g.slot[op] = u = max(g.earliest(op), ready[r])
        ready[r] = u + 1
    width = len(g.occ[0])
    g.occ = [[-1] * width for _ in range(g.p)]
    for op in ops:
        g.occ[g.rank[op // 3 % g.n]][g.slot[op]] = op


def squeeze_explicit(g: Lists, cap: int) -> None:
    """Each op, in slot order, to the first free slot from its earliest on where (an F) the live chunks
    stay within `cap` up to its old slot."""
    mem = [profile(row) for row in g.occ]
    for op in g.by_slot((F, B, W)):
        kind, r, cur = op % 3, g.rank[op // 3 % g.n], g.slot[op]
        e = g.earliest(op)
        if e >= cur:
            continue
        prof, row = mem[r], g.occ[r]
        lo = e
        if kind == F:  # the activation now lives from the new slot on: the cap must hold there
            lo = cur
            while lo > e and prof[lo - 1] < cap:
                lo -= 1
        free = [t for t in range(lo, cur) if row[t] < 0]
        if not free:
            continue
        t = free[0]
        g.move(op, t)
        if kind == F:
            prof[t:cur] = [x + 1 for x in prof[t:cur]]
        elif kind == W:
            prof[t + 1 : cur + 1] = [x - 1 for x in prof[t + 1 : cur + 1]]


def squeeze_derived(g: Lists, cap: int) -> None:
    """W's stripped; each F and B, in slot order, to the first free slot from its earliest on after which,
    W's re-derived, no F starts with `cap` live chunks; then the W's placed again."""
    strip_ws(g)
    for op in g.by_slot((F, B)):
        r, cur = g.rank[op // 3 % g.n], g.slot[op]
        e = g.earliest(op)
        if e >= cur:
            continue
        row = g.occ[r]
        lo = e
        if op % 3 == F:  # necessary: one more live chunk on [t, cur] (derived W's only move later)
            live = walk(row)[1]
            lo = cur + 1
            while lo > e and live[lo - 1] < cap:
                lo -= 1
        for t in range(lo, cur):
            if row[t] >= 0:
                continue
            g.move(op, t)
            _, live = walk(row)
            if all(live[u] < cap for u, x in enumerate(row) if x >= 0 and x % 3 == F):
                break
            g.move(op, cur)
    place_ws(g)
