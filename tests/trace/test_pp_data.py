import json
import os
import re
import subprocess
import sys

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.output import write_result
from primuspp.trace.metrics import timeline_metrics
from primuspp.trace.pp_data import read_pp_data


def test_round_trip_through_primus_layout(tmp_path):
    result = simulate(build_schedule("zero-bubble", 4, None, 8), CostModel(2, 3, 1))
    run_dir = write_result(result, tmp_path)
    (timeline,) = read_pp_data(run_dir)
    back = timeline_metrics(timeline)
    assert back.step_time == result.metrics.step_time
    assert [r.peak_memory for r in back.per_rank] == [r.peak_memory for r in result.metrics.per_rank]
    kinds = sorted((iv.kind, iv.microbatch, iv.stage) for iv in timeline.ranks[2].intervals)
    assert kinds == sorted((iv.kind, iv.microbatch, iv.stage) for iv in result.timeline.ranks[2].intervals)


def test_write_replaces_atomically(tmp_path):
    result = simulate(build_schedule("1f1b", 2, None, 2))
    write_result(result, tmp_path)
    write_result(result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1f1b"]


@pytest.mark.parametrize("sample", ["basic_1f1b", "zerobubble", "zbv-formatted", "v-half"])
def test_reads_primus_simulator_output(primus_data, sample):
    (tl,) = read_pp_data(primus_data / "simulator_output_p8_m32" / sample)
    m = timeline_metrics(tl)
    totals = [
        json.loads((primus_data / "simulator_output_p8_m32" / sample / f"pp_rank_{r}.json").read_text())["0"][
            "total"
        ]
        for r in range(8)
    ]
    assert m.step_time == max(totals)
    assert [r.total for r in m.per_rank] == totals


def test_reads_primus_old_real_run_format(primus_data):
    timelines = read_pp_data(primus_data / "pp_data_example" / "pp4_vpp2")
    assert len(timelines) == 6 and timelines[0].pp == 4 and timelines[0].vpp == 2
    assert timelines[0].micro_batches == 8
    rank0 = timelines[5].ranks[0]
    assert sum(iv.kind == "F" for iv in rank0.intervals) == 16 and rank0.intervals[0].microbatch == -1


@pytest.mark.parametrize(
    "setup,match",
    [
        (lambda d: None, "no pp_rank_<r>.json files"),
        (lambda d: (d / "pp_rank_0.json").write_text("[1]"), "expected an object keyed by iteration"),
        (lambda d: (d / "pp_rank_0.json").write_text('{"1": {"x": 1}}'), "expected an object with fwd_start"),
        (lambda d: (d / "pp_rank_0.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "pp_rank_1.json").write_text("{}"), "numbered 0..0"),
    ],
)
def test_bad_pp_data_names_the_file(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(ConfigError, match=match):
        read_pp_data(tmp_path)


def test_source_and_memory_unit_follow_the_writer(primus_data, tmp_path):
    (real, *_) = read_pp_data(primus_data / "pp_data_example" / "pp4")
    assert (real.source, real.memory_unit) == ("measured", "GiB")
    (sim,) = read_pp_data(primus_data / "simulator_output_p8_m32" / "basic_1f1b")
    assert (sim.source, sim.memory_unit) == ("simulated", "microbatches")
    ours = write_result(simulate(build_schedule("1f1b", 2, None, 2)), tmp_path)
    (back,) = read_pp_data(ours)
    assert (back.source, back.memory_unit) == ("simulated", "microbatches")


def test_combined_forward_backward_events_read_as_one_fb_interval(tmp_path):
    # Primus' combined F+B wrapper records one call as an fwd and a bwd event with the same interval
    rec = {
        "fwd_start": [0.0, 2.0],
        "fwd_end": [1.0, 4.0],
        "fwd_minibatch": [0, 1],
        "bwd_start": [2.0, 5.0],
        "bwd_end": [4.0, 6.0],
        "bwd_minibatch": [0, 1],
    }
    (tmp_path / "pp_rank_0.json").write_text(json.dumps({"1": rec}))
    (tl,) = read_pp_data(tmp_path)
    kinds = [(iv.kind, iv.microbatch, iv.backward) for iv in tl.ranks[0].intervals]
    assert kinds == [("F", 0, None), ("FB", 1, ("BW", 0, -1, -1)), ("BW", 1, None)]


# -- config against files, special files, interval sanity (checked before anything is rebuilt) --------------


def _dump(d, records, config=None, iteration="1"):
    """A pp_data dir with one iteration: `records[r]` is rank r's record."""
    d.mkdir(exist_ok=True)
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    for r, rec in enumerate(records):
        (d / f"pp_rank_{r}.json").write_text(json.dumps({iteration: rec}))
    return d


def _rank(fwd, bwd):
    return {"fwd_start": [a for a, _ in fwd], "fwd_end": [b for _, b in fwd]} | {
        "bwd_start": [a for a, _ in bwd],
        "bwd_end": [b for _, b in bwd],
    }


REAL = {"pp_size": 2, "vp_size": 1, "num_mbs": 1, "train_iters": 1}
GOOD = [_rank([(0, 1)], [(3, 5)]), _rank([(1.5, 2.5)], [(2.5, 3)])]


@pytest.mark.parametrize(
    "config,message",
    [
        (
            {"pp_size": 1e9},
            "config.json: pp_size=1000000000.0 but {d} holds 8 pp_rank files (pp_rank_0..7.json): "
            "expected pp_size 8",
        ),
        ({"pp_size": 4}, "config.json: pp_size=4 but {d} holds 8 pp_rank files"),
        ({"pp_size": "8"}, "config.json: pp_size='8': expected an integer >= 1"),
        ({"pp_size": 8, "vpp_size": 0}, "config.json: vpp_size=0: expected an integer >= 1"),
        ({"pp_size": 8, "micro_batches": 2.5}, "config.json: micro_batches=2.5: expected an integer >= 1"),
    ],
)
def test_config_is_checked_against_the_files_before_they_are_read(tmp_path, config, message):
    d = tmp_path / "dump"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    for r in range(8):
        (d / f"pp_rank_{r}.json").write_text("{")  # never read: the config is refused first
    with pytest.raises(ConfigError) as err:
        read_pp_data(d)
    assert str(err.value).startswith(f"{d}/" + message.format(d=d)), str(err.value)


@pytest.mark.parametrize("key,value", [("num_mbs", 10**9), ("vp_size", 10**9)])
def test_counts_that_disagree_with_the_forwards_are_refused(tmp_path, key, value):
    d = _dump(tmp_path / "dump", GOOD, {**REAL, key: value})
    with pytest.raises(ConfigError) as err:
        read_pp_data(d)
    m, v = (10**9, 1) if key == "num_mbs" else (1, 10**9)
    assert str(err.value) == (
        f"{d}/config.json: num_mbs={m} with vp_size={v} means {m * v} forwards per rank, "
        "but rank 0 ran 1 in iteration 1"
    )


@pytest.mark.parametrize("which", ["config.json", "pp_rank_1.json"])
def test_a_fifo_is_refused_without_blocking(tmp_path, which):
    d = _dump(tmp_path / "dump", GOOD, REAL)
    (d / which).unlink()
    os.mkfifo(d / which)
    # in a child with a time limit: should the reader open the FIFO, it would block forever
    proc = subprocess.run(
        [sys.executable, "-m", "primuspp.commands", "viz", str(d), "--out", str(tmp_path / "v.html")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr
        == f"error: {d / which}: not a regular file (a FIFO, socket or device); only regular files are read\n"
    )


@pytest.mark.parametrize(
    "records,message",
    [
        (
            [_rank([(-2, 1)], [(3, 5)]), GOOD[1]],
            "pp_rank_0.json iteration 1 (rank 0): fwd_start[0] = -2 is negative (times are ms from the "
            "iteration start)",
        ),
        (
            [GOOD[0], _rank([(1.5, 2.5)], [(3, 2.7)])],
            "pp_rank_1.json iteration 1 (rank 1): bwd_end[0] = 2.7 is before its start 3",
        ),
        (
            [_rank([(0, 1)], [(0.5, 5)]), GOOD[1]],
            "pp_rank_0.json iteration 1 (rank 0): bwd_start[0] [0.5, 5] overlaps fwd_start[0] [0, 1] "
            "by 0.5 ms",
        ),
    ],
)
def test_impossible_intervals_name_file_rank_iteration_and_key(tmp_path, records, message):
    d = _dump(tmp_path / "dump", records, REAL)
    with pytest.raises(ConfigError) as err:
        read_pp_data(d)
    assert str(err.value).startswith(f"{d}/{message}"), str(err.value)


def test_small_overlaps_in_a_measured_trace_are_clipped_with_a_warning(tmp_path, capsys):
    # 0.2 ms of a 10 ms interval (within 1 ms and 10 %): clipped; the same in a simulated run is refused
    records = [_rank([(0, 10)], [(30, 40)]), _rank([(10.5, 20), (9.8, 10.3)], [(20, 30)])]
    records[1]["fwd_start"], records[1]["fwd_end"] = [10.5], [20]
    records[1]["bwd_start"], records[1]["bwd_end"] = [19.8, 30], [29.8, 35]
    records[0]["fwd_start"], records[0]["fwd_end"] = [0], [10]
    records[0]["bwd_start"], records[0]["bwd_end"] = [35], [45]
    d = _dump(tmp_path / "dump", records, REAL)
    (tl,) = read_pp_data(d)
    err = capsys.readouterr().err
    assert err == (
        f"warning: {d}: clipped 1 overlapping interval(s) (largest 0.2 ms; each now starts where the "
        f"previous ends): {d}/pp_rank_1.json iteration 1 (rank 1): bwd_start[0] by 0.2 ms\n"
    )
    assert [(iv.kind, iv.start, iv.end) for iv in tl.ranks[1].intervals] == [
        ("F", 10.5, 20),
        ("BW", 20, 29.8),
        ("BW", 30, 35),
    ]
    _dump(d, records, {"pp_size": 2, "micro_batches": 1, "source": "simulated"})
    with pytest.raises(
        ConfigError, match=re.escape("bwd_start[0] [19.8, 29.8] overlaps fwd_start[0] [10.5, 20] by 0.2 ms")
    ):
        read_pp_data(d)


@pytest.mark.parametrize(
    "patch,message",
    [
        ({"fwd_minibatch": ["a"]}, "'fwd_minibatch' must be a list of integers"),
        ({"fwd_minibatch": [0, 1]}, "'fwd_minibatch' has 2 entries, its intervals 1"),
        ({"bwd_kind": ["X"]}, '\'bwd_kind\' must be a list of "B" or "BW"'),
        ({"fwd_end": [1, 2]}, "fwd_start has 1 entries, fwd_end 2"),
        ({"memory": "lots"}, "memory='lots': expected a finite number"),
        ({"fwd_end": [1e400]}, "fwd_end[0]=inf: expected a finite number"),
    ],
)
def test_malformed_keys_are_one_line(tmp_path, patch, message):
    d = _dump(tmp_path / "dump", [{**GOOD[0], **patch}, GOOD[1]], REAL)
    if patch == {"fwd_end": [1e400]}:
        (d / "pp_rank_0.json").write_text('{"1": {"fwd_start": [0], "fwd_end": [1e400]}}')
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_pp_data(d)


def test_primus_memory_levels_get_the_times_of_their_events(primus_data):
    """Primus writes `activation_memory_usage` without times: one level after each F and B, in time order."""
    (tl,) = read_pp_data(primus_data / "simulator_output_p8_m32" / "basic_1f1b")
    rank7 = tl.ranks[7]  # 1F1B's last rank: F, B, F, B, ... holding one microbatch at a time
    events = sorted(rank7.intervals, key=lambda iv: iv.start)
    assert [t for t, _ in rank7.memory[1:]] == [iv.end for iv in events]
    assert {level for _, level in rank7.memory[1:]} == {0.0, 1.0} and rank7.peak_memory == 1.0
