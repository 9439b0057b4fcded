"""CLI processes forked from one that imported the command once: the corpus' ~540 runs skip the ~0.5 CPU s
of start-up each (imports), and each is still its own process, as `primuspp` runs: its own session and
process group, working directory, environment, address-space cap and stdio files, and `entry()` ends it
with the real exit code, exit handlers included. Only the imports are shared: nothing of a verb runs in
the server. `PRIMUSPP_CORPUS_FRESH=1` starts every run as `python -m primuspp.commands` instead (the
start-up itself is tested in tests/commands). A case that tests no import order may ask for a server that
has also imported heavy modules (torch, megatron-core: `preload`), one server per such set.

The server (`serve`, started as `python -c`, so that the training ranks' fork server, which preloads the
main module, does not import it) reads one JSON request a line on stdin and answers `{"id", "pid"}` when it
forked, `{"pid", "rc"}` when that child ended (rc as Popen's returncode: -N for signal N)."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import resource
import select
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: `python -m primuspp.commands`'s argv[0]
MAIN = str(REPO / "commands" / "__main__.py")


class Forked:
    """A forked CLI process, with the part of Popen the harness uses (pid, poll, wait, returncode)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None
        self._done = threading.Event()

    def _ended(self, rc: int) -> None:
        self.returncode = rc
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(MAIN, timeout or 0.0)
        return self.returncode  # type: ignore[return-value]


class Server:
    """The pytest side: starts the server, sends requests, hands each child's end to its `Forked`."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = ()) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", f"from tests.adversarial.forkserver import serve; serve({preload!r})"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._next = 0
        self._asked: dict[int, threading.Event] = {}  # request id -> set once forked
        self._pids: dict[int, int] = {}  # request id -> pid
        self._procs: dict[int, Forked] = {}  # pid -> its process, until it ends
        self._early: dict[int, int] = {}  # pid -> rc of a child that ended before its Forked was made
        if self._proc.stdout.readline().strip() != "ready":  # imported (the verbs' modules included)
            raise RuntimeError("the corpus' fork server did not start")
        threading.Thread(target=self._read, daemon=True).start()
        atexit.register(self.close)

    def close(self) -> None:
        """End the server (it returns at the end of its stdin) and reap it."""
        self._proc.stdin.close()
        self._proc.wait(30)

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path, cap: int | None):
        request = {"argv": argv, "cwd": str(cwd), "env": env, "out": str(out), "err": str(err), "cap": cap}
        with self._lock:
            self._next += 1
            rid = self._next
            forked = self._asked[rid] = threading.Event()
            self._proc.stdin.write(json.dumps({"id": rid, **request}) + "\n")
            self._proc.stdin.flush()
        if not forked.wait(60):
            raise RuntimeError("the corpus' fork server did not answer")
        with self._lock:
            pid = self._pids.pop(rid)
            proc = Forked(pid)
            if pid in self._early:
                proc._ended(self._early.pop(pid))
            else:
                self._procs[pid] = proc
        return proc

    def _read(self) -> None:
        for line in self._proc.stdout:
            msg = json.loads(line)
            with self._lock:
                if "id" in msg:
                    self._pids[msg["id"]] = msg["pid"]
                    self._asked.pop(msg["id"]).set()
                elif msg["pid"] in self._procs:
                    self._procs.pop(msg["pid"])._ended(msg["rc"])
                else:
                    self._early[msg["pid"]] = msg["rc"]


_started: dict[tuple[str, ...], Server] = {}


def server(env: dict[str, str], preload: tuple[str, ...] = ()) -> Server:
    """This process's server that has imported `preload` too, started on first use with `env`."""
    with _starting:
        if preload not in _started:
            _started[preload] = Server(env, preload)
        return _started[preload]


def stop() -> None:
    """End this process's servers, if any run: no process outlives the corpus (the runtime tests check
    that a launch leaves no child behind)."""
    with _starting:
        while _started:
            _started.popitem()[1].close()


_starting = threading.Lock()


def fresh() -> bool:
    return os.environ.get("PRIMUSPP_CORPUS_FRESH", "") not in ("", "0")


# -- the server process ----------------------------------------------------------------------------


def serve(preload: tuple[str, ...] = ()) -> None:
    """Import the command, its verbs and `preload` (those that import: a case needing what is missing is
    skipped), then fork one child per request; a child runs `entry()` and leaves this function by its
    SystemExit (so the interpreter ends it as it ends `primuspp`)."""
    before = dict(os.environ)
    from primuspp.commands.app import VERBS

    for verb in VERBS:
        importlib.import_module(verb.module)
    for module in preload:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    #: what importing the command put into the environment (its process settings): a child sets it again
    added = {k: v for k, v in os.environ.items() if k not in before}
    os.write(1, b"ready\n")
    pending = b""
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([stdin], [], [], 0.01)
        if ready:
            chunk = os.read(stdin, 1 << 16)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request, added)  # never returns
                _say({"id": request["id"], "pid": pid})
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _say({"pid": pid, "rc": os.waitstatus_to_exitcode(status)})


def _say(msg: dict) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())


def _child(request: dict, added: dict[str, str]) -> None:
    os.setsid()
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        new = os.open(path, flags, 0o644)
        os.dup2(new, fd)
        os.close(new)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for key, value in added.items():
        os.environ.setdefault(key, value)
    if request["cap"]:
        resource.setrlimit(resource.RLIMIT_AS, (request["cap"], request["cap"]))
    sys.argv = [MAIN, *request["argv"]]
    from primuspp.commands.app import entry

    entry()
    sys.exit(0)
