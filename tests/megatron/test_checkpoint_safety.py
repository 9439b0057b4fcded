"""Checkpoints are data, never code: every rank file loads with `weights_only=True`, and `--load` checks the
meta and every rank's file in the launcher, before any rank starts (one line, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from primuspp.backends.megatron import checkpoint
from primuspp.backends.megatron.model import GPTSpec
from primuspp.commands.app import main
from primuspp.errors import ConfigError

SMALL = ["--pp", "2", "--mb", "4", "--layers", "4", "--hidden", "32", "--heads", "2", "--seq-len", "32"]
MODEL = GPTSpec(layers=4, hidden=32, heads=2, seq_len=32).as_dict()


class _Planted:
    """Unpickling it calls open(path, "w"): a file appears if anything unpickles it unsafely."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _plant(ckpt: Path, side_effect: Path) -> None:
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"step": 3, "data_position": 0, "pp": 2, "model": MODEL}))
    torch.save(
        {"model": {}, "optimizer": {}, "param_groups": [], "rank": 0, "x": _Planted(side_effect)},
        ckpt / "rank_0.pt",
    )
    torch.save({"model": {}, "optimizer": {}, "param_groups": [], "rank": 1}, ckpt / "rank_1.pt")


def test_the_planted_pickle_is_real(tmp_path):
    """Loaded the unsafe way (in a child process), the plant does create its file: the tests below mean it."""
    side = tmp_path / "pwned"
    _plant(tmp_path / "ckpt", side)
    code = f"import torch; torch.load({str(tmp_path / 'ckpt' / 'rank_0.pt')!r}, weights_only=bool(0))"
    subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, timeout=120)
    assert side.exists()


def test_planted_pickle_is_refused_by_the_loader(tmp_path):
    side = tmp_path / "pwned"
    _plant(tmp_path / "ckpt", side)
    for call in (
        lambda: checkpoint.load_states(tmp_path / "ckpt"),
        lambda: checkpoint.check(tmp_path / "ckpt", MODEL),
    ):
        with pytest.raises(ConfigError, match=r"rank_0\.pt: not a checkpoint primuspp can load safely"):
            call()
    assert not side.exists()


def test_planted_pickle_via_the_cli_runs_nothing(tmp_path, capsys):
    side = tmp_path / "pwned"
    _plant(tmp_path / "ckpt" / "step_0000003", side)
    code = main(["train", "--algo", "1f1b", *SMALL, "--steps", "5", "--load", str(tmp_path / "ckpt")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: --load ") and "load safely" in err
    assert not side.exists()


def test_meta_is_checked_before_any_rank(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    state = {"model": {"w": torch.zeros(2)}, "optimizer": {}, "param_groups": [], "rank": 0}
    torch.save(state, ckpt / "rank_0.pt")
    meta = {"step": 1, "data_position": 0, "pp": 2, "model": MODEL}
    for bad, message in (
        ({"pp": 2}, r"meta\.json says 2 ranks saved .* found rank_0\.pt"),
        ({"pp": 1, "step": "1"}, "'step' must be a non-negative integer"),
        ({"pp": 1, "model": {**MODEL, "hidden": 64}}, "saved for model"),
        ({"pp": 1, "model": []}, "'model' must be an object"),
    ):
        (ckpt / "meta.json").write_text(json.dumps({**meta, **bad}))
        with pytest.raises(ConfigError, match=message):
            checkpoint.check(ckpt, MODEL)
    (ckpt / "meta.json").write_text(json.dumps({**meta, "pp": 1}))
    assert checkpoint.check(ckpt, MODEL)["step"] == 1
    torch.save({**state, "rank": 3}, ckpt / "rank_0.pt")
    with pytest.raises(ConfigError, match="not rank 0's state"):
        checkpoint.check(ckpt, MODEL)


def test_no_unsafe_loader_in_the_project():
    unsafe = "weights_only=" + "False"  # spelled so that a grep of the repository finds nothing
    root = Path(__file__).resolve().parents[2] / "primuspp"
    offenders = [
        str(p) for p in root.rglob("*.py") if unsafe in p.read_text() or "pickle.load(" in p.read_text()
    ]
    assert offenders == []
