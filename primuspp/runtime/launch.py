"""Run a function on every pipeline rank: start one process per rank here, or be one rank under torchrun.

`launch(fn, world_size, *args)` calls `fn(ctx, *args)` on each rank with `torch.distributed` initialised
(gloo on CPU, nccl when CUDA is there) and returns the results in rank order. Ranks are forked by a
multiprocessing fork server that imported torch (and what `preload` names) once, at this process's first
launch, and serves every later one: a rank starts in milliseconds instead of re-importing torch. The server
never runs torch ops (no threads to break by forking); each rank is its own process with the launcher's
environment, `OMP_NUM_THREADS=1` and one torch thread (several ranks share few cores), meets the others
through a file store in a private temp dir (no port to collide on), and dies with the launcher (a pipe the
launcher holds open: its end means the launcher is gone).

Failure: a rank that raises reports `rank R failed at NODE: error` and exits; the launcher then stops every
other rank (SIGTERM, then SIGKILL), reaps them all and raises `LaunchError` with the first failure, so
nothing hangs in a p2p wait and no process is left behind. Under torchrun (RANK and WORLD_SIZE set) the
failing rank prints the same line on stderr and exits 1; torchrun stops the others.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any

import torch
import torch.distributed as dist

from primuspp.errors import PrimusppError
from primuspp.runtime.runner import NodeFailure


class LaunchError(PrimusppError):
    """A rank failed; the message names it (and the node, when a node raised)."""

    def __init__(self, message: str, rank: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.detail = detail


@dataclass
class WorkerContext:
    """What `fn` gets on each rank."""

    rank: int
    world_size: int
    backend: str
    device: torch.device
    _queue: Any = field(default=None, repr=False)
    _on_report: Callable[[int, Any], None] | None = field(default=None, repr=False)

    def report(self, payload: Any) -> None:
        """Send `payload` to the launcher's `on_report(rank, payload)` (progress, partial results)."""
        if self._queue is not None:
            self._queue.put(("report", self.rank, _dumps(payload)))
        elif self._on_report is not None:
            self._on_report(self.rank, payload)


class StepProgress:
    """An `on_report` for training loops whose ranks report `("step", i, loss share, ms)` after each step:
    calls `on_step(i, summed loss, slowest ms)` once every rank reported step i."""

    def __init__(self, world: int, on_step: Callable[[int, float, float], None]) -> None:
        self.world, self.on_step = world, on_step
        self.partial: dict[int, list[tuple[float, float]]] = {}

    def __call__(self, rank: int, payload: Any) -> None:
        _, step, loss, ms = payload
        got = self.partial.setdefault(step, [])
        got.append((loss, ms))
        if len(got) == self.world:
            self.on_step(step, sum(x for x, _ in got), max(t for _, t in got))
            del self.partial[step]


def launch_steps(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    on_step: Callable[[int, float, float], None] | None = None,
) -> Any:
    """`launch` for training loops whose ranks report ("step", i, loss share, ms) after each step, with
    `on_step` called through `StepProgress` (not under torchrun, where a rank sees only its own reports)."""
    progress = StepProgress(world_size, on_step) if on_step is not None and not under_torchrun() else None
    return launch(fn, world_size, *args, on_report=progress)


#: what the fork server imports once for every rank (the launcher's main module, this one: torch), and
#: what `preload` adds
_PRELOAD = ["__main__", __name__]


def preload(module: str) -> None:
    """Have the ranks' fork server import `module` once for them all: a package the ranks import that this
    module does not (megatron-core). Applies when the server starts: at this process's first launch."""
    if module not in _PRELOAD:
        _PRELOAD.append(module)


def _dumps(obj: Any) -> bytes:
    """Plain pickle: tensors travel by value (torch's multiprocessing pickler would pass shared-memory
    handles, which die with the worker)."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str | None = None,
    on_report: Callable[[int, Any], None] | None = None,
    timeout: float = 300.0,
) -> list[Any] | None:
    """Run `fn(ctx, *args)` on `world_size` ranks; the results in rank order.

    Under torchrun this process is one rank: rank 0 gets every rank's result, the others None. `timeout`
    bounds each collective / p2p wait (the process group timeout)."""
    backend = backend or default_backend()
    if under_torchrun():
        return _run_as_torchrun_worker(fn, args, backend, on_report, timeout)
    return _spawn(fn, world_size, args, backend, on_report, timeout)


# -- worker side ----------------------------------------------------------------------------------------


def _die_with_launcher(lifeline: Any) -> None:
    """Kill this rank once `lifeline` ends: the launcher holds its other end open until every rank is reaped,
    so an end before that means the launcher died, and this rank would wait for nobody."""

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv_bytes()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="primuspp-lifeline", daemon=True).start()


def _describe(rank: int, err: BaseException) -> str:
    if isinstance(err, NodeFailure):
        return str(err)
    detail = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return " ".join(f"rank {rank} failed: {detail}".split())


def _init(rank: int, world_size: int, backend: str, init_method: str, timeout: float) -> torch.device:
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout)
    )
    return device


def _worker(
    rank: int,
    world_size: int,
    backend: str,
    init_method: str,
    timeout: float,
    fn: Callable[..., Any],
    args: tuple,
    queue: Any,
    lifeline: Any,
    env: dict[str, str],
) -> None:
    _die_with_launcher(lifeline)
    os.environ.clear()  # the launcher's, not the fork server's (started at an earlier launch)
    os.environ.update(env)
    try:
        device = _init(rank, world_size, backend, init_method, timeout)
        result = fn(WorkerContext(rank, world_size, backend, device, queue), *args)
    except BaseException as err:
        queue.put(("error", rank, _describe(rank, err), traceback.format_exc()))
        sys.stderr.flush()
        os._exit(1)  # no teardown: peers may be blocked on us; the launcher stops them
    queue.put(("ok", rank, _dumps(result)))
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def _run_as_torchrun_worker(
    fn: Callable[..., Any],
    args: tuple,
    backend: str,
    on_report: Callable[[int, Any], None] | None,
    timeout: float,
) -> list[Any] | None:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        device = _init(rank, world_size, backend, "env://", timeout)
        result = fn(WorkerContext(rank, world_size, backend, device, None, on_report), *args)
        gathered: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
    except BaseException as err:
        print(f"error: {_describe(rank, err)}", file=sys.stderr, flush=True)
        os._exit(1)
    dist.destroy_process_group()
    return gathered


# -- launcher side --------------------------------------------------------------------------------------


def _stop(procs: list[Any], grace: float = 3.0, finishing: float = 0.0) -> None:
    """Give the processes `finishing` seconds to exit on their own, then SIGTERM every live one, SIGKILL
    what is left after `grace` seconds, and reap all."""
    deadline = time.monotonic() + finishing
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()


#: for a fork server started now: one OpenMP thread (no BLAS threads in the process ranks are forked from),
#: and torch.cuda.is_available() through NVML (a CUDA driver initialised there would be unusable in the ranks)
_SERVER_ENV = {"OMP_NUM_THREADS": "1", "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


@contextlib.contextmanager
def _server_env() -> Any:
    saved = {key: os.environ.get(key) for key in _SERVER_ENV}
    os.environ.update(_SERVER_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


def _spawn(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple,
    backend: str,
    on_report: Callable[[int, Any], None] | None,
    timeout: float,
) -> list[Any]:
    # PRIMUSPP_RANK_START=spawn: each rank from a fresh interpreter instead (slower; the fallback should a
    # package imported by the fork server make forked ranks unusable)
    ctx = mp.get_context("spawn" if os.environ.get("PRIMUSPP_RANK_START") == "spawn" else "forkserver")
    ctx.set_forkserver_preload([*_PRELOAD, getattr(fn, "__module__", None) or "__main__"])
    queue = ctx.SimpleQueue()
    lifeline, held = ctx.Pipe(duplex=False)  # `held` stays open here until every rank is reaped
    tmp = tempfile.mkdtemp(prefix="primuspp-launch-")
    init_method = f"file://{os.path.join(tmp, 'store')}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    finished = False
    try:
        with _server_env():
            for rank in range(world_size):
                p = ctx.Process(
                    target=_worker,
                    args=(rank, world_size, backend, init_method, timeout, fn, args, queue, lifeline, env),
                    name=f"primuspp-rank{rank}",
                    daemon=True,
                )
                p.start()
                procs.append(p)
        results = _collect(procs, queue, world_size, on_report)
        finished = True
        return results
    finally:
        _stop(procs, finishing=10.0 if finished else 0.0)  # a failure stops the survivors at once
        queue.close()
        lifeline.close()
        held.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _collect(
    procs: list[Any], queue: Any, world_size: int, on_report: Callable[[int, Any], None] | None
) -> list[Any]:
    results: dict[int, Any] = {}
    reader = queue._reader
    by_sentinel = {p.sentinel: rank for rank, p in enumerate(procs)}
    live = set(by_sentinel)
    while len(results) < world_size:
        ready = wait([reader, *live])
        # drain messages first: a rank writes its result or error before it exits
        while reader.poll():
            kind, rank, *payload = queue.get()
            if kind == "ok":
                results[rank] = pickle.loads(payload[0])
            elif kind == "report":
                if on_report is not None:
                    on_report(rank, pickle.loads(payload[0]))
            else:
                raise LaunchError(payload[0], rank, payload[1])
        for sentinel in ready:
            if sentinel in live:
                live.discard(sentinel)
                rank = by_sentinel[sentinel]
                procs[rank].join(5)
                code = procs[rank].exitcode
                if rank not in results and not reader.poll():
                    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    raise LaunchError(f"rank {rank} died ({how}) before reporting a result", rank)
    return [results[r] for r in range(world_size)]
