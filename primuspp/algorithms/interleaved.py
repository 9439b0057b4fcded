"""Interleaved 1F1B (Megatron's virtual pipeline): v chunks per rank in loop placement.

Microbatches run in groups of p: a rank forwards a group through chunk 0, then the same group through chunk
1, and so on; backwards visit chunks in reverse. When p does not divide m, the order is built for the next
multiple of p and the phantom microbatches are dropped: removing nodes from an acyclic order keeps it
acyclic, so every m >= 1 works (a short last group cannot deadlock, unlike Megatron's warm-up formula).
"""

from __future__ import annotations

from primuspp.algorithms.base import Algorithm, ComputeOrder, GenerationRequest
from primuspp.algorithms.orders import BW, F, node, one_f_one_b, one_f_one_b_columns, simple_columns
from primuspp.schedule.array_order import ArrayOrder


def chunk_sequence(p: int, v: int, m: int, reverse: bool) -> list[tuple[int, int]]:
    """(microbatch, chunk) in the order a rank visits them, for m a multiple of p."""
    seq = []
    chunks = range(v - 1, -1, -1) if reverse else range(v)
    for first in range(0, m, p):
        seq.extend((mb, c) for c in chunks for mb in range(first, first + p))
    return seq


def generate(req: GenerationRequest) -> ArrayOrder:
    """`generate_reference` as columns (no Node built)."""
    import numpy as np

    p, v, m = req.pp, req.vpp, req.micro_batches
    padded = -(-m // p) * p
    fwd = np.array(chunk_sequence(p, v, padded, reverse=False), dtype=np.int64).reshape(-1, 2)
    bwd = np.array(chunk_sequence(p, v, padded, reverse=True), dtype=np.int64).reshape(-1, 2)
    ranks = []
    for r in range(p):
        warmup = (p - r - 1) * 2 + (v - 1) * p
        forwards = simple_columns(F, fwd[:, 0], fwd[:, 1] * p + r)
        backwards = simple_columns(BW, bwd[:, 0], bwd[:, 1] * p + r)
        cols = one_f_one_b_columns(warmup, forwards, backwards)
        keep = cols[1] < m
        ranks.append(tuple(c[keep] for c in cols))
    return ArrayOrder.from_ranks(ranks)


def generate_reference(req: GenerationRequest) -> ComputeOrder:
    p, v, m = req.pp, req.vpp, req.micro_batches
    padded = -(-m // p) * p
    fwd_seq = chunk_sequence(p, v, padded, reverse=False)
    bwd_seq = chunk_sequence(p, v, padded, reverse=True)
    order = []
    for r in range(p):
        warmup = (p - r - 1) * 2 + (v - 1) * p
        forwards = [node(F, mb, c * p + r) for mb, c in fwd_seq]
        backwards = [node(BW, mb, c * p + r) for mb, c in bwd_seq]
        order.append([n for n in one_f_one_b(warmup, forwards, backwards) if n.microbatch < m])
    return order


ALGORITHM = Algorithm(
    name="1f1b-interleaved",
    aliases=("interleaved", "interleaved-1f1b"),
    placement="loop",
    summary="Megatron's virtual-pipeline 1F1B, microbatch groups of p, v chunks per rank",
    memory="p + (p-1)/v",
    constraints="v >= 2, any m >= 1",
    vpp_default=2,
    vpp_rule=">= 2",
    vpp_ok=lambda v: v >= 2,
    generate=generate,
)
