"""Interleaved 1F1B (Megatron's virtual pipeline): v chunks per rank in loop placement.

`1f1b-interleaved` is megatron-core's order (`get_schedule_table`, `get_pp_rank_microbatches`): microbatches
run in groups of N (`microbatch_group_size_per_vp_stage`); a rank forwards a group through chunk 0, then
the same group through chunk 1, and so on, the last group taking what is left; backwards visit the chunks
in reverse. Rank r runs 2(p - r - 1) + (v - 1)N warm-up forwards, then one forward and one backward.
megatron-core accepts p <= N <= m unless 0 < m mod N < p; the default N is its default, p, where it accepts
that, else the least N it accepts (no N exists for m < p: refused). `1f1b-interleaved-padded` is the order
for groups of p at any m: built for the next multiple of p, the phantom microbatches dropped (removing nodes
from an acyclic order keeps it acyclic).
"""

from __future__ import annotations

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.orders import BW, F, one_f_one_b_columns, simple_columns
from primuspp.schedule.array_order import ArrayOrder


def group_refusal(p: int, m: int, n: int) -> str | None:
    """Why megatron-core refuses group size `n` for p ranks and m microbatches, or None."""
    if not p <= n <= m:
        return f"1f1b-interleaved: megatron-core needs pp={p} <= group_size <= micro_batches={m} (got {n})"
    if 0 < m % n < p:
        return f"1f1b-interleaved: megatron-core refuses group_size={n}: a last group of {m % n} < pp={p}"
    return None


def default_group(p: int, m: int) -> int | None:
    """megatron-core's default N = p where it accepts it, else the least N it accepts (None for m < p)."""
    return next((n for n in range(p, m + 1) if group_refusal(p, m, n) is None), None)


def chunk_sequence(n: int, v: int, m: int, reverse: bool) -> list[tuple[int, int]]:
    """(microbatch, chunk) in the order a rank visits them: megatron-core's `get_schedule_table` for group
    size n (chunks reversed for the backwards)."""
    chunks = range(v - 1, -1, -1) if reverse else range(v)
    seq = []
    for first in range(0, m, n):
        last = m if first + n >= m else first + n
        seq.extend((mb, c) for c in chunks for mb in range(first, last))
    return seq


def _order(p: int, v: int, m: int, n: int, total: int) -> ArrayOrder:
    """Groups of n over `total` microbatches, those from m on dropped."""
    import numpy as np

    fwd, bwd = (
        np.array(chunk_sequence(n, v, total, r), dtype=np.int64).reshape(-1, 2) for r in (False, True)
    )
    ranks = []
    for r in range(p):
        forwards = simple_columns(F, fwd[:, 0], fwd[:, 1] * p + r)
        backwards = simple_columns(BW, bwd[:, 0], bwd[:, 1] * p + r)
        cols = one_f_one_b_columns(2 * (p - r - 1) + (v - 1) * n, forwards, backwards)
        keep = cols[1] < m
        ranks.append(tuple(c[keep] for c in cols))
    return ArrayOrder.from_ranks(ranks)


def generate(req: GenerationRequest) -> ArrayOrder:
    p, v, m = req.pp, req.vpp, req.micro_batches
    n = req.params.get("group_size") or default_group(p, m)
    if n != p:
        req.report["group_size"] = n  # what Megatron's microbatch_group_size_per_vp_stage must be
    return _order(p, v, m, n, m)


def generate_padded(req: GenerationRequest) -> ArrayOrder:
    p, v, m = req.pp, req.vpp, req.micro_batches
    return _order(p, v, m, p, -(-m // p) * p)
