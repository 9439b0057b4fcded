"""Every run primuspp writes reads back: simulated (every registered algorithm, FB nodes, OFFLOAD placements)
and measured (`train --backend torch --dump-pp-data`, `train --emulate`), with `viz`, `compare` and
`--costs-from`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.commands.app import main
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import to_json_dict
from primuspp.sim import simulate
from primuspp.sim.calibrate import costs_from_dir
from primuspp.sim.fidelity import load_runs, predicted_vs_measured
from primuspp.sim.output import write_result
from primuspp.sim.sources import summaries_from_dir
from primuspp.trace.pp_data import read_pp_data
from primuspp.viz.sources import load_sources

COSTS = CostModel(forward=2.0, backward=3.0, wgrad=1.0, comm=0.5, activation=2.0)


def _cases() -> list[tuple[str, dict]]:
    cases = []
    for name, algo in ALGORITHMS.items():
        params = {"time_limit": 5.0} if name == "zb-optimal" else {}
        cases.append((name, params))
        if any(p.name == "offload" for p in algo.params):
            cases.append((name, {"offload": True}))
    return cases


def _pp_mb(name: str) -> tuple[int, int]:
    return (2, 4) if name == "zb-optimal" else (4, 8)


def _key(iv):
    return (iv.kind, iv.microbatch, iv.stage, iv.chunk, iv.start, iv.end, iv.backward)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name,params", _cases(), ids=[n + "".join(f"-{k}" for k in p) for n, p in _cases()])
def test_simulated_run_reads_back(capsys, tmp_path, name, params):
    pp, mb = _pp_mb(name)
    table = build_schedule(name, pp, None, mb, **params)
    result = simulate(table, COSTS, name)
    run_dir = write_result(result, tmp_path / "sim")
    if params.get("offload"):
        assert any(n.kind.is_memory for nodes in table.ranks for n in nodes)
    # viz: the same intervals, labels, FB parts and memory curve
    (source,) = load_sources([run_dir])
    (back,) = source.timelines
    for a, b in zip(back.ranks, result.timeline.ranks, strict=True):
        assert sorted(map(_key, a.intervals)) == sorted(map(_key, b.intervals))
        assert a.memory == b.memory and a.peak_memory == b.peak_memory
    assert (back.pp, back.vpp, back.micro_batches) == (table.pp, table.vpp, mb)
    # compare: the summary and a predicted-vs-measured pairing of the run with itself
    (summary,) = summaries_from_dir(run_dir)
    assert summary["step_time"] == result.metrics.step_time
    (record,) = load_runs(run_dir)
    pair = predicted_vs_measured(record, record)
    assert pair["has_memory"] and all(m["error"] == 0 for m in pair["metrics"])
    # --costs-from: the costs come back; without FB overlap the projection is the run itself
    cal = costs_from_dir(str(run_dir))
    assert cal.per_stage and cal.costs.comm == pytest.approx(COSTS.comm)
    if not any(iv.kind == "FB" for rt in result.timeline.ranks for iv in rt.intervals):
        again = simulate(table, cal.costs)
        assert again.metrics.step_time == pytest.approx(result.metrics.step_time)
    # and the same through the command line
    assert _cli(capsys, "viz", str(run_dir), "--out", str(tmp_path / "v.html"))[0] == 0
    code, out, err = _cli(capsys, "compare", str(run_dir), "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["step_time"] == result.metrics.step_time
    args = ["simulate", "--costs-from", str(run_dir), "--algo", "1f1b", "--pp", str(pp), "--mb", str(mb)]
    code, out, err = _cli(capsys, *args, "--json", "--out", str(tmp_path / "proj"))
    assert code == 0, err


def _offload_table(tmp_path: Path) -> str:
    path = tmp_path / "zbv-offload.json"
    path.write_text(json.dumps(to_json_dict(build_schedule("zbv", 2, 2, 4, offload=True))))
    return f"file:{path}"


@pytest.mark.parametrize(
    "how,algo",
    [
        ("torch", "dualpipe-v"),  # FB nodes
        ("torch", "offload"),  # OFFLOAD/RELOAD nodes on a V placement
        ("emulate", "dualpipe"),  # FB on the bidirectional placement
        ("emulate", "1f1b-interleaved"),
    ],
)
def test_measured_run_reads_back(capsys, tmp_path, how, algo):
    dump = tmp_path / "dump"
    table_arg = _offload_table(tmp_path) if algo == "offload" else algo
    args = ["train", "--algo", table_arg, "--steps", "2", "--dump-pp-data", str(dump), "--json"]
    if algo != "offload":
        args += ["--pp", "2", "--mb", "4"]
    if how == "torch":
        args += ["--backend", "torch", "--hidden", "16", "--heads", "2", "--seq-len", "8"]
    else:
        args += ["--emulate", "--fwd", "3", "--bwd", "2", "--wgrad", "1"]
    code, _, err = _cli(capsys, *args)
    assert code == 0, err
    timelines = read_pp_data(dump)
    assert len(timelines) == 2 and timelines[0].source in ("measured", "emulated")
    forwards = {sum(iv.kind in ("F", "FB") for iv in rt.intervals) for rt in timelines[0].ranks}
    assert forwards == ({4} if algo == "dualpipe" else {8})
    if algo.startswith("dualpipe"):
        assert any(iv.kind == "FB" and iv.backward for rt in timelines[0].ranks for iv in rt.intervals)
    # viz, compare (against a simulation of the same schedule: paired), --costs-from
    assert _cli(capsys, "viz", str(dump), "--out", str(tmp_path / "v.html"))[0] == 0
    sim_algo = "zbv" if algo == "offload" else algo
    sim_args = ["simulate", "--algo", sim_algo, "--pp", "2", "--mb", "4", "--out", str(tmp_path / "sim")]
    assert _cli(capsys, *sim_args)[0] == 0
    code, out, err = _cli(capsys, "compare", str(tmp_path / "sim"), str(dump), "--json")
    assert code == 0, err
    (pair,) = json.loads(out)["predicted_vs_measured"]
    assert pair["has_memory"] and pair["metrics"][0]["measured"] > 0
    code, _, err = _cli(capsys, *sim_args[:-1], str(tmp_path / "proj"), "--costs-from", str(dump))
    assert code == 0, err
