"""K consecutive iterations (sim/iterations.py): one iteration is the simulator's, the synchronous barrier
repeats the makespan plus the optimizer step, post-validation overlaps one iteration's drain with the next
one's fill (zbv and zb-h2 at equal costs: no bubble left)."""

import json
from dataclasses import replace
from itertools import pairwise

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ConfigError, ScheduleError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.timing import node_times
from primuspp.sim import simulate
from primuspp.sim.iterations import simulate_iterations

VPP = {name: a.vpp_default for name, a in ALGORITHMS.items()}
PARAMS = {"zb-optimal": {"time_limit": 0.2}}
#: unequal per-rank costs and a p2p latency: nothing lines up by accident
UNEVEN = CostModel(forward=(4.0, 6.0, 5.0, 3.0), backward=(5.0, 4.0, 6.0, 5.0), wgrad=2.0, comm=0.7)
EQUAL = CostModel(1000.0, 1000.0, 1000.0)


def _table(name: str, pp: int, m: int):
    try:
        return build_schedule(name, pp, VPP.get(name, 1), m, **PARAMS.get(name, {}))
    except ScheduleError:
        return None


@pytest.mark.parametrize("costs", [UNEVEN, replace(UNEVEN, fb_overlap=0.6)], ids=["uneven", "fb-overlap"])
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_one_iteration_is_the_simulators(name, costs):
    table = _table(name, 4, 8)
    assert table is not None
    run = simulate_iterations(table, costs, 1)
    timing = node_times(
        table.placement, table.num_microbatches, table.compute_order(), costs.for_placement(table.placement)
    )
    assert run.iterations[0].starts == timing.starts
    assert run.iterations[0].ends == timing.ends
    metrics = simulate(table, costs).metrics
    assert run.first_step_time == pytest.approx(metrics.step_time)
    assert run.steady_step_time == pytest.approx(metrics.step_time)
    assert run.steady_bubble_rate == pytest.approx(metrics.bubble_rate)


@pytest.mark.parametrize("name", ["1f1b", "zero-bubble", "zbv", "zb-h2", "dualpipe-v", "1f1b-interleaved"])
def test_synchronous_iterations_repeat_the_step_plus_optimizer(name):
    table = _table(name, 4, 8)
    step = simulate(table, UNEVEN).metrics.step_time
    run = simulate_iterations(table, UNEVEN, 4, optimizer_cost=1.5)
    assert run.iteration_ends == pytest.approx([(k + 1) * (step + 1.5) for k in range(4)])
    assert run.steady_step_time == pytest.approx(step + 1.5)
    first = run.iterations[0]
    for k, it in enumerate(run.iterations):  # every rank released at once: the first iteration, shifted
        shift = k * (step + 1.5)
        assert it.starts == [[pytest.approx(t + shift) for t in row] for row in first.starts]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_post_validation_is_never_later_and_never_beats_the_busiest_rank(name):
    table = _table(name, 4, 8)
    assert table is not None
    sync = simulate_iterations(table, UNEVEN, 5, optimizer_cost=(1.0, 0.5, 2.0, 1.0))
    post = simulate_iterations(table, UNEVEN, 5, post_validation=True, optimizer_cost=(1.0, 0.5, 2.0, 1.0))
    for a, b in zip(post.iteration_ends, sync.iteration_ends, strict=True):
        assert a <= b + 1e-9
    busiest = max(b + c for b, c in zip(post.busy, post.optimizer_cost, strict=True))
    assert post.steady_step_time >= busiest - 1e-9
    assert 0.0 <= post.steady_bubble_rate <= sync.steady_bubble_rate + 1e-12


@pytest.mark.parametrize("cost", [0.0, 500.0])
def test_zbv_p8_m32_equal_costs(cost):
    """The figures docs/guide.md quotes: synchronous steps pay the makespan (3.52 % bubble), post-validated
    ones only each rank's own work (96000 per rank: no bubble)."""
    table = build_schedule("zbv", 8, 2, 32)
    sync = simulate_iterations(table, EQUAL, 4, optimizer_cost=cost)
    post = simulate_iterations(table, EQUAL, 4, post_validation=True, optimizer_cost=cost)
    assert sync.steady_step_time == pytest.approx(99500 + cost)
    assert sync.steady_bubble_rate == pytest.approx(1 - (96000 + cost) / (99500 + cost))
    assert max(post.busy) == pytest.approx(96000)
    assert post.first_step_time == pytest.approx(99500 + cost)
    assert post.steady_step_time == pytest.approx(96000 + cost)
    assert post.steady_bubble_rate == pytest.approx(0.0, abs=1e-12)
    assert round(sync.steady_bubble_rate, 4) == (0.0352 if cost == 0 else 0.035)


def test_zb_h2_post_validation_reaches_the_busiest_rank_and_1f1b_gains_nothing():
    zbh2 = simulate_iterations(build_schedule("zb-h2", 4, None, 16), EQUAL, 6, post_validation=True)
    assert zbh2.steady_step_time == pytest.approx(48000)
    table = build_schedule("1f1b", 4, None, 16)
    post = simulate_iterations(table, EQUAL, 6, post_validation=True)
    assert post.steady_step_time == pytest.approx(simulate(table, EQUAL).metrics.step_time)


def test_post_validation_releases_each_rank_after_its_own_optimizer_step():
    table = build_schedule("zbv", 4, 2, 8)
    run = simulate_iterations(table, UNEVEN, 3, post_validation=True, optimizer_cost=(1.0, 2.0, 3.0, 4.0))
    for prev, it in pairwise(run.iterations):
        for r in range(4):
            assert prev.optimizer[r][0] == prev.ends[r][-1]
            assert prev.optimizer[r][1] == pytest.approx(prev.ends[r][-1] + r + 1.0)
            assert it.starts[r][0] >= prev.optimizer[r][1]
        assert min(it.starts[r][0] for r in range(4)) < prev.end  # the next iteration starts early


def test_record_keys():
    run = simulate_iterations(build_schedule("1f1b", 2, None, 4), EQUAL, 3, optimizer_cost=1.0)
    rec = run.record()
    assert set(rec) == {
        "count",
        "mode",
        "post_validation",
        "optimizer_cost",
        "first_step_time",
        "steady_step_time",
        "steady_bubble_rate",
        "iteration_ends",
    }
    assert rec["count"] == 3 and rec["mode"] == "synchronous" and rec["optimizer_cost"] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"iterations": 0}, "iterations"),
        ({"iterations": 2, "optimizer_cost": -1.0}, "optimizer-cost"),
        ({"iterations": 2, "optimizer_cost": (1.0, 2.0, 3.0)}, "optimizer-cost"),
        ({"iterations": 2, "optimizer_cost": float("nan")}, "optimizer-cost"),
    ],
)
def test_bad_arguments_are_refused(kwargs, key):
    with pytest.raises(ConfigError) as err:
        simulate_iterations(build_schedule("1f1b", 2, None, 4), EQUAL, **kwargs)
    assert err.value.key == key


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from primuspp.commands.app import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_simulate_iterations_cli(capsys, tmp_path):
    costs = ("--fwd", "1000", "--bwd", "1000", "--wgrad", "1000")
    base = ("simulate", "--algo", "zbv", "--pp", "8", "--mb", "32", *costs, "--out", str(tmp_path), "--json")
    code, out, _ = _cli(capsys, *base)
    plain = json.loads(out)["results"][0]
    assert "iterations" not in plain
    code, out, _ = _cli(capsys, *base, "--iterations", "3", "--post-validation")
    assert code == 0
    (res,) = json.loads(out)["results"]
    assert {k: v for k, v in res.items() if k != "iterations"} == plain  # the existing keys, unchanged
    it = res["iterations"]
    assert it["count"] == 3 and it["mode"] == "post-validation" and it["optimizer_cost"] == [0.0] * 8
    assert it["first_step_time"] == 99500 and it["steady_step_time"] == 96000
    code, out, _ = _cli(capsys, *base[:-1], "--iterations", "2", "--optimizer-cost", "500")
    assert code == 0 and "steady step" in out and "100,000" in out and "3.50%" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--post-validation",), "error: --post-validation: overlaps consecutive iterations"),
        (("--iterations", "1", "--post-validation"), "error: --iterations 1: --post-validation"),
        (("--iterations", "0"), "error: primuspp simulate: Invalid value for '--iterations'"),
        (("--optimizer-cost", "nan"), "error: primuspp simulate: Invalid value for '--optimizer-cost'"),
    ],
)
def test_simulate_iterations_cli_refusals(capsys, tmp_path, args, message):
    code, out, err = _cli(
        capsys, "simulate", "--algo", "1f1b", "--pp", "2", "--mb", "4", "-o", str(tmp_path), *args
    )
    assert code == 2 and out == "" and err.startswith(message) and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_too_many_node_times_are_refused():
    table = build_schedule("zbv", 8, 2, 32)  # 1,536 compute nodes
    with pytest.raises(ConfigError, match=r"--iterations 2000: 2000 x 1,536 nodes .* give at most 1,302"):
        simulate_iterations(table, EQUAL, 2000)
