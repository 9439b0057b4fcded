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
        if final.exists():  # the same step saved again
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
    try:
        return json.loads((checkpoint / META).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--load {checkpoint}: unreadable {META} ({err})", key="load") from None


def load_states(checkpoint: Path) -> list[dict[str, Any]]:
    """Every rank's saved state, in rank order."""
    files = sorted(checkpoint.glob("rank_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    return [torch.load(p, map_location="cpu", weights_only=False) for p in files]
