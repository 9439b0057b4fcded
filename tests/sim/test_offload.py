"""OFFLOAD/RELOAD cost time: a host transfer (`costs.offload`) runs on its rank's host link beside compute,
and the backward that needs a reloaded activation waits for its RELOAD, so the memory offload saves is weighed
against the time the link cannot hide."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule import timing_arrays
from primuspp.schedule.costs import CostModel
from primuspp.schedule.timing import node_times
from primuspp.sim.engine import simulate
from tests.oracles.timing import node_times_reference


def _step(algo: str, pp: int, m: int, costs: CostModel, offload: bool) -> float:
    table = build_schedule(algo, pp, 2, m, costs, offload=offload)
    return simulate(table, costs).metrics.step_time


def test_a_slow_host_link_is_slower_than_a_fast_one_and_never_faster_than_no_offload():
    base = dict(forward=1.0, backward=1.0, wgrad=1.0, comm=0.05)
    for algo in ("v-half", "v-min"):
        plain = _step(algo, 8, 32, CostModel(**base), False)
        free = _step(algo, 8, 32, CostModel(**base), True)
        fast = _step(algo, 8, 32, CostModel(**base, offload=0.01), True)
        slow = _step(algo, 8, 32, CostModel(**base, offload=2.0), True)
        assert free == plain  # a free transfer changes nothing (the old model)
        assert slow > fast >= plain, (algo, slow, fast, plain)


@settings(max_examples=15, deadline=None)
@given(
    algo=st.sampled_from(["v-half", "v-min"]),
    pp=st.integers(2, 6),
    m=st.integers(2, 12),
    fast=st.sampled_from([0.0, 0.25, 0.1]),
    extra=st.sampled_from([0.5, 1.0 / 3, 4.0]),
)
def test_offload_time_only_adds(algo, pp, m, fast, extra):
    base = dict(forward=1.0, backward=1.5, wgrad=0.5, comm=0.125)
    plain = _step(algo, pp, m, CostModel(**base), False)
    quick = _step(algo, pp, m, CostModel(**base, offload=fast), True)
    slow = _step(algo, pp, m, CostModel(**base, offload=fast + extra), True)
    assert slow >= quick >= plain


@settings(max_examples=10, deadline=None)
@given(algo=st.sampled_from(["v-half", "v-min"]), offload=st.sampled_from([0.25, 0.3, 1.0 / 3, 2.0]))
def test_the_three_clock_forms_time_offload_alike(algo, offload):
    costs = CostModel(1.0, 1.0, 1.0, comm=0.125, offload=offload)
    table = build_schedule(algo, 4, 2, 8, costs, offload=True)
    sc, order, p = costs.for_placement(table.placement), table.compute_order(), table.placement
    ref, loop = node_times_reference(p, 8, order, sc), node_times(p, 8, order, sc)
    assert ref.ends == loop.ends and ref.starts == loop.starts
    got = timing_arrays.solve(p, 8, order, sc, table.ranks.rows)
    if got is not None:
        assert np.array_equal(got.ends, [t for row in loop.ends for t in row])
    # each transfer takes its time on its rank
    took = {
        e - s
        for row_s, row_e, seq in zip(loop.starts, loop.ends, order, strict=True)
        for s, e, n in zip(row_s, row_e, seq, strict=True)
        if n.kind.is_memory
    }
    assert took and all(abs(t - offload / 2) < 1e-9 for t in took)


def test_the_model_times_a_transfer_over_the_host_link():
    from primuspp.models import PRESETS
    from primuspp.models.hardware import load_hardware
    from primuspp.models.parallel import Parallel
    from primuspp.models.project import stage_plan

    spec, hw = PRESETS["llama3-8b"], load_hardware("h100")
    par = Parallel(pp=4, vpp=2, micro_batch_size=1, global_batch_size=16, seq_len=4096)
    plan = stage_plan(spec, hw, par, "v-half")
    act = [plan.parts.activation[plan.placement.model_part[s]] for s in range(plan.placement.num_stages)]
    assert plan.costs.offload == tuple((hw.host.latency + a / hw.host.bandwidth) * 1e3 for a in act)
    assert all(t > 0.1 for t in plan.costs.offload)  # hundreds of MB at 64 GB/s: milliseconds, not free
    slow = hw.model_copy(update={"host": hw.host.model_copy(update={"bandwidth": hw.host.bandwidth / 8})})
    table = build_schedule("v-half", 4, 2, 8, plan.costs, offload=True)
    fast_step = simulate(table, plan.costs).metrics.step_time
    slow_costs = stage_plan(spec, slow, par, "v-half").costs
    slow_step = simulate(
        build_schedule("v-half", 4, 2, 8, slow_costs, offload=True), slow_costs
    ).metrics.step_time
    plain = simulate(build_schedule("v-half", 4, 2, 8, plan.costs), plan.costs).metrics.step_time
    assert slow_step > fast_step >= plain
