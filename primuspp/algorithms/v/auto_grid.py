"""The controllable-memory V construction on unit slots (Qi et al., "Pipeline Parallelism with
Controllable Memory", 2024): repeat a building block, squeeze, reorder.

Every op costs one slot. A rank runs six ops per microbatch, each named by a code `2 * kind + chunk` (kind 0
F, 1 B, 2 W; chunk 0 is stage r, chunk 1 stage 2p-1-r). Chunk 0's F and chunk 1's B travel down the ranks,
chunk 1's F and chunk 0's B up; a chain's first rank takes its input from itself. A grid is one slot row per
rank (`EMPTY` or a code); an op's microbatch is its count among the rank's ops of that code.

A block gives the slot of each of a rank's six ops in a period of six slots; each next rank moves the
downward ops by `k0` slots for the first `split` rank steps and by `k1 <= k0` after, the upward ones by -1.
`build` lays a block out max(m, 2p) times (`tile`), moves every op as early as its input and rank allow
(`squeeze`), lays each rank's warm-up out again (`warm_up`), keeps m microbatches (holding the first W's
back where memory is spare: `hold_wgrads`), rebuilds the cool-down by formula (`cool_down`), fills free
slots with later ready ops (`fill_bubbles`) and pairs each W with the oldest B without one (`pair_wgrads`).
`best` keeps the block with the shortest longest span under one mean cost per kind (`span`); v-auto takes
that order as a floor (`floor_pick`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from itertools import accumulate

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search.portfolio import Score, lower_bounds, memory_units, order_peak, score
from primuspp.algorithms.search.refine import refined_pool
from primuspp.errors import PrimusppError, ScheduleError
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import Placement, v_shape
from primuspp.schedule.timing import node_times

SLOTS = 6
EMPTY = -1
#: op codes: 2 * kind + chunk
F0, F1, B0, B1, W0, W1 = range(6)
#: the ops whose input comes from the rank above (r - 1); the weight gradient of chunk 1 is visited with them
DOWN = (True, False, False, True, False, True)
#: the input of a chain's first op, on the same rank
TURN = {F1: F0, B1: F1, B0: B1}
#: F/B shift per rank step of the downward chains (the upward chains shift by -1)
SPACINGS = (1, 2, 3, 4, 5)
#: effort="auto": most nodes (p * 6 * max(m, 2p)) times the budget in chunk activations the construction
#: is run for over the whole block space: the blocks within a budget and their sizes grow with both (the
#: floor is about 1.1 CPU s of v-auto's 1.7 at p=8, m=32, W = B/2, comm 10 % of F, default budget)
GRID_WORK = 50_000
#: effort="auto": beyond GRID_WORK and up to this, the thinned space (`best(thin=True)`: about a ninth of
#: the blocks; p=16, m=16 at 1.5p and 2p chunks, about 1.3 to 2.4 CPU s); p=64, m=512 is far beyond
THIN_WORK = 100_000

Slots = list[list[int]]


class _Invalid(Exception):
    """A block whose construction breaks one of its own invariants: skipped."""


def _kind(code: int) -> int:
    return code >> 1


def _source(code: int, r: int, p: int) -> int | None:
    """The rank holding an op's input; None when that is the rank itself (a chain's start, a W)."""
    if _kind(code) == 2:
        return None
    if DOWN[code]:
        return r - 1 if r > 0 else None
    return r + 1 if r < p - 1 else None


#: activations gained by an op: +1 for a forward (kept), -1 for a weight gradient (freed)
LIVE = (1, 1, 0, 0, -1, -1)
#: LIVE by slot content (EMPTY, index -1: none)
_LIVE_AT = (*LIVE, 0)
#: whether a slot's content is a downward / an upward op (EMPTY, index -1: neither)
_DOWN_AT = (*DOWN, False)
_UP_AT = (*(not down for down in DOWN), False)
#: TURN by code (None: not a turn)
_TURN = tuple(TURN.get(code) for code in range(SLOTS))


@cache
def _inputs(p: int) -> tuple[tuple[int | None, ...], ...]:
    """`_source` of every code on every rank."""
    return tuple(tuple(_source(code, r, p) for code in range(SLOTS)) for r in range(p))


def with_wgrads(slots: list[int]) -> list[int]:
    """A block row with each weight gradient (chunk 1's first) in the first free slot after its backward."""
    taken = {s for s in slots if s >= 0}
    for back, wgrad in ((B1, W1), (B0, W0)):
        free = next(
            (slots[back] + d) % SLOTS for d in range(1, SLOTS) if (slots[back] + d) % SLOTS not in taken
        )
        slots[wgrad] = free
        taken.add(free)
    return slots


def first_rows() -> list[list[int]]:
    """Every first-rank block row (slot per code): F0 in slot 0; F1, B1, B0 (nested so) in other slots."""
    rows = []
    for f1 in range(1, SLOTS):
        for b1 in range(1, SLOTS):
            for b0 in range(1, SLOTS):
                if len({f1, b1, b0}) == 3:
                    slots = [EMPTY] * SLOTS
                    slots[F0], slots[F1], slots[B1], slots[B0] = 0, f1, b1, b0
                    rows.append(with_wgrads(slots))
    return rows


def block(first: list[int], k0: int, k1: int, split: int, p: int) -> list[list[int]] | None:
    """Every rank's block row: downward ops moved by k0 per rank step for `split` steps then by k1, upward
    ops by -1; None when two ops of a rank would share a slot."""
    rows = [first]
    for step in range(p - 1):
        k = k0 if step < split else k1
        prev = rows[-1]
        slots = [EMPTY] * SLOTS
        for code in (F0, F1, B0, B1):
            slots[code] = (prev[code] + (k if DOWN[code] else -1)) % SLOTS
        if len({slots[F0], slots[F1], slots[B0], slots[B1]}) < 4:
            return None
        rows.append(with_wgrads(slots))
    return rows


def rank_peaks(grid: Slots) -> list[int]:
    """Each rank's most live activations (a forward adds one, a weight gradient frees one)."""
    return [max(accumulate(map(_LIVE_AT.__getitem__, row), initial=0)) for row in grid]


def peak(grid: Slots) -> int:
    """Most chunk activations any rank holds."""
    return max(rank_peaks(grid), default=0)


def tile(rows: list[list[int]], p: int, big: int) -> Slots:
    """`big` runs of each op, period six. Taking the chains in dependency order (F0 down the ranks, F1 up, B1
    down, B0 up, each weight gradient right after its backward), an op's run starts at the first slot of its
    block position not before the slot after the previous chain op's start."""
    width = SLOTS * (4 * p + big + 1)
    grid = [[EMPTY] * width for _ in range(p)]

    def lay(r: int, code: int, after: int) -> int:
        start = after + (rows[r][code] - after) % SLOTS
        for i in range(big):
            grid[r][start + SLOTS * i] = code
        return start

    after = SLOTS
    for code in (F0, F1, B1, B0):
        for r in range(p) if DOWN[code] else range(p - 1, -1, -1):
            after = lay(r, code, after) + 1
            if _kind(code) == 1:
                lay(r, code + 2, after)
    return grid


def squeeze(grid: Slots, m: int) -> Slots:
    """Each op as early as its input (one slot after it) and its rank (after its previous op) allow. Slots
    are taken in time order, downward ops down the ranks before upward ops up them; an input not yet placed
    or more than m ops of a code on a rank make the block invalid."""
    p = len(grid)
    width = len(grid[0])
    out = [[EMPTY] * width for _ in range(p)]
    at = [[[EMPTY] * m for _ in range(SLOTS)] for _ in range(p)]  # at[r][code][mb]: the op's new slot
    count = [[0] * SLOTS for _ in range(p)]
    free = [0] * p
    sweeps = ((range(p), _DOWN_AT), (range(p - 1, -1, -1), _UP_AT))
    inputs = _inputs(p)
    if any(len(row) < width for row in grid):
        raise IndexError(width)
    for col in zip(*grid, strict=False):  # the first row's width: none is shorter, a longer one is cut
        for ranks, side in sweeps:
            for r in ranks:
                code = col[r]
                if not side[code]:
                    continue
                mine = count[r]
                mb = mine[code]
                if mb >= m:
                    raise _Invalid
                slot = free[r]
                src = inputs[r][code]
                if src is not None:
                    ready = at[src][code][mb]
                    if ready < 0:
                        raise _Invalid
                    if ready >= slot:
                        slot = ready + 1
                out[r][slot] = code
                at[r][code][mb] = slot
                mine[code] = mb + 1
                free[r] = slot + 1
    end = max(free)
    return [row[:end] for row in out]


def warm_layout(
    r: int, p: int, have: list[int], most_f0: int, most_f1: int, strict: bool = True
) -> list[int] | None:
    """Rank r's warm-up from slot r on (EMPTY: a slot left as it is): 2(p-1-r) slots for F0, r+1 (F0, F1)
    pairs, then (B1, W1, F1-or-F0) triples until every op it had is placed again, a W1 only after a B1
    without one. A slot whose op is used up (or over its limit in the first two parts) stays empty; None
    when only W1's are left; `strict`: an F1 due while no F0 is ahead of it breaks the block (`_Invalid`)."""
    placed = [0] * SLOTS
    out: list[int] = []

    def put(code: int, limit: int) -> bool:
        if placed[code] < min(limit, have[code]):
            placed[code] += 1
            out.append(code)
            return True
        out.append(EMPTY)
        return False

    for _ in range(2 * (p - 1 - r)):
        put(F0, most_f0)
    for _ in range(r + 1):
        put(F0, most_f0)
        put(F1, most_f1)
    while placed != have:
        moved = put(B1, have[B1])
        moved |= put(W1, placed[B1])
        if placed[F1] < have[F1]:
            if strict and placed[F1] >= placed[F0]:
                raise _Invalid
            moved |= put(F1, have[F1])
        else:
            moved |= put(F0, have[F0])
        if not moved:
            return None
    return out


def warm_up(grid: Slots, m: int) -> Slots:
    """Each rank's ops before its first B0 taken out and laid out again (`warm_layout`): rank r keeps
    min(r+1, peak/2) F1's and peak minus that F0's before its first B1 (peak: at most 2p)."""
    p = len(grid)
    top = min(peak(grid), 2 * p)
    for r, row in enumerate(grid):
        have = [0] * SLOTS
        for j, code in enumerate(row):
            if code == B0:
                break
            if code == W0:
                raise _Invalid
            if code >= 0:
                have[code] += 1
                row[j] = EMPTY
        most_f1 = min(r + 1, top // 2, m)
        layout = warm_layout(r, p, have, min(top - most_f1, m), most_f1)
        if layout is None:
            raise _Invalid
        for i, code in enumerate(layout):
            if code >= 0:
                row[r + i] = code
    return grid


def keep_first(grid: Slots, m: int) -> Slots:
    """Each rank's first m ops of each code."""
    for row in grid:
        seen = [0] * SLOTS
        for j, code in enumerate(row):
            if code >= 0:
                seen[code] += 1
                if seen[code] > m:
                    row[j] = EMPTY
    return grid


def hold_wgrads(grid: Slots, top: int) -> Slots:
    """Few microbatches: each rank's first weight gradients moved, in order, to slots appended after its
    end, until the rank holds `top` activations (every rank gets top - lowest rank peak slots)."""
    peaks = rank_peaks(grid)
    room = max(top - min(peaks), 0)
    for r, row in enumerate(grid):
        moved = []
        for j, code in enumerate(row):
            if peaks[r] + len(moved) >= top:
                break
            if _kind(code) == 2:
                moved.append(code)
                row[j] = EMPTY
        row.extend(moved + [EMPTY] * (room - len(moved)))
    return grid


def _take_last(row: list[int], quota: dict[int, int]) -> dict[int, int]:
    """Empties the last `quota[code]` ops of each code in the row; how many of each it took."""
    taken = dict.fromkeys(quota, 0)
    for j in range(len(row) - 1, -1, -1):
        code = row[j]
        if code in taken and taken[code] < quota[code]:
            taken[code] += 1
            row[j] = EMPTY
    return taken


def _last(row: list[int], code: int) -> int:
    """The slot of the row's last op of that code (EMPTY: none)."""
    return len(row) - 1 - row[::-1].index(code) if code in row else EMPTY


def cool_down(grid: Slots, m: int, tight: bool = True) -> Slots:
    """The tail laid out by formula from t, the first rank's last F1: rank r's last n0 = min((peak+1)/2, m)
    B0's go to t + 2p - r - 2i (i < n0: up the ranks, two slots apart) and its last
    n1 = min(r+1, peak - n0, m) B1's to t + 1 + r - 2i (down the ranks); the weight gradients taken off the
    tail (at least one per moved backward of its chunk and `peak` in all) go back, chunk 1's first, to the
    free slots after the rank's last weight gradient, each only once its backward is placed (`squeeze`d
    after: `tight`=False leaves the slots as laid out)."""
    p = len(grid)
    top = peak(grid)
    if tight and top > 2 * p:
        raise _Invalid
    most_b0 = min((top + 1) // 2, m)
    most_b1 = min(top - most_b0, m)
    t = EMPTY
    for r, row in enumerate(grid):
        if r == 0:
            t = _last(row, F1)
        taken = _take_last(row, {B1: min(r + 1, most_b1), B0: most_b0})
        n1, n0 = taken[B1], taken[B0]
        w1 = w0 = 0
        for j in range(len(row) - 1, -1, -1):
            if w1 >= n1 and w0 >= n0 and w1 + w0 >= top:
                break
            if row[j] == W1:
                w1 += 1
                row[j] = EMPTY
            elif row[j] == W0:
                w0 += 1
                row[j] = EMPTY
        for i in range(n0):
            slot = t + 2 * p - r - 2 * i
            if not 0 <= slot < len(row) or row[slot] != EMPTY:
                raise _Invalid
            row[slot] = B0
        for i in range(n1):  # may land on an op: the final check then drops the block
            slot = t + 1 + r - 2 * i
            if not 0 <= slot < len(row):
                raise _Invalid
            row[slot] = B1
    for row in grid:
        last_w = max(_last(row, W0), _last(row, W1))
        owed = [0] * SLOTS  # owed[W]: backwards of its chunk without their weight gradient so far
        for j, code in enumerate(row):
            if code >= 0:
                kind = code >> 1
                if kind == 1:
                    owed[code + 2] += 1
                elif kind == 2:
                    owed[code] -= 1
            elif j > last_w:
                wgrad = W1 if owed[W1] > 0 else W0 if owed[W0] > 0 else EMPTY
                if wgrad >= 0:
                    row[j] = wgrad
                    owed[wgrad] -= 1
        row.extend([W1] * max(owed[W1], 0) + [W0] * max(owed[W0], 0))
    width = max(len(row) for row in grid)
    for row in grid:
        row.extend([EMPTY] * (width - len(row)))
    return squeeze(grid, m) if tight else grid


def fill_bubbles(grid: Slots, m: int) -> Slots:
    """Every free slot, in time order (ranks in order within a slot), takes the first later op of its rank
    that is ready (its input ran in an earlier slot) and, for a forward, finds the rank below the peak over
    the ops it jumps; each code is tried once per slot, and only codes whose last op (in the grid as given)
    is still ahead."""
    p = len(grid)
    top = peak(grid)
    width = len(grid[0])
    inputs = _inputs(p)
    # per rank: its codes by the slot of their last op (a code leaves the tried set once that is passed)
    lasts: list[list[tuple[int, int]]] = []
    final = []  # the rank's last op: no free slot after it to fill
    for row in grid:
        rev = row[::-1]
        last = [(width - 1 - rev.index(code), code) for code in range(SLOTS) if code in row]
        lasts.append(sorted(last))
        final.append(max((j for j, _ in last), default=EMPTY))
    ahead = [sum(1 << code for _, code in last) for last in lasts]  # bit per code still ahead
    gone = [0] * p  # how many of `lasts[r]` are passed
    live = [0] * p
    done = [[0] * SLOTS for _ in range(p)]
    at = [[[EMPTY] * m for _ in range(SLOTS)] for _ in range(p)]
    for j in range(width):
        for r in range(p):
            row = grid[r]
            code = row[j]
            if code >= 0:
                mine = done[r]
                at[r][code][mine[code]] = j
                mine[code] += 1
                live[r] += LIVE[code]
                continue
            if j >= final[r]:
                continue
            last = lasts[r]
            while gone[r] < len(last) and last[gone[r]][0] <= j:
                ahead[r] &= ~(1 << last[gone[r]][1])
                gone[r] += 1
            left = ahead[r]
            if not left:
                continue
            mine = done[r]
            src_of = inputs[r]
            live_ahead = rise = 0  # activations gained over the ops jumped; their running maximum
            for k in range(j + 1, width):
                code = row[k]
                if code < 0:
                    continue
                jumped_rise = rise
                live_ahead += LIVE[code]
                if live_ahead > rise:
                    rise = live_ahead
                bit = 1 << code
                if not left & bit:
                    continue
                left ^= bit
                if code < 2 and live[r] + jumped_rise >= top:  # a forward over the peak
                    if not left:
                        break
                    continue
                mb = mine[code]
                if code >= 4:
                    ready = mine[code - 2] > mb
                elif src_of[code] is None:
                    ready = code == F0 or mine[_TURN[code]] > mb
                else:
                    ran = at[src_of[code]][code][mb]
                    ready = 0 <= ran < j
                if not ready:
                    if not left:
                        break
                    continue
                row[j], row[k] = code, EMPTY
                at[r][code][mb] = j
                mine[code] = mb + 1
                live[r] += LIVE[code]
                break
    return grid


def pair_wgrads(grid: Slots) -> Slots:
    """Each weight gradient becomes that of the oldest backward of its rank still without one."""
    for row in grid:
        waiting: list[int] = []
        head = 0
        for j, code in enumerate(row):
            if _kind(code) == 1:
                waiting.append(code + 2)
            elif _kind(code) == 2:
                if head == len(waiting):
                    raise _Invalid
                row[j] = waiting[head]
                head += 1
    return grid


def _placements(grid: Slots, m: int) -> list[list[list[int]]] | None:
    """slot[r][code][mb] of every op, None unless each rank runs exactly m ops of each code."""
    out = []
    for row in grid:
        mine: list[list[int]] = [[] for _ in range(SLOTS)]
        for j, code in enumerate(row):
            if code >= 0:
                mine[code].append(j)
        if any(len(x) != m for x in mine):
            return None
        out.append(mine)
    return out


def correct(grid: Slots, m: int) -> bool:
    """Every op m times on every rank; each weight gradient after its backward; each chain's turn on its end
    rank in order; every op of an inner rank after its input on the neighbour."""
    at = _placements(grid, m)
    if at is None:
        return False
    p = len(grid)
    for r in range(p):
        me = at[r]
        for mb in range(m):
            if me[B1][mb] >= me[W1][mb] or me[B0][mb] >= me[W0][mb]:
                return False
            if r == 0 and me[F1][mb] >= me[B1][mb]:
                return False
            if r == p - 1 and (me[F0][mb] >= me[F1][mb] or me[B1][mb] >= me[B0][mb]):
                return False
            if 0 < r < p - 1:
                for code in (F0, F1, B0, B1):
                    src = at[r - 1 if DOWN[code] else r + 1]
                    if src[code][mb] >= me[code][mb]:
                        return False
    return True


def build(p: int, m: int, rows: list[list[int]], budget: int) -> tuple[Slots | None, int, int | None]:
    """(grid, peak, needed) of one block under `budget` chunk activations (grid None: not a schedule within
    it). The peak returned with None tells the caller whether a wider split could fit at all; `needed` is
    the peak the budget was checked against (None when the block failed before that check), which lets
    `best` derive the result under a smaller budget."""
    big = max(m, 2 * p)
    grid = tile(rows, p, big)
    first = peak(grid)
    if (m == big and first > budget) or first > 2 * p:
        return None, first, (first if first <= 2 * p else None)
    needed = first if m == big else None
    grid = squeeze(warm_up(squeeze(grid, big), big), big)
    top = peak(grid)
    if top > first:
        return None, first, needed
    if m < big:
        grid = keep_first(grid, m)
        if _holds(p, m, budget):
            grid = hold_wgrads(grid, min(2 * p, top))
        grid = squeeze(grid, m)
        first = top = needed = peak(grid)
        if top > budget:
            return None, top, needed
    grid = pair_wgrads(fill_bubbles(cool_down(grid, m), m))
    top = peak(grid)
    if top > first:
        return None, first, needed
    if not correct(grid, m):
        return None, top, needed
    return grid, top, needed


def _holds(p: int, m: int, budget: int) -> bool:
    """Whether the first weight gradients are held back (`hold_wgrads`): few microbatches, memory to spare."""
    return m < 2 * p and m <= p and 2 * m <= budget


def _ops(row: list[int]) -> list[tuple[int, int]]:
    """A rank's ops in slot order as (code, microbatch)."""
    seen = [0] * SLOTS
    out = []
    for code in row:
        if code >= 0:
            out.append((code, seen[code]))
            seen[code] += 1
    return out


def span(grid: Slots, f: float, b: float, w: float, comm: float) -> float:
    """Longest rank span (start of the first F0 to the end of the last weight gradient) of the grid's order
    on the clock (`node_times`), with one cost per kind and `comm` per hop between ranks."""
    p = len(grid)
    n = 2 * p
    costs = StageCosts((f,) * n, (b,) * n, (w,) * n, (1.0,) * n, comm)
    m = sum(code == F0 for code in grid[0])
    try:
        timing = node_times(v_shape(p), m, to_order(grid), costs)
    except PrimusppError as err:  # an order that waits on itself
        raise _Invalid from err
    return max(ends[-1] - starts[0] for starts, ends in zip(timing.starts, timing.ends, strict=True))


Built = tuple[Slots | None, int, int | None, float]


def _outcome(
    p: int, m: int, rows: list[list[int]], budget: int, cost: tuple[float, float, float, float]
) -> Built:
    """`build` and the grid's `span`; a block that breaks an invariant gives no grid, a peak of 0 (it does
    not end its spacing's walk) and `needed` -1 (failed, not known where)."""
    try:
        grid, held, needed = build(p, m, rows, budget)
        return grid, held, needed, (span(grid, *cost) if grid is not None else float("inf"))
    except (_Invalid, IndexError):
        return None, 0, -1, float("inf")


def best(
    p: int,
    m: int,
    budgets: Sequence[int],
    cost: tuple[float, float, float, float],
    thin: bool = False,
) -> list[Slots | None]:
    """For each budget (chunk activations), the block of the space with the shortest `span` among those
    within it (the first found on a tie). A spacing's walk over the splits ends at the first block whose
    peak is above the budget. Every block is built under the largest budget; a smaller one reuses that
    build unless the weight-gradient hold-back differs, only rejecting it when it needed more.

    `thin`: only the blocks whose tiled peak (`tile`, before any squeeze; cheap) is within one chunk below
    the smallest budget up to the largest are built (about a ninth of the space at p = 16). The shortest
    spans come from blocks that use their budget: at p = 16, m = 16, under every cost case of
    bench/reference_quality.py, the thinned space finds the same shortest span as the whole one at budgets
    of 24, 25 and 32 chunks."""
    budgets = [min(2 * p, x) for x in budgets]
    most = max(budgets)
    window = range(min(budgets) - 1, most + 1) if thin else None
    big = max(m, 2 * p)
    found: list[tuple[float, Slots] | None] = [None] * len(budgets)
    memo: dict[tuple[tuple[int, ...], int], Built] = {}
    tiled: dict[tuple[int, ...], int] = {}  # thin: each block's tiled peak

    def outcome(key: tuple[int, ...], rows: list[list[int]], budget: int) -> Built:
        if (key, budget) in memo:
            return memo[(key, budget)]
        full = memo.get((key, most))
        if budget == most or full is None or full[2] == -1:
            res = _outcome(p, m, rows, budget, cost)
        elif full[2] is None:
            res = full
        elif _holds(p, m, budget) != _holds(p, m, most):
            res = _outcome(p, m, rows, budget, cost)
        elif full[2] > budget:
            res = (None, full[2], full[2], float("inf"))
        else:
            res = full
        memo[(key, budget)] = res
        return res

    for first in first_rows():
        for k0 in SPACINGS:
            for k1 in SPACINGS:
                if k1 > k0:
                    break
                walking = list(range(len(budgets)))
                for split in range(1, p):
                    if not walking:
                        break
                    rows = block(first, k0, k1, split, p)
                    if rows is None:
                        continue
                    key = tuple(s for row in rows for s in row)  # k0 == k1: every split the same block
                    if window is not None:
                        if key not in tiled:
                            tiled[key] = peak(tile(rows, p, big))
                        if tiled[key] not in window:
                            continue
                    outcome(key, rows, most)
                    for i in list(walking):
                        grid, held, _, length = outcome(key, rows, budgets[i])
                        if held > budgets[i]:
                            walking.remove(i)
                        elif grid is not None and (found[i] is None or length < found[i][0]):
                            found[i] = (length, grid)
    return [None if x is None else x[1] for x in found]


_KIND_CODES = {NodeKind.F: F0, NodeKind.B: B0, NodeKind.W: W0}


def code_of(node: Node, p: int) -> int:
    """A node's op code on its rank (the kind's index, doubled, plus its chunk)."""
    return _KIND_CODES[node.kind] + (node.stage >= p)


def to_order(grid: Slots) -> ComputeOrder:
    """The grid as a compute order (microbatch: the op's count among its code on its rank)."""
    p = len(grid)
    kinds = (NodeKind.F, NodeKind.B, NodeKind.W)
    return [
        [Node(kinds[_kind(code)], mb, r if code % 2 == 0 else 2 * p - 1 - r) for code, mb in _ops(row)]
        for r, row in enumerate(grid)
    ]


def mean_costs(costs: StageCosts) -> tuple[float, float, float, float]:
    """One cost per kind (the mean over stages) and the comm latency: what the construction ranks by."""
    n = len(costs.forward)
    return (
        sum(costs.forward) / n,
        sum(costs.backward) / n,
        sum(costs.wgrad) / n,
        float(costs.comm),
    )


def floor_order(
    p: int,
    m: int,
    chunks: int,
    costs: StageCosts,
    cap: float,
    effort: str = "auto",
    report: dict | None = None,
) -> ComputeOrder | None:
    """The construction's order for `chunks` live chunk activations (or for one more, when that order still
    holds within `cap` under the memory model); None when no block fits. With effort="auto" the whole block
    space up to `GRID_WORK` nodes x chunks, the thinned one up to `THIN_WORK`, none beyond (stated in
    `report["grid"]`); effort="full" always takes the whole space."""
    work = 6 * p * max(m, 2 * p) * chunks
    thin = effort != "full" and work > GRID_WORK
    if thin and work > THIN_WORK:
        if report is not None:
            report["grid"] = f"skipped: {work:,} nodes x chunks (limit {THIN_WORK:,})"
        return None
    if report is not None:
        report["grid"] = (
            f"built from the thinned space: {work:,} nodes x chunks (whole space up to {GRID_WORK:,})"
            if thin
            else f"built: {work:,} nodes x chunks (limit {GRID_WORK:,})"
        )
    wider = [chunks + 1] if chunks < 2 * p else []
    grids = best(p, m, [chunks, *wider], mean_costs(costs), thin)
    if wider and grids[1] is not None:  # one chunk more whose order still holds within the cap
        order = to_order(grids[1])
        if order_peak(order, memory_units(v_shape(p), costs.activation), costs.fractions()) <= cap + 1e-9:
            return order
    return None if grids[0] is None else to_order(grids[0])


def _dominates(sc: Score, floor: Score) -> bool:
    return sc.max_span <= floor.max_span + 1e-9 * max(1.0, floor.max_span) and (
        sc.makespan <= floor.makespan + 1e-9 * max(1.0, floor.makespan)
    )


def floor_pick(
    placement: Placement,
    m: int,
    candidates: Sequence[tuple[str, ComputeOrder]],
    costs: StageCosts,
    cap: float | None,
    floor_of: Callable[[], ComputeOrder | None],
    report: dict | None = None,
) -> tuple[str, ComputeOrder]:
    """`refine.pick_refined` over the candidates and the floor (`floor_of()`), restricted to the orders no
    worse than the floor in both longest span and step time (the floor itself always is). Where the best
    candidate is already at both lower bounds (`portfolio.lower_bounds`) nothing can beat it: the floor
    is not built."""
    fractions = costs.fractions()
    scored = [(name, order, score(placement, m, order, costs, fractions)) for name, order in candidates]
    fits = [c for c in scored if cap is None or c[2].peak <= cap + 1e-9]
    floor = None
    if fits:
        lead = min(fits, key=lambda c: c[2].key("span"))
        span_low, step_low = lower_bounds(placement, lead[1], costs)
        tol = 1e-9 * max(1.0, lead[2].makespan)
        if lead[2].max_span > span_low + tol or lead[2].makespan > step_low + tol:
            floor = floor_of()
        elif report is not None:
            report["grid"] = "not built: the best candidate is at both lower bounds"
    else:
        floor = floor_of()
    pool_in: list = list(scored)
    if floor is not None:
        pool_in.append(("grid", floor))
    pool = refined_pool(placement, m, pool_in, costs, cap, "span")
    if pool is None:
        raise _no_fit(cap)
    ranked = sorted(range(len(pool)), key=lambda i: (pool[i][2].key("span"), i))
    ref = next((pool[i][2] for i in ranked if pool[i][0] == "grid"), None)
    for i in ranked:
        if cap is not None and pool[i][2].peak > cap + 1e-9:
            continue
        if ref is None or _dominates(pool[i][2], ref):
            return pool[i][0], pool[i][1]
    raise _no_fit(cap)  # not reached: the floor (or, without one, the best candidate) fits the cap


def _no_fit(cap: float | None):
    return ScheduleError(f"no candidate schedule fits an activation cap of {cap:g}", key="max_mem")
