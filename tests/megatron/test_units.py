"""The Megatron backend's pieces that need no process group: install/uninstall, Primus' keys, conflicting
settings, the microbatch iterator, forward-only tables, data streams, atomic checkpoints (a save killed
midway leaves the previous checkpoint loadable)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.megatron import checkpoint
from primuspp.backends.megatron.data import StepData, SyntheticStream, TextStream, make_stream
from primuspp.backends.megatron.executor import MicrobatchIterator
from primuspp.backends.megatron.schedule import (
    check,
    conflicts,
    forward_only_table,
    install,
    install_from_args,
    installed,
    uninstall,
)
from primuspp.errors import ConfigError
from primuspp.schedule.nodes import NodeKind


@pytest.fixture
def clean():
    yield
    uninstall()


def test_install_replaces_and_uninstall_restores(clean):
    from megatron.core import pipeline_parallel
    from megatron.core.pipeline_parallel import schedules
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    before = (pipeline_parallel.get_forward_backward_func, schedules.get_forward_backward_func)
    impls = (ColumnParallelLinear._forward_impl, RowParallelLinear._forward_impl)
    schedule = install("zbv-formatted")
    assert installed() is schedule and schedule.algorithm == "zbv"
    assert pipeline_parallel.get_forward_backward_func is schedules.get_forward_backward_func
    assert schedules.get_forward_backward_func(4, 2) is schedule
    assert schedules.get_forward_backward_func(1, None) is before[1](1, None)  # nothing to schedule
    assert ColumnParallelLinear._forward_impl is not impls[0]
    again = install("1f1b")  # installing twice keeps Megatron's originals for uninstall
    assert installed() is again
    uninstall()
    assert (pipeline_parallel.get_forward_backward_func, schedules.get_forward_backward_func) == before
    assert (ColumnParallelLinear._forward_impl, RowParallelLinear._forward_impl) == impls
    assert installed() is None


def test_primus_keys(clean, monkeypatch, tmp_path):
    assert install_from_args({"patch_primus_pipeline": False, "pp_algorithm": "zbv"}) is None
    monkeypatch.setenv("DUMP_PP_DIR", str(tmp_path / "pp"))
    args = type(
        "Args", (), {"patch_primus_pipeline": True, "pp_algorithm": "zerobubble", "dump_pp_data": True}
    )
    schedule = install_from_args(args())
    assert schedule.algorithm == "zero-bubble" and schedule.dump_dir == tmp_path / "pp"
    with pytest.raises(ConfigError, match="pp_algorithm is not"):
        install_from_args({"patch_primus_pipeline": True})
    with pytest.raises(ConfigError, match="unknown algorithm 'nope'"):
        install("nope")


def test_conflicts_are_listed_in_one_error():
    zbv = build_schedule("zbv", 4, 2, 8)
    settings = {
        "sequence_parallel": True,
        "defer_embedding_wgrad_compute": True,
        "variable_seq_lengths": False,
    }
    with pytest.raises(ConfigError) as info:
        check(zbv, settings)
    message = str(info.value)
    assert "\n" not in message
    assert "defer_embedding_wgrad_compute=True" in message
    assert "variable_seq_lengths" not in message
    # sequence parallelism runs with and without a split backward (split.py keeps or re-gathers W's input)
    assert "sequence_parallel" not in message
    check(build_schedule("1f1b", 4, 1, 8), {"sequence_parallel": True})
    check(build_schedule("zero-bubble", 4, 1, 8), {"sequence_parallel": True})
    # tied embeddings cannot be tied across ranks in the V placement (both ends are on rank 0)
    assert conflicts({}, placement="v", shared_embeddings=True)
    assert not conflicts({}, placement="linear", shared_embeddings=True)
    with pytest.raises(ConfigError, match="bidirectional placement"):
        check(build_schedule("dualpipe", 4, 2, 8), {})


def test_microbatch_iterator_hands_each_forward_its_microbatch():
    it = MicrobatchIterator(iter(range(5)))
    got = []
    for mb in (1, 0, 3, 2, 4):
        it.want = mb
        got.append(next(it))
    assert got == [1, 0, 3, 2, 4]


def test_forward_only_table_keeps_the_forwards():
    table = build_schedule("dualpipe-v", 4, 2, 8)  # FB nodes included
    fwd = forward_only_table(table)
    for rank, nodes in enumerate(fwd.ranks):
        computes = [n for n in nodes if n.kind.is_compute]
        assert all(n.kind is NodeKind.F for n in computes)
        want = sorted((n.microbatch, n.stage) for n in table.ranks[rank] if n.kind is NodeKind.F) + sorted(
            (n.parts[0].microbatch, n.parts[0].stage) for n in table.ranks[rank] if n.kind is NodeKind.FB
        )
        assert sorted((n.microbatch, n.stage) for n in computes) == sorted(want)


def test_streams_are_deterministic_by_position(tmp_path):
    a, b = SyntheticStream(32, seed=1), SyntheticStream(32, seed=1)
    assert torch.equal(a.sequence(17), b.sequence(17)) and a.sequence(17).shape == (33,)
    assert not torch.equal(a.sequence(17), SyntheticStream(32, seed=2).sequence(17))
    step = StepData(a, 10, 3, 2)
    tokens, labels = step[1]
    assert torch.equal(tokens[0], a.sequence(12)[:-1]) and torch.equal(labels[0], a.sequence(12)[1:])
    assert step.end == 16
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(40)))
    s = TextStream(text, 8)
    assert s.sequence(0).tolist() == list(range(9))
    assert s.sequence(5).tolist() == [(40 + i) % 40 for i in range(40, 49)]  # wraps around
    with pytest.raises(ConfigError, match=r"--data .*missing"):
        make_stream(8, path=tmp_path / "missing")
    with pytest.raises(ConfigError, match="fewer than one sequence"):
        TextStream(text, 64)


def test_checkpoint_keeps_the_newest_complete(tmp_path):
    root = tmp_path / "ckpt"
    for step in (1, 2, 3):
        meta = {"data_position": step, "pp": 1, "model": {}}
        checkpoint.save(root, step, 0, {"x": torch.tensor([step])}, meta, keep=2)
    assert [p.name for p in checkpoint.complete(root)] == ["step_0000002", "step_0000003"]
    found = checkpoint.find(root)
    assert checkpoint.read_meta(found)["step"] == 3
    assert checkpoint.load_states(found)[0]["x"].item() == 3
    assert checkpoint.find(checkpoint.step_dir(root, 2)).name == "step_0000002"
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        checkpoint.find(tmp_path / "empty")


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    """A process killed (SIGKILL) right after writing the first rank file of a save: the previous checkpoint
    stays the newest complete one and loads; the next save clears the leftover."""
    root = tmp_path / "ckpt"
    script = textwrap.dedent(
        f"""
        import os, signal, torch
        from primuspp.backends.megatron import checkpoint
        root = {str(root)!r}
        meta = {{"pp": 1, "model": {{}}}}
        checkpoint.save(root, 1, 0, {{"w": torch.ones(3)}}, {{**meta, "data_position": 8}})
        def die():
            os.kill(os.getpid(), signal.SIGKILL)
        # two ranks' files; the process dies after the first
        checkpoint.save(root, 2, 0, {{"w": torch.zeros(3)}}, {{**meta, "data_position": 16}}, after_write=die)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert (root / ".tmp-step_0000002" / "rank_0.pt").is_file()  # the half-written save
    found = checkpoint.find(root)
    assert found.name == "step_0000001" and checkpoint.read_meta(found)["data_position"] == 8
    assert torch.equal(checkpoint.load_states(found)[0]["w"], torch.ones(3))
    checkpoint.save(root, 2, 0, {"w": torch.zeros(3)}, {"data_position": 16, "pp": 1, "model": {}})
    assert not list(root.glob(".tmp-*"))
    assert checkpoint.find(root).name == "step_0000002"


def test_megatron_missing_is_one_line(tmp_path):
    fake = tmp_path / "megatron"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named megatron.core')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "primuspp.commands", "train", "--algo", "zbv"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "pip install 'primuspp[train]'" in proc.stderr, proc.stderr


class _Chunk(torch.nn.Module):
    def __init__(self, pre: bool, post: bool) -> None:
        super().__init__()
        self.pre_process, self.post_process = pre, post


def test_model_chunks_must_match_the_placement():
    from primuspp.backends.megatron.schedule import PipelineSchedule, _check_chunks

    table = build_schedule("zbv", 2, 2, 4)
    _check_chunks(table, 0, [_Chunk(True, False), _Chunk(False, True)])  # V: both ends on rank 0
    with pytest.raises(ConfigError, match=r"chunk 1 of pipeline rank 0 holds stage 3.*post_process=True"):
        _check_chunks(table, 0, [_Chunk(True, False), _Chunk(False, False)])  # built as interleaved
    with pytest.raises(ConfigError, match=r"zbv runs 2 model chunks per pipeline rank .* the model has 1"):
        PipelineSchedule("zbv").table(2, 1, 4)
    with pytest.raises(ConfigError, match="installed table runs pp=2"):
        PipelineSchedule(table).table(4, 2, 4)
