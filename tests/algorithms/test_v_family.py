"""The V family: budgets, the v-auto frontier, offload, small m, unequal costs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule
from primuspp.algorithms.v.blocks import HALF, MIN, ZB, Block, offsets
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.errors import ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import NodeKind
from primuspp.sim import simulate
from tests.algorithms.v_orders import CATALOG

COSTS = CostModel(1000, 1000, 1000)


def metrics(name, pp, m, costs=COSTS, **params):
    return simulate(build_schedule(name, pp, None, m, costs, **params), costs).metrics


@settings(max_examples=12, deadline=None)
@given(pp=st.integers(1, 16))
def test_named_blocks_hold_their_memory_class(pp):
    def peak(block):
        return SlotSchedule(pp, 4 * pp + 4, *offsets(pp, block), tighten=False).peak()

    assert peak(MIN) == 2 * ((pp + 4) // 3)
    assert peak(HALF) == 2 * ((pp + 2) // 2)
    assert peak(ZB) == 2 * pp


@settings(max_examples=40, deadline=None)
@given(
    pp=st.integers(1, 24),
    block=st.sampled_from(CATALOG) | st.builds(Block, st.just("any"), *[st.integers(1, 5)] * 6),
)
def test_block_offsets_never_collide(pp, block):
    fo, bo = offsets(pp, block)
    n = 2 * pp
    for r in range(pp):
        residues = {fo[r] % 6, fo[n - 1 - r] % 6, bo[r] % 6, bo[n - 1 - r] % 6}
        assert len(residues) == 4, (block.name, r)


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 16), (6, 24), (8, 16)])
def test_v_auto_frontier_is_monotone_and_within_budget(pp, m):
    """Every half-microbatch budget from v-min's to zbv's, at m = 2p and 4p (p 8 at m 16: its frontier at
    m 32 costs 1.5x as much; the named budgets at p 8 m 32 are pinned below)."""
    lo, hi = (pp + 4) // 3, pp
    previous = 1.0
    for twice in range(2 * lo, 2 * hi + 1):
        budget = twice / 2
        r = metrics("v-auto", pp, m, max_mem=budget)
        assert r.peak_memory <= budget
        assert r.steady_bubble_rate <= previous + 1e-12
        previous = r.steady_bubble_rate
    assert previous == 0  # at zbv's budget


def test_v_auto_matches_the_named_schedules_at_their_budgets():
    for name, budget in (("v-min", 4), ("v-half", 5), ("zbv", 8)):
        named = metrics(name, 8, 32)
        auto = metrics("v-auto", 8, 32, max_mem=budget)
        assert auto.steady_bubble_rate <= named.steady_bubble_rate + 1e-12


def test_v_auto_below_v_min_is_valid_and_above_zbv_uses_no_more():
    assert metrics("v-auto", 8, 32, max_mem=1).peak_memory <= 1
    assert metrics("v-auto", 8, 32, max_mem=20).peak_memory == 8
    with pytest.raises(ScheduleError, match=r"max_mem=0\.5 is below one microbatch"):
        build_schedule("v-auto", 8, None, 32, max_mem=0.5)


@pytest.mark.parametrize("name", ["zbv", "v-half", "v-min", "v-auto"])
def test_offload_moves_chunk0_activations(name):
    plain = build_schedule(name, 8, None, 32, COSTS)
    off = build_schedule(name, 8, None, 32, COSTS, offload=True)
    kinds = [n.kind for rank in off.ranks for n in rank]
    assert kinds.count(NodeKind.OFFLOAD) == kinds.count(NodeKind.RELOAD) == 8 * 32
    a, b = simulate(plain, COSTS).metrics, simulate(off, COSTS).metrics
    assert b.step_time == a.step_time
    assert b.per_rank[0].peak_memory < a.per_rank[0].peak_memory  # rank 0 holds chunk-0 activations
    assert b.peak_memory <= a.peak_memory
    for rank in off.compute_order():
        for i, node in enumerate(rank):
            if node.kind is NodeKind.OFFLOAD:
                assert rank[i - 1].kind is NodeKind.F and rank[i - 1].stage == node.stage < 8
            if node.kind is NodeKind.RELOAD:
                assert rank[i + 1].kind is NodeKind.B and rank[i + 1].stage == node.stage


def test_offload_flag_parses_text():
    assert build_schedule("zbv", 2, None, 4, offload="yes").params["offload"] is True
    with pytest.raises(ScheduleError, match="offload='maybe' must be bool"):
        build_schedule("zbv", 2, None, 4, offload="maybe")


@pytest.mark.parametrize("name", ["zbv", "v-half", "v-min"])
def test_small_m_uses_only_existing_microbatches(name):
    for m in range(1, 2 * 8):
        table = build_schedule(name, 8, None, m)
        assert {n.microbatch for _, n in table.compute_nodes()} == set(range(m))


def test_unequal_costs_and_comm_stay_valid_and_capped():
    costs = CostModel(
        forward=tuple(1 + 0.2 * s for s in range(16)),
        backward=tuple(2 - 0.05 * s for s in range(16)),
        wgrad=0.7,
        comm=0.3,
    )
    for name, cap in (("zbv", 8), ("v-half", 5), ("v-min", 4)):
        assert metrics(name, 8, 24, costs).peak_memory <= cap
