"""Iterations on the emulated cluster (runtime/emulate.py): the optimizer step after every step, behind a
barrier (synchronous) or as soon as the rank's own last node is done (post-validation). Ordering and
semantics only: a wait never ends early, so every bound below holds however loaded the machine is (how
close the times come: bench/post_validation.py)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.runtime.emulate import EmulationSpec, emulate_iterations_worker
from primuspp.runtime.emulate import measured_iterations as figures
from primuspp.runtime.launch import launch
from primuspp.schedule.costs import CostModel
from primuspp.sim.iterations import simulate_iterations
from tests.runtime.workers import run_jobs

#: rank 0's last node (B+W of the last microbatch, 42 ms) far outlasts rank 1's optimizer step (1.5 ms)
COSTS = CostModel(forward=3.0, backward=2.0, wgrad=(40.0, 1.0))
OPT = (4.0, 1.5)  # per rank, ms
STEPS = 3


@pytest.fixture(scope="module")
def ranks():
    """1f1b at p=2, m=3, synchronous then post-validated, in one launch: per mode, each rank's
    RankIterations."""
    table = build_schedule("1f1b", 2, None, 3)
    specs = {
        mode: EmulationSpec(table, COSTS, STEPS, post_validation=mode == "post", optimizer_ms=OPT)
        for mode in ("sync", "post")
    }
    results = launch(run_jobs, 2, [(emulate_iterations_worker, spec) for spec in specs.values()])
    return {
        mode: (spec, [per_rank[i] for per_rank in results]) for i, (mode, spec) in enumerate(specs.items())
    }


def _abs(step, t_ms: float) -> float:
    return step.origin_ns + t_ms * 1e6


def test_every_rank_runs_the_optimizer_step_after_each_step(ranks):
    for _, per_rank in ranks.values():
        for rank, r in enumerate(per_rank):
            assert len(r.steps) == len(r.optimizer) == STEPS
            for i, (step, (start, end)) in enumerate(zip(r.steps, r.optimizer, strict=True)):
                last = max(_abs(step, iv.end) for iv in step.intervals)
                assert start >= last and end - start >= OPT[rank] * 1e6  # after its last node, >= its cost
                if i + 1 < STEPS:
                    assert r.steps[i + 1].origin_ns >= end  # the next step starts after the optimizer step


def test_synchronous_steps_wait_for_the_slowest_rank(ranks):
    _, per_rank = ranks["sync"]
    for i in range(STEPS):
        slowest = max(_abs(r.steps[i], iv.end) for r in per_rank for iv in r.steps[i].intervals)
        assert all(r.optimizer[i][0] >= slowest for r in per_rank)


def test_post_validation_starts_the_next_step_before_the_slowest_rank_is_done(ranks):
    """1f1b p=2: rank 1 ends with B+W of the last microbatch, rank 0 then still runs its own (42 ms): with
    post-validation rank 1 steps (1.5 ms) and starts the next step while rank 0 is still computing."""
    _, per_rank = ranks["post"]
    zero, one = per_rank
    for i in range(STEPS - 1):
        rank0_last = max(_abs(zero.steps[i], iv.end) for iv in zero.steps[i].intervals)
        assert one.steps[i + 1].origin_ns < rank0_last


def test_measured_figures_are_the_simulators_kind(ranks):
    for mode, (spec, per_rank) in ranks.items():
        got = figures(spec, per_rank)
        sim = simulate_iterations(
            spec.table, COSTS, STEPS, post_validation=spec.post_validation, optimizer_cost=OPT
        )
        want = sim.record()
        assert set(got) == set(want)
        assert got["mode"] == want["mode"] == ("post-validation" if mode == "post" else "synchronous")
        assert got["count"] == STEPS and got["optimizer_cost"] == list(OPT)
        ends = got["iteration_ends"]
        assert all(a < b for a, b in pairwise(ends)) and ends[0] == got["first_step_time"]
        assert got["first_step_time"] >= want["first_step_time"]  # every wait lasts at least its cost
        assert 0.0 <= got["steady_bubble_rate"] < 1.0


def test_measured_figures_arithmetic():
    """Two ranks, two steps, times made up (ns on one clock): iteration ends are the last optimizer end
    from the earliest start; the steady bubble counts node and optimizer time of the steps after the first."""
    from primuspp.runtime.emulate import RankIterations
    from primuspp.runtime.runner import RankStep
    from primuspp.trace.timeline import Interval

    def step(rank: int, origin_ms: float, busy: list[tuple[float, float]]) -> RankStep:
        ivs = [Interval("F", 0, rank, 0, a, b) for a, b in busy]
        return RankStep(rank, ivs, [], 0, origin_ns=int(origin_ms * 1e6))

    ms = 1_000_000
    per_rank = [
        RankIterations([step(0, 0, [(0, 6)]), step(0, 8, [(0, 6)])], [(6 * ms, 8 * ms), (14 * ms, 16 * ms)]),
        RankIterations([step(1, 1, [(1, 4)]), step(1, 9, [(0, 5)])], [(5 * ms, 9 * ms), (14 * ms, 19 * ms)]),
    ]
    spec = EmulationSpec(build_schedule("1f1b", 2, None, 1), COSTS, 2, post_validation=True, optimizer_ms=OPT)
    got = figures(spec, per_rank)
    assert got["iteration_ends"] == [9.0, 19.0] and got["first_step_time"] == 9.0
    assert got["steady_step_time"] == 10.0
    # step 2: rank 0 works 6 + 2, rank 1 works 5 + 5: mean 9 of 10
    assert got["steady_bubble_rate"] == pytest.approx(0.1)


def test_train_emulate_post_validation_cli(capsys):
    from primuspp.commands.app import main

    args = ["train", "--emulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--fwd", "2", "--bwd", "1"]
    args += ["--wgrad", "1", "--no-dump", "--steps", "2", "--post-validation", "--optimizer-cost", "1.5"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    measured, simulated = doc["iterations"], doc["simulated"]["iterations"]
    assert set(measured) == set(simulated) and measured["mode"] == simulated["mode"] == "post-validation"
    assert measured["optimizer_cost"] == simulated["optimizer_cost"] == [1.5, 1.5]
    assert measured["count"] == 2 and len(measured["iteration_ends"]) == 2
    assert simulated["first_step_time"] == 2 * (2 + 2) + 2 * 2 + 1.5  # 1f1b p=2 m=2, F=2, BW=2
    assert len(doc["steps"]) == 2 and "steady_step_time_ms" in doc  # the existing keys stay


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--emulate", "--steps", "1", "--post-validation"], "error: --steps 1: --post-validation overlaps"),
        (["--optimizer-cost", "2"], "error: --optimizer-cost needs --emulate"),
        (["--emulate", "--optimizer-cost", "-1"], "error: primuspp train: Invalid value for '--optimizer"),
    ],
)
def test_train_emulate_iteration_flags_refused(capsys, args, message):
    from primuspp.commands.app import main

    assert main(["train", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--no-dump", *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message) and len(captured.err.strip().splitlines()) == 1


def test_measured_figures_ignore_one_stalled_step():
    """Four steps, one rank, the third stalled by 50 ms: the steady step and bubble are the other steps'."""
    from primuspp.runtime.emulate import RankIterations
    from primuspp.runtime.runner import RankStep
    from primuspp.trace.timeline import Interval

    ms = 1_000_000
    steps, windows, t = [], [], 0.0
    for i in range(4):
        length = 60.0 if i == 2 else 10.0  # the stall stretches the node itself
        steps.append(RankStep(0, [Interval("F", 0, 0, 0, 0.0, length)], [], 0, origin_ns=int(t * ms)))
        windows.append((int((t + length) * ms), int((t + length + 2) * ms)))
        t += length + 2
    spec = EmulationSpec(build_schedule("1f1b", 1, None, 1), COSTS, 4, optimizer_ms=2.0)
    got = figures(spec, [RankIterations(steps, windows)])
    assert got["iteration_ends"] == [12.0, 24.0, 86.0, 98.0]
    assert got["steady_step_time"] == 12.0  # the median of 12, 62, 12 (their mean: 28.67)
    assert got["steady_bubble_rate"] == pytest.approx(0.0)
