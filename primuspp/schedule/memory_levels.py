"""The memory model (`semantics.order_memory`) as array passes, for the simulator's curves.

Same events, same order, same float operations as `order_memory`: each node's effects at its start, then
at its end (a composite node: every part's start effects, then every part's end effects), the level a running
sum of the changes with values within 1e-9 of zero snapped to 0.0. The running sum is numpy's cumulative
sum, which adds left to right as the loop does; a snap restarts it. Effects are read from the semantics
table: a table whose kinds have effects other than allocating and freeing (OFFLOAD/RELOAD) or more than one
each, or whose frees do not pair up (a second B or W of the same microbatch and stage), gets None and the
caller uses `order_memory` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from primuspp.schedule.array_order import KINDS, kind_stage, kinds_present, one_row_per_node
from primuspp.schedule.rows import memo_of
from primuspp.schedule.semantics import ALLOC, FREE_ALL, FREE_B, FREE_REST, SEMANTICS

_CODES = {ALLOC: 0, FREE_B: 1, FREE_REST: 2, FREE_ALL: 3}
#: more snaps than this on one rank: finish that rank with a plain loop
_SNAP_RESTARTS = 32


def memory_levels(
    rows: dict[str, Any],
    node_first: Any,
    starts: Any,
    ends: Any,
    amount: Sequence[float],
    b_free: Sequence[float],
) -> list[tuple[Any, Any, float]] | None:
    """Per rank (times, levels, peak) of `order_memory` over the nodes of `rows` (`array_order.order_arrays`;
    `node_first[r]`: rank r's first node in the flat, rank-major numbering `starts`/`ends` use), or None
    when the arrays cannot reproduce it (see the module docstring)."""
    kind, mb, stage = rows["kind"], rows["mb"], rows["stage"]
    # each row's node (row i is node i when no node is composite)
    simple = one_row_per_node(rows)
    gidx = np.arange(len(kind), dtype=np.int64) if simple else node_first[rows["rank"]] + rows["index"]
    part = rows["part"]
    amount_a = np.asarray(amount, dtype=np.float64)
    bfree_a = np.asarray(b_free, dtype=np.float64)
    freed_b = amount_a * bfree_a  # as order_memory: amount[s] * b_free[s]
    # (phase, ordinal, effect) of every effect of every kind present
    plans = {}
    for code in kinds_present(rows, "kind"):
        sem = SEMANTICS[KINDS[code]]
        plan = [(0, n, e) for n, e in enumerate(sem.at_start)] + [(1, n, e) for n, e in enumerate(sem.at_end)]
        if any(e not in _CODES for _, _, e in plan):
            return None
        plans[code] = plan
    if not any(plans.values()):
        return [(np.zeros(0), np.zeros(0), 0.0) for _ in range(len(node_first) - 1)]
    if simple and all(len(plan) == 1 for plan in plans.values()):
        return _one_effect_per_row(rows, node_first, starts, ends, amount_a, bfree_a, freed_b, plans)
    if max(len(plan) for plan in plans.values()) > 1:
        return None  # a kind with several effects: `order_memory` counts them
    # one effect per row at most (the registry's kinds, composite nodes among them): the events in row
    # order, which is the loop's order unless a composite node's parts act in the other order (below)
    has = np.zeros(len(KINDS), dtype=bool)
    phase_of = np.zeros(len(KINDS), dtype=np.int64)
    effect_of = np.zeros(len(KINDS), dtype=np.int8)
    for code, plan in plans.items():
        if plan:
            has[code], phase_of[code], effect_of[code] = True, plan[0][0], _CODES[plan[0][2]]
    # every row an event (each kind present has its one effect): the events are the rows themselves
    all_rows = all(has[code] for code in plans)
    ev_row = np.arange(len(kind), dtype=np.int64) if all_rows else np.flatnonzero(has[kind])
    ev_kind = kind if all_rows else kind[ev_row]
    ev_phase, ev_effect = phase_of[ev_kind], effect_of[ev_kind]
    del ev_kind
    in_row_order = not _has_composite(rows)  # no composite node: the rows' order is the loop's already
    # the loop's order: node, phase, part, the effect's place in its list (as one integer key)
    if not in_row_order:
        n_part = int(part.max(initial=0)) + 1
        sort_key = (gidx[ev_row] * 2 + ev_phase) * n_part + part[ev_row]
        if len(sort_key) > 1 and not (sort_key[1:] >= sort_key[:-1]).all():
            order = np.argsort(sort_key, kind="stable")
            ev_row, ev_phase, ev_effect = ev_row[order], ev_phase[order], ev_effect[order]
            all_rows = False  # the events are the rows in another order
            del order
        del sort_key  # large tables: free what is done with (the simulation's peak memory)
    s = stage if all_rows else stage[ev_row]
    # each event's change, by effect code and stage: +amount, -amount * b_free, (W: below), -amount
    change = np.zeros((len(_CODES), len(amount_a)), dtype=np.float64)
    change[_CODES[ALLOC]], change[_CODES[FREE_B]], change[_CODES[FREE_ALL]] = amount_a, -freed_b, -amount_a
    delta = change[ev_effect, s]
    del change
    is_rest = ev_effect == _CODES[FREE_REST]
    if is_rest.any():
        is_b = ev_effect == _CODES[FREE_B]
        # W frees what its B left (amount - freed) when that B ran earlier on this rank, else its default
        # keyed stage-major (stage * microbatches + microbatch): a rank's events, a few stages with the
        # microbatches in turn, read neighbouring entries of `where_b`
        ev_mb = mb if all_rows else mb[ev_row]
        key = s * (int(ev_mb.max(initial=0)) + 1)
        key += ev_mb
        del ev_mb
        ev_rank = rows["rank"] if all_rows else rows["rank"][ev_row]
        if not _rest_frees(delta, key, is_b, is_rest, ev_rank, s, amount_a, freed_b, bfree_a):
            return None
        del key, ev_rank, is_b
    del s, is_rest, ev_effect
    if all_rows and simple:  # event i is node i
        times = np.where(ev_phase == 0, starts, ends)
        return _per_rank(times, delta, node_first.tolist())
    ev_gidx = gidx if all_rows else gidx[ev_row]
    del gidx, ev_row
    times = np.where(ev_phase == 0, starts[ev_gidx], ends[ev_gidx])
    bounds = np.searchsorted(ev_gidx, node_first)
    del ev_gidx, ev_phase
    return _per_rank(times, delta, bounds.tolist())


def _one_effect_per_row(
    rows: dict[str, Any],
    node_first: Any,
    starts: Any,
    ends: Any,
    amount_a: Any,
    bfree_a: Any,
    freed_b: Any,
    plans: dict[int, list[tuple[int, int, str]]],
) -> list[tuple[Any, Any, float]] | None:
    """`memory_levels` where every row is a node of its own with exactly one effect (the registry's simple
    kinds): the events are the rows, in row order. Each row's change and whether it acts at its start are
    read from (kind x stage) tables, the W rows' changes worked out as `order_memory` does."""
    n_kinds, n_stages = len(KINDS), len(amount_a)
    change = np.zeros((n_kinds, n_stages), dtype=np.float64)
    at_start = np.zeros((n_kinds, n_stages), dtype=bool)
    b_codes, rest_codes = [], []
    for code, ((phase, _, effect),) in plans.items():
        if effect == ALLOC:
            change[code] = amount_a
        elif effect == FREE_B:
            change[code] = -freed_b
            b_codes.append(code)
        elif effect == FREE_ALL:
            change[code] = -amount_a
        else:  # FREE_REST: below
            rest_codes.append(code)
        at_start[code] = phase == 0
    rest_left = amount_a - freed_b  # what W frees after its B
    if rest_codes and not freed_b.any() and np.array_equal(rest_left, amount_a * (1 - bfree_a)):
        # B frees nothing on any stage: W frees the whole activation whether or not its B ran before it (a
        # B, once or twice, leaves `amount - 0.0`, the default is `amount * 1.0`)
        change[rest_codes] = -rest_left
        rest_codes = []
    ks = kind_stage(rows, n_stages)
    times = np.where(at_start.reshape(-1).take(ks), starts, ends)
    # the levels depend on the order and the memory figures alone, not on the times: kept in the rows' memo
    # (a generator counts its order's peak, then the simulator draws the same order's curves)
    memo = memo_of(rows) if len(ks) <= LEVELS_MEMO_MAX else {}
    key = ("levels", amount_a.tobytes(), bfree_a.tobytes(), node_first.tobytes())
    known = memo.get(key)
    if known is not None:
        cuts = pairwise(node_first.tolist())
        return [(times[lo:hi], level, peak) for (lo, hi), (level, peak) in zip(cuts, known, strict=True)]
    got = _levels(rows, node_first, times, ks, change, rest_codes, b_codes, amount_a, bfree_a, freed_b)
    if got is not None:
        for _, level, _ in got:
            level.setflags(write=False)  # shared by every later call: read-only, as the order's columns
        memo[key] = [(level, peak) for _, level, peak in got]
    return got


#: orders of up to this many rows keep their levels in the rows' memo (8 bytes a row)
LEVELS_MEMO_MAX = 1 << 18


def _levels(
    rows: dict[str, Any],
    node_first: Any,
    times: Any,
    ks: Any,
    change: Any,
    rest_codes: list[int],
    b_codes: list[int],
    amount_a: Any,
    bfree_a: Any,
    freed_b: Any,
) -> list[tuple[Any, Any, float]] | None:
    """`_one_effect_per_row`'s levels from its (kind x stage) table of changes, W's worked out here."""
    n_kinds = len(KINDS)
    delta = change.reshape(-1).take(ks)
    if rest_codes:
        # W frees what its B left (amount - freed) when that B ran earlier on this rank, else its default;
        # keyed stage-major (stage * microbatches + microbatch): a rank's rows, a few stages with the
        # microbatches in turn, read neighbouring entries of `where_b`
        kind, mb, stage = rows["kind"], rows["mb"], rows["stage"]
        role = np.zeros(n_kinds, dtype=np.int8)  # 1: frees B's part, 2: frees the rest
        role[b_codes], role[rest_codes] = 1, 2
        row_role = role[kind]
        is_b, is_rest = row_role == 1, row_role == 2
        del row_role
        key = stage * (int(mb.max(initial=0)) + 1)
        key += mb
        if not _rest_frees(delta, key, is_b, is_rest, rows["rank"], stage, amount_a, freed_b, bfree_a):
            return None
    return _per_rank(times, delta, node_first.tolist())


def _rest_frees(delta, key, is_b, is_rest, rank, stage, amount, freed_b, bfree) -> bool:
    """Each W's change into `delta` (events keyed by (microbatch, stage) in `key`; `is_b`: B's, `is_rest`:
    W's): what its B left (amount - freed) when that B ran earlier on its rank, else amount * (1 - b_free).
    False when a key has two B's or two W's (the loop's business)."""
    size = int(key.max()) + 1 if len(key) else 0
    b_keys, rest_keys = key[is_b], key[is_rest]
    for keys in (b_keys, rest_keys):
        if np.bincount(keys, minlength=size).max(initial=0) > 1:
            return False
    where_b = np.full(size, -1, dtype=np.int64)
    where_b[b_keys] = np.flatnonzero(is_b)
    rest_at = np.flatnonzero(is_rest)
    b_at = where_b[rest_keys]
    seen = (b_at >= 0) & (b_at < rest_at)
    seen &= rank[np.maximum(b_at, 0)] == rank[rest_at]
    rs = stage[rest_at]
    delta[rest_at] = np.where(seen, -(amount[rs] - freed_b[rs]), -(amount[rs] * (1 - bfree[rs])))
    return True


def _per_rank(times: Any, delta: Any, bounds: list[int]) -> list[tuple[Any, Any, float]]:
    """(times, levels, peak) of each rank, rank r's events being `bounds[r]:bounds[r + 1]`."""
    out = []
    for lo, hi in pairwise(bounds):
        levels = _running_level(delta[lo:hi])
        peak = float(levels.max()) if hi > lo else 0.0
        out.append((times[lo:hi], levels, peak if peak > 0.0 else 0.0))
    return out


def _has_composite(rows: dict[str, Any]) -> bool:
    return any(SEMANTICS[KINDS[code]].parts for code in kinds_present(rows, "node_kind"))


def _running_level(delta: Any) -> Any:
    """0.0 plus each change in turn, a level within 1e-9 of zero set to 0.0 (as `order_memory`)."""
    out = np.empty(len(delta), dtype=np.float64)
    lo, restarts = 0, 0
    while lo < len(delta):
        # a leading 0.0 so the first value is 0.0 + delta (as the loop adds it), not delta itself
        run = np.cumsum(np.concatenate(([0.0], delta[lo:])))[1:]
        near = (run > -1e-9) & (run < 1e-9) & ((run != 0.0) | np.signbit(run))
        hits = np.flatnonzero(near)
        if not len(hits):
            out[lo:] = run
            return out
        k = int(hits[0])
        out[lo : lo + k] = run[:k]
        out[lo + k] = 0.0
        lo += k + 1
        restarts += 1
        if restarts > _SNAP_RESTARTS:
            level = 0.0
            for i, d in enumerate(delta[lo:].tolist(), start=lo):
                level += d
                if -1e-9 < level < 1e-9:
                    level = 0.0
                out[i] = level
            return out
    return out
