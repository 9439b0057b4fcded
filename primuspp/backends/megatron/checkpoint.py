"""Atomic checkpoints of a pipeline run: every rank's state, complete or not there at all.

Layout: `<root>/step_<N>/` holds `rank_<r>.pt` (one per pipeline rank) and `meta.json`. A save writes into
`<root>/.tmp-step_<N>/`, fsyncs every file, and renames the directory to `step_<N>` only once all ranks'
files and the meta file are written (rank 0 renames, after a barrier). The previous checkpoint is removed
only after that rename (the newest `keep` are kept), so a save killed at any moment leaves the previous
checkpoint loadable; a leftover temporary directory is ignored and removed by the next save.

Parameters and optimizer state are stored under whole-model parameter names, so a checkpoint loads into any
cut of the model (another placement or number of ranks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from primuspp.errors import ConfigError

_STEP_DIR = re.compile(r"^step_(\d+)$")
_RANK_FILE = re.compile(r"^rank_(\d+)\.pt$")
META = "meta.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, write: Callable[[Any], None]) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:07d}"


def save(
    root: str | Path,
    step: int,
    rank: int,
    state: dict[str, Any],
    meta: dict[str, Any],
    barrier: Callable[[], None] = lambda: None,
    keep: int = 2,
    after_write: Callable[[], None] | None = None,
) -> Path:
    """Collective: every rank calls it with its own `state`; rank 0 also writes `meta` and commits.
    `barrier` synchronises the ranks (a no-op for one process). `after_write` runs right after this rank's
    file is on disk (tests kill the process there). Returns the checkpoint directory."""
    root = Path(root)
    final = step_dir(root, step)
    tmp = root / f".tmp-{final.name}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()
    _write(tmp / f"rank_{rank}.pt", lambda f: torch.save(state, f))
    if after_write is not None:
        after_write()
    barrier()
    if rank == 0:
        _write(tmp / META, lambda f: f.write((json.dumps({**meta, "step": step}, indent=2) + "\n").encode()))
        _fsync_dir(tmp)
        if final.exists():  # the same step saved again: replaced only if it holds nothing but a checkpoint
            foreign = [e.name for e in final.iterdir() if e.name != META and not _RANK_FILE.match(e.name)]
            if foreign or final.is_symlink():
                raise ConfigError(
                    f"--save {final}: exists and holds {foreign[0] if foreign else 'a symlink'}, which "
                    "primuspp did not write; not replaced",
                    key="save",
                )
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
        for old in complete(root)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def complete(root: Path) -> list[Path]:
    """The complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        match = _STEP_DIR.match(p.name)
        if match and (p / META).is_file():
            found.append((int(match.group(1)), p))
    return [p for _, p in sorted(found)]


def find(path: str | Path) -> Path:
    """The checkpoint to load: `path` itself when it is one, else the newest complete one under it."""
    path = Path(path)
    if (path / META).is_file():
        return path
    done = complete(path)
    if not done:
        raise ConfigError(f"--load {path}: no complete checkpoint there", key="load")
    return done[-1]


def read_meta(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's meta.json, checked: an object with the fields a resume needs, of the right types."""
    from primuspp.inputs import load_json

    meta = load_json(checkpoint / META, "--load")
    where = f"--load {checkpoint / META}"
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: expected a JSON object", key="load")
    for field, kind in (("step", int), ("data_position", int), ("pp", int), ("model", dict)):
        value = meta.get(field)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 0):
            what = "a non-negative integer" if kind is int else "an object"
            raise ConfigError(f"{where}: '{field}' must be {what} (got {value!r})", key="load")
    if meta["pp"] < 1:
        raise ConfigError(f"{where}: 'pp' must be >= 1 (got {meta['pp']})", key="load")
    return meta


def rank_files(checkpoint: Path, pp: int) -> list[Path]:
    """`rank_0.pt` .. `rank_<pp-1>.pt`, all regular files, and no others: the ranks the meta says saved."""
    found = {}
    for p in checkpoint.iterdir():
        match = _RANK_FILE.match(p.name)
        if match:
            found[int(match.group(1))] = p
    if sorted(found) != list(range(pp)):
        have = ", ".join(p.name for _, p in sorted(found.items())) or "none"
        raise ConfigError(
            f"--load {checkpoint}: meta.json says {pp} ranks saved (rank_0.pt .. rank_{pp - 1}.pt); "
            f"found {have}",
            key="load",
        )
    for p in found.values():
        if not p.is_file():  # a FIFO would block the load
            raise ConfigError(f"--load {p}: not a regular file", key="load")
    return [found[r] for r in range(pp)]


def _reason(message: str) -> str:
    """The useful sentence of torch.load's error: its unpickler's verdict (torch's message around it is a
    long, ANSI-coloured explanation), on one line, at most 200 characters."""
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", message).split())
    verdict = re.search(r"WeightsUnpickler error: (.*?)(?:\. |$)", text)
    return (verdict.group(1) if verdict else text)[:200]


def load_state(path: Path) -> Any:
    """One rank's file, unpickled with `weights_only=True`: tensors, numbers, strings and containers only,
    so a crafted file cannot run code; anything else is refused in one line."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # UnpicklingError (a forbidden global), RuntimeError (not a torch file), ...
        detail = _reason(str(err))
        raise ConfigError(
            f"--load {path}: not a checkpoint primuspp can load safely ({type(err).__name__}: {detail})",
            key="load",
        ) from None


def _check_state(state: Any, path: Path, rank: int) -> dict[str, Any]:
    ok = (
        isinstance(state, dict)
        and isinstance(state.get("model"), dict)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state["model"].items())
        and isinstance(state.get("optimizer"), dict)
        and isinstance(state.get("param_groups"), list)
        and state.get("rank") == rank
    )
    if not ok:
        raise ConfigError(
            f"--load {path}: not rank {rank}'s state (expected 'model' tensors by name, 'optimizer', "
            f"'param_groups' and 'rank': {rank})",
            key="load",
        )
    return state


def check(checkpoint: Path, model: dict[str, Any]) -> dict[str, Any]:
    """Launcher side, before any rank starts: the meta (model, rank count) and every rank's file (loadable
    safely, the right structure, one shape per parameter name). Returns the meta."""
    meta = read_meta(checkpoint)
    if meta["model"] != model:
        raise ConfigError(
            f"--load {checkpoint}: saved for model {meta['model']}, this run's model is {model}", key="load"
        )
    shapes: dict[str, tuple[int, ...]] = {}
    for r, path in enumerate(rank_files(checkpoint, meta["pp"])):
        for name, tensor in _check_state(load_state(path), path, r)["model"].items():
            shape = tuple(tensor.shape)
            if shapes.setdefault(name, shape) != shape:
                raise ConfigError(
                    f"--load {path}: parameter {name} has shape {list(shape)}, another rank saved "
                    f"{list(shapes[name])}",
                    key="load",
                )
    return meta


def load_states(checkpoint: Path) -> list[dict[str, Any]]:
    """Every rank's saved state, in rank order (each loaded with `weights_only=True`)."""
    meta = read_meta(checkpoint)
    return [load_state(p) for p in rank_files(checkpoint, meta["pp"])]
