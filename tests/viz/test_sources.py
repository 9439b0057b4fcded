"""What `viz` accepts as PATH, and the one-line errors for what it does not."""

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import PrimusppError
from primuspp.sim import simulate
from primuspp.sim.output import write_result
from primuspp.viz.sources import load_sources


def test_simulate_output_root_and_run_dir(tmp_path):
    for algo in ("zero-bubble", "1f1b"):
        write_result(simulate(build_schedule(algo, 2, None, 3)), tmp_path)
    root = load_sources([tmp_path])
    assert [s.label for s in root] == ["1f1b", "zero-bubble"]
    assert [len(s.timelines) for s in root] == [1, 1] and root[0].note == ""
    (one,) = load_sources([tmp_path / "1f1b"])
    assert one.timelines[0].ranks[1].intervals[0].microbatch == 0
    # the same run twice keeps both sections, told apart
    assert [s.label for s in load_sources([tmp_path / "1f1b", tmp_path / "1f1b"])] == ["1f1b", "1f1b (2)"]


def test_yaml_config_is_simulated(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pp: 2\nmicro_batches: 4\nruns:\n  - algorithm: 1f1b\n  - algorithm: gpipe\n")
    sources = load_sources([cfg])
    assert [s.label for s in sources] == ["1f1b", "gpipe"]
    assert sources[0].timelines[0].pp == 2 and sources[0].note == f"simulated from {cfg}"


def test_old_real_run_gets_microbatches_from_megatron_schedule(primus_data):
    (src,) = load_sources([primus_data / "pp_data_example" / "pp4_vpp2"])
    assert len(src.timelines) == 6
    assert src.note == "microbatch order reconstructed from 1f1b-interleaved (pp=4, vpp=2, m=8)"
    assert all(iv.microbatch >= 0 for tl in src.timelines for rt in tl.ranks for iv in rt.intervals)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda d: d / "missing", "missing: no such file or directory"),
        (lambda d: d, "pp_rank_<r>.json files, nor run directories"),
        (lambda d: (d / "x.txt").write_text("hi") and d / "x.txt", "x.txt: expected a simulate output"),
        (lambda d: (d / "pp_rank_0.json").write_text("[1]") and d, "pp_rank_0.json: expected an object"),
        (
            lambda d: (d / "pp_rank_0.json").write_text('{"1": {"fwd_start": [1]}}') and d,
            "pp_rank_0.json iteration 1: expected an object with fwd_start/fwd_end",
        ),
        (lambda d: (d / "c.yaml").write_text("pp: [") and d / "c.yaml", "c.yaml: malformed YAML"),
        (
            lambda d: (
                (d / "c.yaml").write_text("pp: 2\nmicro_batches: 2\nruns:\n  - algorithm: nope\n")
                and d / "c.yaml"
            ),
            "c.yaml: unknown algorithm 'nope'",
        ),
    ],
)
def test_bad_paths_name_the_file(tmp_path, make, match):
    with pytest.raises(PrimusppError, match=match):  # ConfigError, or ScheduleError for algorithms
        load_sources([make(tmp_path)])


def test_transfers_come_back_only_for_an_unchanged_simulate_output(tmp_path):
    import json

    from primuspp.viz.sources import with_transfers

    result = simulate(build_schedule("1f1b", 3, None, 4))
    run_dir = write_result(result, tmp_path)
    (src,) = load_sources([run_dir])
    assert src.timelines[0].transfers == []
    assert with_transfers(src, 0).transfers == result.timeline.transfers
    config = json.loads((run_dir / "config.json").read_text())
    config["costs"]["forward"] = 7  # the file no longer describes these intervals
    (run_dir / "config.json").write_text(json.dumps(config))
    assert with_transfers(src, 0).transfers == []
    (run_dir / "schedule.json").unlink()
    assert with_transfers(src, 0).transfers == []


def test_a_fifo_as_path_is_refused(tmp_path):
    import os

    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    with pytest.raises(PrimusppError, match=r"run\.yaml: not a regular file nor a directory"):
        load_sources([fifo])


def test_summary_with_bad_figures_is_refused(tmp_path):
    import json

    from primuspp.sim.sources import summaries_from_dir

    run_dir = write_result(simulate(build_schedule("1f1b", 2, None, 2)), tmp_path)
    doc = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**doc, "step_time": "fast"}))
    with pytest.raises(PrimusppError, match=r"summary.json: step_time='fast': expected a finite number"):
        summaries_from_dir(run_dir)


def test_a_root_of_two_sizes_is_shown_by_size(tmp_path):
    """Runs of several sizes in one root are not one set: grouped by size, each labelled with it."""
    for pp, mb in ((8, 16), (4, 8)):
        write_result(simulate(build_schedule("1f1b", pp, None, mb), name=f"run-p{pp}"), tmp_path)
    labels = [s.label for s in load_sources([tmp_path])]
    assert labels == ["run-p4 (p 4, m 8)", "run-p8 (p 8, m 16)"]
    assert [s.label for s in load_sources([tmp_path / "run-p8"])] == ["run-p8"]


def test_a_run_too_large_to_draw_is_refused_before_reading(tmp_path, capsys):
    from primuspp.commands.app import main
    from primuspp.viz.sources import MAX_RUN_BYTES

    run = tmp_path / "huge"
    run.mkdir()
    with open(run / "pp_rank_0.json", "wb") as f:  # sparse: its size alone says what reading it would cost
        f.truncate(MAX_RUN_BYTES + 1)
    code = main(["viz", str(run), "--out", str(tmp_path / "v.html")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(run) in err and "MiB" in err, err
    assert not (tmp_path / "v.html").exists()


def test_a_typical_iteration_is_shown_first(tmp_path):
    """Not the last (nor a warm-up first): the iteration of median step time."""
    from primuspp.schedule.costs import CostModel
    from primuspp.trace.pp_data import write_pp_data
    from primuspp.viz.sources import shown_iterations

    timelines = []
    for i, fwd in enumerate([9.0, 1.0, 1.1, 1.05, 4.0]):  # a slow warm-up, then steady, then a slow last
        costs = CostModel(fwd, 1.0, 1.0)
        tl = simulate(build_schedule("1f1b", 2, None, 4, costs), costs).timeline
        tl.iteration = str(i)
        timelines.append(tl)
    write_pp_data(timelines, tmp_path)
    (source,) = load_sources([tmp_path])
    assert shown_iterations([source], None) == [2]  # step times: 1 < 3 < 2 < 4 < 0, the median is 2
    assert shown_iterations([source], "4") == [4]
