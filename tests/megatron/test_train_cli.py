"""`primuspp train` with the Megatron backend: the JSON summary, pp_data that `compare` reads, resuming from a
checkpoint gives the uninterrupted run's losses exactly, a rank killed during a save leaves the previous
checkpoint loadable, and bad input is one line, exit 2, before any rank starts."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from primuspp.backends.megatron import checkpoint
from primuspp.commands.app import main
from primuspp.trace.pp_data import read_pp_data

SMALL = ["--pp", "2", "--mb", "4", "--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "32"]


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """zbv, 6 steps, checkpoints at steps 3 and 6, pp_data."""
    tmp = tmp_path_factory.mktemp("run")
    args = [
        "train",
        "--algo",
        "zbv",
        *SMALL,
        "--steps",
        "6",
        "--save",
        str(tmp / "ckpt"),
        "--save-interval",
        "3",
    ]
    return tmp, [*args, "--json", "--dump-pp-data", str(tmp / "pp")]


def test_pp_data_config_records_the_parallel_sizes():
    """config.json of a Megatron run names its world, DP, TP, EP and CP sizes as Primus' does, and the MoE
    shape (issue 34): here pp 2 x tp 2 x ep 2 with 4 experts, top-2, sequence parallel."""
    from primuspp.algorithms.registry import build_schedule
    from primuspp.backends.megatron import moe
    from primuspp.backends.megatron.model import GPTSpec
    from primuspp.backends.megatron.session import pp_data_config
    from primuspp.backends.megatron.train import TrainSpec

    model = GPTSpec(layers=4, hidden=32, heads=2, seq_len=32, settings=moe.settings(4, 2))
    spec = TrainSpec(build_schedule("zbv", 2, None, 4), model, tp=2, ep=2, sequence_parallel=True)
    config = pp_data_config(spec)
    assert {k: config[k] for k in ("world_size", "dp_size", "tp_size", "ep_size", "cp_size")} == {
        "world_size": 8,
        "dp_size": 2,
        "tp_size": 2,
        "ep_size": 2,
        "cp_size": 1,
    }
    assert (
        config["num_experts"] == 4 and config["moe_router_topk"] == 2 and config["sequence_parallel"] is True
    )


def _run(args: list[str], capsys) -> dict:
    code = main(args)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_json_summary_pp_data_and_resume(six_steps, capsys):
    tmp, args = six_steps
    doc = _run(args, capsys)
    assert doc["backend"] == "megatron" and doc["algorithm"] == "zbv" and doc["placement"] == "v"
    assert doc["pp"] == 2 and doc["vpp"] == 2 and doc["micro_batches"] == 4
    assert len(doc["losses"]) == 6 and len(doc["step_times_ms"]) == 6
    assert doc["losses"][-1] < doc["losses"][0]
    assert doc["tokens_per_s"] > 0 and 0 <= doc["bubble_rate"] < 1
    assert len(doc["peak_activation_bytes"]) == 2 and all(b > 0 for b in doc["peak_activation_bytes"])
    assert [s["step"] for s in doc["steps"]] == list(range(6))
    config = json.loads((tmp / "pp" / "config.json").read_text())  # Primus' size keys, and ours
    sizes = {"world_size": 2, "dp_size": 1, "tp_size": 1, "ep_size": 1, "cp_size": 1, "pp_size": 2}
    assert {k: config[k] for k in sizes} == sizes and config["vpp_size"] == 2
    assert config["num_experts"] is None and config["sequence_parallel"] is False
    timelines = read_pp_data(tmp / "pp")
    assert [tl.iteration for tl in timelines] == [str(i) for i in range(1, 7)]  # steps from 1, as the table
    assert {iv.kind for rt in timelines[0].ranks for iv in rt.intervals} == {"F", "B", "W"}
    assert main(["compare", str(tmp / "pp"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]
    saved = [p.name for p in checkpoint.complete(tmp / "ckpt")]
    assert saved == ["step_0000003", "step_0000006"]

    # restart from step 3: steps 4-6 give the uninterrupted run's losses exactly
    resumed = _run(
        ["train", "--algo", "zbv", *SMALL, "--steps", "6", "--load", str(tmp / "ckpt" / saved[0]), "--json"],
        capsys,
    )
    assert [s["step"] for s in resumed["steps"]] == [3, 4, 5]
    assert resumed["losses"] == doc["losses"][3:]


def test_kill_during_save_leaves_the_previous_checkpoint(six_steps, tmp_path, capsys):
    tmp, _ = six_steps
    root = tmp_path / "ckpt"
    args = [
        "train",
        "--algo",
        "1f1b",
        *SMALL,
        "--steps",
        "5",
        "--load",
        str(checkpoint.step_dir(tmp / "ckpt", 3)),
    ]
    code = main([*args, "--save", str(root), "--save-interval", "1", "--inject-fault", "1:save:5"])
    err = capsys.readouterr().err
    assert code == 1 and "rank 1 died (signal 9)" in err, err
    assert multiprocessing.active_children() == []
    found = checkpoint.find(root)
    assert found.name == "step_0000004"  # the save at step 5 never completed
    assert checkpoint.read_meta(found)["step"] == 4
    states = checkpoint.load_states(found)
    assert [s["rank"] for s in states] == [0, 1]
    resumed = _run(["train", "--algo", "1f1b", *SMALL, "--steps", "5", "--load", str(root), "--json"], capsys)
    assert [s["step"] for s in resumed["steps"]] == [4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pp", "8"], "fewer than the 16 pipeline stages"),
        (["--algo", "zbv", "--vpp", "3"], "vpp=3 is not allowed for zbv"),
        (["--algo", "nope"], "unknown algorithm 'nope'"),
        (["--data", "/nonexistent/corpus.txt"], "--data /nonexistent/corpus.txt"),
        (
            [
                "--algo",
                "zbv",
                "--megatron",
                "sequence_parallel=true",
                "--megatron",
                "variable_seq_lengths=true",
            ],
            "sequence_parallel=True",
        ),
        (["--megatron", "no_such_setting=1"], "--megatron no_such_setting"),
        (["--algo", "dualpipe"], "does not run the bidirectional placement"),
        (["--megatron", "fp16=true", "--megatron", "bf16=true"], "invalid Megatron model settings"),
        (["--load", "/nonexistent/ckpt"], "no complete checkpoint"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(args, message, capsys):
    args = ["--algo", "zbv", *args] if "--algo" not in args and "--pp" in args else args
    code = main(["train", *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and message in err, err
    assert multiprocessing.active_children() == []
