"""The emulated cluster and what it is for: emulated runs on real processes and gloo (memory exactly as the
simulator says, FB overlap, offload), a calibration round trip through a dump, the simulator's memory
prediction against real tiny-GPT runs, and `train --emulate` / `compare SIM DUMP` on the command line.

One launch of 4 ranks runs the multi-rank jobs (the CLI test starts its own). The waits are checked as
planned (each node's cost-model duration) and the runs by their order, not by the clock; only the
calibration round trip reads measured times, from below (a wait never ends early). How close measured
times come is measured by bench/fidelity.py, bench/calibration.py and bench/memory_fidelity.py (see
docs/guide.md).
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.torch.gpt import GPTConfig
from primuspp.backends.torch.train import TrainSpec, train_worker
from primuspp.commands.app import main
from primuspp.runtime.emulate import (
    EmulatedExecutor,
    EmulatedRun,
    EmulationSpec,
    dump_emulation,
    emulate_iterations_worker,
)
from primuspp.runtime.launch import launch
from primuspp.runtime.trace import step_timeline, step_timelines
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import NodeKind
from primuspp.sim import simulate
from primuspp.sim.calibrate import calibrate, costs_from_dir
from primuspp.sim.fidelity import load_runs, pair_runs, predicted_vs_measured
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data
from tests.runtime.workers import run_jobs

P = 4
UNIT = 1000  # bytes per activation unit: every planned byte count is an integer
ODD = CostModel(
    forward=(4.0, 6.0, 4.0, 6.0),
    backward=5.0,
    wgrad=3.0,
    activation=(1.0, 2.0, 1.0, 0.5),
    b_free_fraction=(-0.5, 0.25, 0.0, 1.0),
)
TRUTH = CostModel(forward=(8.0, 10.0, 8.0, 10.0), backward=10.0, wgrad=6.0)
MEMORY_ALGOS = ("1f1b", "zero-bubble", "zbv", "v-half", "v-min")
GPT = dict(vocab=32, seq_len=8, hidden=16, heads=2)


def emulation_jobs() -> dict[str, EmulationSpec]:
    return {
        "odd-zero-bubble": EmulationSpec(build_schedule("zero-bubble", P, None, 6), ODD, 2, UNIT),
        "odd-zbv-offload": EmulationSpec(build_schedule("zbv", P, 2, 8, offload=True), ODD, 1, UNIT),
        "dualpipe-fb-half": EmulationSpec(
            build_schedule("dualpipe", P, None, 8), CostModel(4.0, 4.0, 2.0, fb_overlap=0.5), 1, UNIT
        ),
        "roundtrip": EmulationSpec(build_schedule("zero-bubble", P, None, 8), TRUTH, 3, UNIT),
    }


def memory_jobs() -> dict[str, TrainSpec]:
    """Real tiny-GPT steps: one microbatch per placement (the bytes per stage) and the algorithms at m=2p."""
    tables = {
        "one-linear": build_schedule("zero-bubble", P, None, 1),
        "one-v": build_schedule("zbv", P, 2, 1),
    }
    tables |= {a: build_schedule(a, P, None, 2 * P) for a in MEMORY_ALGOS}
    return {
        name: TrainSpec(t, GPTConfig(layers=len(set(t.placement.model_part)), **GPT), steps=1)
        for name, t in tables.items()
    }


@pytest.fixture(scope="module")
def runs():
    emulated, trained = emulation_jobs(), memory_jobs()
    jobs = [(emulate_iterations_worker, s) for s in emulated.values()] + [
        (train_worker, s) for s in trained.values()
    ]
    results = launch(run_jobs, P, jobs)
    out = {}
    for i, (name, spec) in enumerate(emulated.items()):
        steps = [per_rank[i].steps for per_rank in results]
        out[name] = EmulatedRun(spec, step_timelines(spec.table, steps, name, "emulated"))
    for j, (name, spec) in enumerate(trained.items(), start=len(emulated)):
        out[name] = step_timeline(spec.table, [per_rank[j][0].measured for per_rank in results], name)
    return out


def test_emulated_memory_is_the_simulated_memory(runs):
    """Activation bytes follow the cost model exactly: per-stage sizes, B freeing part (or, negative,
    adding), W the rest, OFFLOAD/RELOAD moving it."""
    for name in ("odd-zero-bubble", "odd-zbv-offload"):
        run = runs[name]
        sim = simulate(run.spec.table, ODD)
        for tl in run.timelines:
            measured = [rt.peak_memory for rt in tl.ranks]
            assert measured == [round(r.peak_memory * UNIT) for r in sim.metrics.per_rank], name
            assert all(rt.memory[-1][1] == 0 for rt in tl.ranks)  # all freed by the end of the step


def test_emulated_nodes_wait_their_cost():
    """Each node waits its cost-model duration (per stage), an FB's two parts their costs times the overlap
    factor. The plan, not the clock: how long the waits measure on a machine is bench/fidelity.py's figure."""
    for name in ("odd-zero-bubble", "dualpipe-fb-half"):
        spec = emulation_jobs()[name]
        costs = spec.costs.for_placement(spec.table.placement)
        for r, nodes in enumerate(spec.table.ranks):
            executor = EmulatedExecutor(spec.table, r, spec.costs)
            for node in (n for n in nodes if n.kind.is_compute):
                parts = node.parts or (node,)
                factor = costs.fb_overlap if node.parts else 1.0
                for part in parts:
                    s = part.stage
                    want = {
                        NodeKind.F: costs.forward[s],
                        NodeKind.B: costs.backward[s],
                        NodeKind.W: costs.wgrad[s],
                        NodeKind.BW: costs.backward[s] + costs.wgrad[s],
                    }[part.kind]
                    assert executor.planned_ms(part.kind, part.microbatch, s) == factor * want, (name, part)
    # dualpipe's first FB on rank 0 at fb_overlap 0.5: an F (4 ms) with a BW (4 + 2 ms) waits 5 ms in all
    spec = emulation_jobs()["dualpipe-fb-half"]
    executor = EmulatedExecutor(spec.table, 0, spec.costs)
    fb = next(n for n in spec.table.ranks[0] if n.kind is NodeKind.FB)
    assert [p.kind for p in fb.parts] == [NodeKind.F, NodeKind.BW]
    assert sum(executor.planned_ms(p.kind, p.microbatch, p.stage) for p in fb.parts) == 5.0


def test_emulated_runs_follow_their_tables(runs):
    """Each emulated rank records one interval per compute node, in the table's order, one after another
    (how close the measured step comes to the simulated one: bench/fidelity.py)."""
    for name in ("odd-zero-bubble", "dualpipe-fb-half", "roundtrip"):
        run = runs[name]
        for tl in run.timelines:
            assert tl.source == "emulated"
            for rt in tl.ranks:
                nodes = [n for n in run.spec.table.ranks[rt.rank] if n.kind.is_compute]
                got = [(iv.kind, iv.microbatch, iv.stage) for iv in rt.intervals]
                assert got == [(n.kind.text, n.microbatch, n.stage) for n in nodes], (name, rt.rank)
                assert all(a.end <= b.start for a, b in pairwise(rt.intervals)), (name, rt.rank)


def test_calibration_round_trip(runs, tmp_path):
    """simulate with known costs -> emulate -> dump -> calibrate -> the costs and the projection come back
    (lower bounds only; bench/calibration.py measures the errors)."""
    run = runs["roundtrip"]
    dump_emulation(run, tmp_path, "test")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["emulated"] and config["source"] == "emulated" and config["costs"]["wgrad"] == 6.0
    cal = costs_from_dir(str(tmp_path))
    assert cal.per_stage and not cal.bw_split_assumed and cal.memory_per_stage
    # every emulated wait lasts at least its cost, so the measured costs are never below the truth (how
    # close they come on a quiet machine is bench/calibration.py's figure, not a test's)
    for got, want in ((cal.costs.forward, TRUTH.forward), (cal.costs.backward, (10.0,) * P)):
        assert all(g >= 0.99 * w for g, w in zip(got, want, strict=True)), (got, want)
    assert all(g >= 0.99 * 6.0 for g in cal.costs.wgrad) and len(cal.costs.wgrad) == P
    assert cal.comm_samples > 0 and cal.costs.comm >= 0
    assert cal.activation_per_microbatch == UNIT and cal.portable().activation == (1.0,) * P
    again = simulate(run.spec.table, cal.costs).metrics.step_time
    assert again >= 0.99 * simulate(run.spec.table, TRUTH).metrics.step_time


def _memory_costs(timeline) -> CostModel:
    cal = calibrate([timeline])
    assert cal.memory_per_stage
    return CostModel(activation=cal.costs.activation, b_free_fraction=cal.costs.b_free_fraction)


@pytest.mark.parametrize("algo", MEMORY_ALGOS)
def test_simulated_peak_matches_real_bytes(runs, algo):
    """The tiny GPT on the plain-torch backend: bytes per stage from a one-microbatch run (rise at F, part
    freed by B), simulated peak per rank within 5 % of the measured one (bytes are deterministic)."""
    table = build_schedule(algo, P, None, 2 * P)
    costs = _memory_costs(runs["one-v" if table.placement.kind == "v" else "one-linear"])
    predicted = [r.peak_memory for r in simulate(table, costs).metrics.per_rank]
    measured = [rt.peak_memory for rt in runs[algo].ranks]
    for rank, (p, m) in enumerate(zip(predicted, measured, strict=True)):
        assert p == pytest.approx(m, rel=0.05), f"rank {rank}: predicted {p:.0f} measured {m:.0f} bytes"


def test_compare_pairs_a_simulation_with_its_measured_run(runs, tmp_path):
    run = runs["odd-zero-bubble"]
    dump_emulation(run, tmp_path / "emu", "test")
    sim_dir = tmp_path / "sim"
    from primuspp.sim.output import write_result

    write_result(simulate(run.spec.table, ODD, "zero-bubble"), sim_dir)
    pairs, alone = pair_runs(load_runs(sim_dir) + load_runs(tmp_path / "emu"))
    assert len(pairs) == 1 and not alone
    doc = predicted_vs_measured(*pairs[0])
    metrics = {m["metric"]: m for m in doc["metrics"]}
    assert metrics["peak_memory"]["unit"] == "bytes" and metrics["peak_memory"]["error"] == pytest.approx(0)
    assert all(r["error"] == pytest.approx(0) for r in doc["per_rank_peak_memory"])
    assert metrics["step_time"]["measured"] == pytest.approx(
        timeline_metrics(run.timelines[-1]).step_time, rel=0.5
    )
    assert "converted to bytes" in doc["memory_note"] and doc["measured"]["emulated_costs"]["wgrad"] == 3.0


def test_train_emulate_cli_and_compare(capsys, tmp_path):
    dump, sim = tmp_path / "emu", tmp_path / "sim"
    common = ["--algo", "1f1b", "--pp", "2", "--mb", "3"]
    args = ["train", "--emulate", *common, "--steps", "2", "--fwd", "3", "--bwd", "2", "--wgrad", "1"]
    assert main([*args, "--json", "--dump-pp-data", str(dump)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backend"] == "emulate" and doc["costs"]["forward"] == 3 and len(doc["steps"]) == 2
    assert doc["simulated"]["step_time_ms"] == pytest.approx(3 * (3 + 3) + 3 * 2)  # 1f1b p=2 m=3 F=3 BW=3
    assert doc["simulated"]["pipeline_ms"] == doc["simulated"]["step_time_ms"]
    assert all(s["pipeline_ms"] >= doc["simulated"]["pipeline_ms"] for s in doc["steps"])  # waits >= costs
    assert [tl.iteration for tl in read_pp_data(dump)] == ["1", "2"]
    main(["simulate", *common, "--fwd", "3", "--bwd", "2", "--wgrad", "1", "--out", str(sim), "--json"])
    capsys.readouterr()
    assert main(["compare", str(sim), str(dump), "--json"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["predicted_vs_measured"]
    assert pair["same_schedule"] and pair["measured"]["source"] == "emulated"
    assert [m["metric"] for m in pair["metrics"]] == ["step_time", "bubble_rate", "peak_memory"]
    assert main(["compare", str(sim), str(dump)]) == 0
    shown = capsys.readouterr().out
    assert "Predicted (1f1b) vs emulated" in shown and "rank 1 peak" in shown


def test_emulation_options_need_emulate(capsys):
    assert main(["train", "--fwd", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fwd needs --emulate" in err


def test_recommendation_from_measured_costs(runs, tmp_path, capsys):
    """Costs measured in bytes still take --mem-limit in microbatch units: below zbv's 4, never zbv."""
    dump_emulation(runs["roundtrip"], tmp_path, "test")
    args = ["compare", "--costs-from", str(tmp_path), "--pp", "4", "--mb", "8", "--json"]
    assert main([*args, "--mem-limit", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    best = next(r for r in doc["results"] if r["name"] == doc["recommendation"])
    assert best["peak_memory"] <= 3 and not best["name"].startswith("zbv")
    assert any(r["name"] == "zbv" and not r["fits"] for r in doc["results"])
