"""DualPipe (DeepSeek-V3) and DualPipe-V: forwards of one microbatch overlapped with backwards of another.

DualPipe runs two pipelines over the same ranks in opposite directions (`bidirectional` placement: even
microbatches go down ranks 0..p-1, odd ones come up p-1..0, each rank holds a stage of both model copies).
DualPipe-V folds the same idea onto the V placement (one model copy, two chunks per rank). On each rank,
"phase 0" is the stage it meets early on its route (DualPipe: the direction in which it sits in the first
half; V: chunk 0) and "phase 1" the other. With H pipeline halves (DualPipe: p/2; V: p), h = the rank's
distance from the nearer end (min(r, p-1-r); V: r) and M microbatches per phase (m/2; V: m), every rank
runs the same eight steps:

1. 2(H-h-1) forwards of phase 0;
2. h+1 pairs: forward phase 0, forward phase 1;
3. H-h-1 times: B of phase 1 (weight grad deferred), its W, forward phase 1;
4. M-2H+h+1 times: FB(forward phase 0 + full backward phase 1), FB(forward phase 1 + full backward
   phase 0) — the rank nearest the turn runs its first pair unfused, so its forward leaves early;
5. H-h-1 times: full backward phase 1, FB(forward phase 1 + full backward phase 0);
6. h+1 pairs: backward phase 1, backward phase 0 — from the middle of the step on, as B with W deferred;
7. H-h-1 times: a deferred W, B of phase 0 (W deferred);
8. h+1 deferred W's.

Deferred W's run first-in-first-out. An FB node costs fb_overlap x (F + B + W) in the simulator. The
schedule needs at least 2H microbatches per phase arrangement (m >= 2p) and, for DualPipe, even p and m.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.orders import code
from primuspp.schedule.array_order import ArrayOrder
from primuspp.schedule.nodes import NodeKind

_F, _B, _W, _BW = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW


def rank_order(
    H: int,
    h: int,
    M: int,
    phases: tuple[tuple[int, list[int]], tuple[int, list[int]]],
    make: Callable[[NodeKind, int, int], Any],
    fuse: Callable[[Any, Any], Any],
) -> list:
    """The eight steps for one rank; `phases[i]` = (stage, microbatches in order) of phase i. Each step is
    `make(kind, microbatch, stage)`, an FB `fuse(forward, backward)` (`generate_dualpipe` makes tuples of
    codes; tests/oracles/generators.py Nodes)."""
    (stage0, mbs0), (stage1, mbs1) = phases
    # each phase's forwards in order, taken from the front; backwards likewise (as B or BW when taken)
    fwd = (iter([make(_F, mb, stage0) for mb in mbs0]), iter([make(_F, mb, stage1) for mb in mbs1]))
    bwd = (iter(mbs0), iter(mbs1))
    stage = (stage0, stage1)
    out: list = []
    deferred: deque = deque()

    def backward(ph: int, split: bool) -> Any:
        mb = next(bwd[ph])
        if split:
            deferred.append(make(_W, mb, stage[ph]))
            return make(_B, mb, stage[ph])
        return make(_BW, mb, stage[ph])

    f0, f1 = fwd
    for _ in range(2 * (H - h - 1)):
        out.append(next(f0))
    for _ in range(h + 1):
        out.append(next(f0))
        out.append(next(f1))
    for _ in range(H - h - 1):
        out.append(backward(1, split=True))
        out.append(deferred.popleft())
        out.append(next(f1))
    for i in range(M - 2 * H + h + 1):
        if i == 0 and h == H - 1:  # nearest the turn: the forward goes out on its own
            out.append(next(f0))
            out.append(backward(1, split=False))
        else:
            out.append(fuse(next(f0), backward(1, split=False)))
        out.append(fuse(next(f1), backward(0, split=False)))
    for _ in range(H - h - 1):
        out.append(backward(1, split=False))
        out.append(fuse(next(f1), backward(0, split=False)))
    split = False
    for i in range(h + 1):
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        out.append(backward(1, split))
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        out.append(backward(0, split))
    for _ in range(H - h - 1):
        out.append(deferred.popleft())
        out.append(backward(0, split=True))
    out.extend(deferred)
    return out


_FB_CODE = code(NodeKind.FB)


def _columns(ranks: list[list]) -> ArrayOrder:
    """Ranks of `rank_order(..., make=_code, fuse=_fused)` steps as an ArrayOrder."""
    node_kind: list[int] = []
    rows: list[tuple[int, int, int]] = []
    part: list[int] = []
    for steps in ranks:
        for step in steps:
            if step[0] == _FB_CODE:
                node_kind.append(_FB_CODE)
                rows += step[1:]
                part += (0, 1)
            else:
                node_kind.append(step[0])
                rows.append(step)
                part.append(0)
    import numpy as np

    cols = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return ArrayOrder.from_rows(node_kind, cols[:, 0], cols[:, 1], cols[:, 2], part, [len(s) for s in ranks])


_CODES = {k: code(k) for k in (_F, _B, _W, _BW)}


def _code(kind: NodeKind, mb: int, stage: int) -> tuple[int, int, int]:
    return (_CODES[kind], mb, stage)


def _fused(forward: tuple, backward: tuple) -> tuple:
    return (_FB_CODE, forward, backward)


def _dualpipe_ranks(req: GenerationRequest, make, fuse) -> list[list]:
    p, m = req.pp, req.micro_batches
    H, M = p // 2, m // 2
    down, up = list(range(0, m, 2)), list(range(1, m, 2))
    order = []
    for r in range(p):
        route0, route1 = (r, down), (2 * p - 1 - r, up)
        phases = (route0, route1) if r < H else (route1, route0)
        order.append(rank_order(H, min(r, p - 1 - r), M, phases, make, fuse))
    return order


def _dualpipe_v_ranks(req: GenerationRequest, make, fuse) -> list[list]:
    p, m = req.pp, req.micro_batches
    mbs = list(range(m))
    return [rank_order(p, r, m, ((r, mbs), (2 * p - 1 - r, mbs)), make, fuse) for r in range(p)]


def generate_dualpipe(req: GenerationRequest) -> ArrayOrder:
    """DualPipe's order as columns (tests/oracles/generators.py: its Node form)."""
    return _columns(_dualpipe_ranks(req, _code, _fused))


def generate_dualpipe_v(req: GenerationRequest) -> ArrayOrder:
    """DualPipe-V's order as columns (tests/oracles/generators.py: its Node form)."""
    return _columns(_dualpipe_v_ranks(req, _code, _fused))
