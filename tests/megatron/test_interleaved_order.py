"""1f1b-interleaved is megatron-core's interleaved order: every rank's forwards and backwards in the order
`forward_backward_pipelining_with_interleaving` runs them (its `get_schedule_table` and
`get_pp_rank_microbatches`), for every group size N it accepts; the default N is its default where it
accepts that; an N it refuses is refused."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

from primuspp.algorithms.registry import build_schedule, refusal
from primuspp.errors import ScheduleError
from primuspp.schedule.nodes import NodeKind


def megatron_order(p: int, v: int, m: int, n: int, rank: int) -> list[tuple[str, int, int]]:
    """(kind, microbatch, stage) as megatron-core runs them on `rank`: warm-up forwards, forward k +
    warm-up then backward k, then the remaining backwards; backward k is on the mirrored chunk."""
    group = SimpleNamespace(size=lambda: p, rank=lambda: rank)
    comm = SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=v)
    total, _, warmup, remaining = get_pp_rank_microbatches(m, v, n, p2p_communicator=comm)
    table = get_schedule_table(m, v, n)

    def fwd(k):
        mb, chunk = table[k]
        return ("F", mb, chunk * p + rank)

    def bwd(k):
        mb, chunk = table[k]
        return ("BW", mb, (v - 1 - chunk) * p + rank)

    order = [fwd(k) for k in range(warmup)]
    for k in range(remaining):
        order += [fwd(k + warmup), bwd(k)]
    return order + [bwd(k) for k in range(remaining, total)]


def megatron_accepts(p: int, m: int, n: int) -> bool:
    """forward_backward_pipelining_with_interleaving's own checks (a ValueError, then a RuntimeError)."""
    return p <= n <= m and not 0 < m % n < p


def ours(p: int, v: int, m: int, **params) -> list[list[tuple[str, int, int]]]:
    table = build_schedule("1f1b-interleaved", p, v, m, **params)
    return [
        [(n.kind.name, n.microbatch, n.stage) for n in seq if n.kind in (NodeKind.F, NodeKind.BW)]
        for seq in table.compute_order()
    ]


@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 8), v=st.integers(2, 4), m=st.integers(1, 40), data=st.data())
def test_order_is_megatron_cores_for_every_group_size(p, v, m, data):
    n = data.draw(st.integers(max(1, p - 1), max(p, m) + 1), label="group_size")
    if not megatron_accepts(p, m, n):
        assert refusal("1f1b-interleaved", p, v, m, {"group_size": n})
        return
    assert ours(p, v, m, group_size=n) == [megatron_order(p, v, m, n, r) for r in range(p)]


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), v=st.integers(2, 4), m=st.integers(1, 40))
def test_default_group_size_is_megatrons_where_it_runs(p, v, m):
    accepted = [n for n in range(p, m + 1) if megatron_accepts(p, m, n)]
    if not accepted:  # m < p: megatron-core has no order; the padded one runs under its own name
        assert m < p and refusal("1f1b-interleaved", p, v, m, {})
        assert build_schedule("1f1b-interleaved-padded", p, v, m).num_microbatches == m
        return
    n = p if p in accepted else accepted[0]  # megatron's default p, else the least it accepts
    assert ours(p, v, m) == [megatron_order(p, v, m, n, r) for r in range(p)]


def test_a_refused_group_size_names_the_key():
    try:
        build_schedule("1f1b-interleaved", 4, 2, 10, group_size=4)
    except ScheduleError as err:
        assert "group_size=4" in str(err) and "last group of 2" in str(err)
    else:
        raise AssertionError("group_size=4 at m=10, p=4 was accepted")
