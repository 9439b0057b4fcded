"""The adversarial corpus' harness: each case builds its inputs in a fresh directory, runs the real CLI in
its own process group (forked from a process that imported the command once: `forkserver`), and checks
the exact outcome.

Outcome rules (issue 11): exit 0 (and what the case says it produces), or exit 2 with exactly one
non-empty stderr line starting `error: ` that names the key; `error: internal` never counts. Besides:
every file outside the case's declared outputs is unchanged (hashed before and after), special files stay
special (a FIFO stays a FIFO, a device node stays a device), no process of the CLI's group is left, and the
run ends within the case's time limit (a FIFO input must not block).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.adversarial import forkserver

REPO = Path(__file__).resolve().parents[2]
#: address-space cap of offline CLI runs: a memory blow-up ends in MemoryError, not in a swapping host
OFFLINE_AS_LIMIT = 6 * 2**30
#: how long after the CLI exits a process of its group may still be exiting
LEFTOVER_GRACE_S = 3.0

# -- expectations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """`ok`: exit 0; `refused`: exit 2, one `error: ` line naming one of `keys`; `either`: one of both (the
    issue allows writing through or refusing). `forbid`: substrings the error line must not hold (e.g.
    `No such option` when the case passes a flag the fix must add)."""

    outcome: str  # "ok" | "refused" | "either"
    keys: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()


def OK() -> Expect:
    return Expect("ok")


def ERR(*keys: str, forbid: Sequence[str] = ()) -> Expect:
    return Expect("refused", tuple(keys), ("No such option", *forbid))


def EITHER(*keys: str) -> Expect:
    return Expect("either", tuple(keys))


# -- the per-case directory ------------------------------------------------------------------------


@dataclass
class Ctx:
    """A case's directory: `cwd` (the CLI's working directory), `inp` (inputs), `out` (not created),
    `victim` (user files the CLI must never touch) and the shared, read-only `golden` fixtures."""

    root: Path
    golden: Path

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def inp(self) -> Path:
        return self.root / "in"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def victim(self) -> Path:
        return self.root / "victim"

    @property
    def marker(self) -> Path:
        """Created by planted code if it ever runs."""
        return self.root / "victim" / "PWNED"

    def write(self, rel: str, content: str | bytes) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        path.write_bytes(content)
        return path

    def fifo(self, rel: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        return path

    def null_device(self, rel: str) -> Path:
        """A character device with /dev/null's numbers (we run as root): harmless to write into, and a
        tool that replaces it shows as a type change."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        st = os.stat("/dev/null")
        os.mknod(path, stat.S_IFCHR | 0o666, st.st_rdev)
        return path

    def symlink(self, rel: str, target: str | Path) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
        return path

    def copy_golden(self, name: str, rel: str) -> Path:
        src, dst = self.golden / name, self.root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
        return dst


@dataclass
class Outcome:
    rc: int | None  # None: killed after the time limit
    stdout: str
    stderr: str
    wall: float
    leftover: int = 0  # processes of the CLI's group still alive after it ended
    ended: float = 0.0  # seconds from the start of the case's first process to this one's exit


Check = Callable[[Ctx, list[Outcome]], str | None]


@dataclass(frozen=True)
class Case:
    """One adversarial case. `setup(ctx)` builds the inputs and returns the CLI arguments (a list of lists
    for concurrent runs). `outputs`: fnmatch patterns (relative to the case directory) of the paths the CLI
    may create or change on success; everything else must stay byte for byte. `check(ctx, outcomes)`: an
    extra check after the run (None or what is wrong). `during`: a context manager factory around the run
    (e.g. a reader on an output FIFO)."""

    id: str
    item: str  # issue 11 item ("1".."14") or "own"
    verb: str
    kind: str
    setup: Callable[[Ctx], list]
    expect: Expect
    outputs: tuple[str, ...] = ()
    check: Check | None = None
    timeout: float = 60.0
    during: Callable[[Ctx], contextlib.AbstractContextManager] | None = None
    needs: str | None = None  # "megatron", "chattr": skipped (with the reason) where missing
    #: how to run the argvs (default: all at once, run_cli); `runner(ctx, argvs, logs, timeout)`
    runner: Callable[[Ctx, list[list[str]], Path, float], list[Outcome]] | None = None
    heavy: bool = False  # starts ranks (train): no address-space cap
    #: modules imported once, before the fork, besides the verbs (`forkserver`): only for cases that do
    #: not test what the CLI imports before its answer (as the `FAST` refusals of cases_train do)
    preload: tuple[str, ...] = ()


# -- snapshot: what is on disk, lstat-wise ---------------------------------------------------------


def _entry(path: Path) -> tuple:
    st = os.lstat(path)
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(mode):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return ("file", h.hexdigest())
    if stat.S_ISDIR(mode):
        return ("dir",)
    if stat.S_ISFIFO(mode):
        return ("fifo",)
    if stat.S_ISCHR(mode):
        return ("chr", st.st_rdev)
    if stat.S_ISBLK(mode):
        return ("blk", st.st_rdev)
    return ("other", stat.S_IFMT(mode))


def snapshot(root: Path) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            try:
                found[rel] = _entry(p)
            except OSError as err:
                found[rel] = ("unreadable", err.errno)
    return found


def _match(parts: list[str], pattern: list[str]) -> bool:
    """Path-segment glob: `*` within one segment, `**` for any number of segments."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(parts[1:], pattern[1:])


def _allowed(rel: str, patterns: Sequence[str]) -> bool:
    parts = rel.split("/")
    return any(_match(parts, p.split("/")) for p in patterns)


def compare_snapshots(before: dict, after: dict, outputs: Sequence[str]) -> list[str]:
    """What changed that should not have. In `outputs`: files may be created, changed or removed, but an
    entry never changes type (a FIFO, device, symlink, file or directory stays what it was)."""
    problems = []
    for rel, was in before.items():
        now = after.get(rel)
        if now is None:
            if not (_allowed(rel, outputs) and was[0] in ("file", "dir")):
                problems.append(f"{rel} ({was[0]}) was removed")
        elif now[0] != was[0]:
            problems.append(f"{rel} changed type {was[0]} -> {now[0]}")
        elif now != was and not _allowed(rel, outputs):
            problems.append(f"{rel} was modified")
    for rel, now in after.items():
        if rel in before or _allowed(rel, outputs):
            continue
        if now[0] == "dir" and not any(k.startswith(rel + "/") for k in after):
            continue  # an empty new directory loses nothing
        if now[0] == "dir":
            continue  # its files are reported themselves
        problems.append(f"{rel} ({now[0]}) was created outside the outputs")
    return problems


# -- running the CLI -------------------------------------------------------------------------------


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DUMP_PP_DIR"))}
    env.update({"OMP_NUM_THREADS": "1", "COLUMNS": "160", "PYTHONDONTWRITEBYTECODE": "1"})
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state, fields[2] the process group
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (OFFLINE_AS_LIMIT, OFFLINE_AS_LIMIT))


def start(
    argv: list[str], cwd: Path, logs: Path, heavy: bool, fresh: bool = False, preload: tuple[str, ...] = ()
) -> tuple[Any, Path, Path]:
    """Start `primuspp ARGV` in its own session: forked from the corpus' fork server (`forkserver`, the one
    that has imported `preload` too), or a fresh `python -m primuspp.commands` (`fresh`, or
    PRIMUSPP_CORPUS_FRESH=1). `heavy` runs (train) have no address-space cap."""
    logs.mkdir(parents=True, exist_ok=True)
    n = len(list(logs.glob("stdout*")))
    out_path, err_path = logs / f"stdout{n}", logs / f"stderr{n}"
    env = cli_env()
    if not (fresh or forkserver.fresh()):
        cap = None if heavy else OFFLINE_AS_LIMIT
        proc = forkserver.server(env, preload).start(argv, cwd, env, out_path, err_path, cap)
        return proc, out_path, err_path
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "primuspp.commands", *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fo,
            stderr=fe,
            start_new_session=True,
            preexec_fn=None if heavy else _limit_memory,
        )
    return proc, out_path, err_path


def finish(proc: Any, out_path: Path, err_path: Path, deadline: float, t0: float) -> Outcome:
    rc: int | None
    try:
        rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        rc = None
    wall = time.monotonic() - t0
    leftover = _group_members(proc.pid)
    grace = time.monotonic() + LEFTOVER_GRACE_S
    while leftover and rc is not None and time.monotonic() < grace:
        time.sleep(0.1)  # a child the CLI reaped late may still be exiting
        leftover = _group_members(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if rc is None:
        proc.wait()
    return Outcome(
        rc,
        out_path.read_text(errors="replace"),
        err_path.read_text(errors="replace"),
        wall,
        len(leftover) if rc is not None else 0,
        wall,
    )


def run_cli(
    argvs: list[list[str]], cwd: Path, logs: Path, timeout: float, heavy: bool, preload: tuple[str, ...] = ()
) -> list[Outcome]:
    """Start every argv at once (concurrent runs), each in its own session; wait for all. Concurrent runs
    start as fresh processes, as users start them (two forked at the same instant race more tightly: a
    `simulate` refused by the other's lock can then print progress lines before its error line)."""
    t0 = time.monotonic()
    started = [start(a, cwd, logs, heavy, fresh=len(argvs) > 1, preload=preload) for a in argvs]
    deadline = t0 + timeout
    return [finish(p, o, e, deadline, t0) for p, o, e in started]


# -- checking one outcome --------------------------------------------------------------------------


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


def judge(expect: Expect, o: Outcome, timeout: float) -> str | None:
    """None if the outcome is what the case expects, else what is wrong (one line)."""
    if o.rc is None:
        return f"hung: still running after {timeout:.0f} s (killed)"
    lines = error_lines(o.stderr)
    if "Traceback (most recent call last)" in o.stderr:
        return f"traceback on stderr (exit {o.rc}): {lines[-1] if lines else ''}"
    internal = [ln for ln in lines if ln.startswith("error: internal")]
    if internal:
        return f"internal error (exit {o.rc}): {internal[0]}"
    if o.leftover:
        return f"{o.leftover} process(es) of the CLI's group left running"
    if o.rc == 0:
        if expect.outcome == "refused":
            return f"accepted (exit 0), expected exit 2 naming one of {list(expect.keys)}"
        errs = [ln for ln in lines if ln.startswith("error")]
        if errs:
            return f"exit 0 but an error line on stderr: {errs[0]}"
        return None
    if o.rc != 2:
        first = next((ln for ln in lines if ln.startswith("error")), lines[-1] if lines else "")
        return f"exit {o.rc} (expected {'0' if expect.outcome == 'ok' else '2'}): {first}"
    if expect.outcome == "ok":
        return f"refused, expected success: {lines[0] if lines else '(no stderr)'}"
    if len(lines) != 1:
        return f"exit 2 with {len(lines)} stderr lines, expected one: {' | '.join(lines)[:400]}"
    line = lines[0]
    if not line.startswith("error: "):
        return f"exit 2 but the line does not start with 'error: ': {line}"
    bad = [f for f in expect.forbid if f in line]
    if bad:
        return f"exit 2 for the wrong reason ({bad[0]!r}): {line}"
    if expect.keys and not any(k in line for k in expect.keys):
        return f"exit 2 but the line names none of {list(expect.keys)}: {line}"
    return None


# -- the golden fixtures, built once per process ---------------------------------------------------

ALGOS = (
    "gpipe",
    "1f1b",
    "1f1b-interleaved",
    "zero-bubble",
    "zb-h2",
    "zero-bubble-heuristic",
    "zbv",
    "v-half",
    "v-min",
    "v-auto",
    "dualpipe",
    "dualpipe-v",
)

GOLDEN_YAML = (
    """\
pp: 4
micro_batches: 8
costs: {forward: 10, backward: 10, wgrad: 5, comm: 1, activation: 1, b_free_fraction: 0}
runs:
"""
    + "".join(f"  - algorithm: {a}\n" + ("    vpp: 2\n" if a == "1f1b-interleaved" else "") for a in ALGOS)
    + "  - {algorithm: zbv, name: zbv-offload, params: {offload: true}}\n"
)


def _must(argv: list[str], cwd: Path) -> None:
    [o] = run_cli([argv], cwd, cwd / ".logs", 300, heavy=False)
    if o.rc != 0:
        raise RuntimeError(f"golden fixture: primuspp {' '.join(argv)} failed: {o.stderr.strip()[-500:]}")


@functools.cache
def golden() -> Path:
    """Real outputs of the tool, made once: `all/<algo>/` (a simulate root of every algorithm, p=4 m=8),
    `table.json` / `table.txt` (1f1b p=4 m=8 dumps), `pp8/1f1b` (a p=8 result), `all.yaml`."""
    root = Path(tempfile.mkdtemp(prefix="primuspp-adv-golden-"))
    import atexit

    atexit.register(shutil.rmtree, root, True)
    (root / "all.yaml").write_text(GOLDEN_YAML)
    _must(["simulate", "--config", str(root / "all.yaml"), "--out", str(root / "all")], root)
    base = ["--algo", "1f1b", "--pp", "4", "--mb", "8"]
    _must(["dump", *base, "--format", "json", "--out", str(root / "table.json")], root)
    _must(["dump", *base, "--format", "text", "--out", str(root / "table.txt")], root)
    _must(["simulate", "--algo", "1f1b", "--pp", "8", "--mb", "16", "--out", str(root / "pp8")], root)
    shutil.rmtree(root / ".logs", ignore_errors=True)
    return root


# -- running one case ------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    passed: bool
    reason: str = ""
    stderr_line: str = ""
    skipped: str = ""
    outcomes: list[Outcome] = field(default_factory=list)


@functools.cache
def available(what: str) -> str | None:
    """None if the capability is here, else why not."""
    if what == "megatron":
        try:
            import importlib.util

            return None if importlib.util.find_spec("megatron.core") else "megatron-core is not installed"
        except (ImportError, ValueError):
            return "megatron-core is not installed"
    if what == "chattr":
        probe = Path(tempfile.mkdtemp(prefix="primuspp-adv-chattr-"))
        try:
            r = subprocess.run(["chattr", "+i", str(probe)], capture_output=True)
            if r.returncode != 0:
                return "hardware: no immutable files on this filesystem (chattr +i)"
            subprocess.run(["chattr", "-i", str(probe)], capture_output=True)
            return None
        except FileNotFoundError:
            return "hardware: chattr is not installed (as root, chmod alone stops no write)"
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    raise ValueError(what)


def _unfreeze(root: Path) -> None:
    """Undo `chattr +i` a case set, so that its directory can be removed."""
    if shutil.which("chattr"):
        subprocess.run(["chattr", "-R", "-i", str(root)], capture_output=True)


def run_case(case: Case, base: Path) -> Result:
    if case.needs:
        why = available(case.needs)
        if why:
            return Result(case, True, skipped=why)
    ctx = Ctx(base, golden())
    for d in (ctx.cwd, ctx.inp, ctx.victim / "sub"):
        d.mkdir(parents=True, exist_ok=True)
    (ctx.victim / "thesis.txt").write_text("four years of work\n")
    (ctx.victim / "sub" / "notes.md").write_text("# notes\n")
    try:
        try:
            argvs = case.setup(ctx)
        except Exception as err:  # a broken case, not a product failure: say so
            return Result(case, False, f"harness: the case's setup failed: {type(err).__name__}: {err}")
        if argvs and isinstance(argvs[0], str):
            argvs = [argvs]
        logs = Path(tempfile.mkdtemp(prefix="logs-", dir=base.parent))
        before = snapshot(ctx.root)
        guard = case.during(ctx) if case.during else contextlib.nullcontext()
        with guard:
            if case.runner is not None:
                outcomes = case.runner(ctx, argvs, logs, case.timeout)
            else:
                outcomes = run_cli(argvs, ctx.cwd, logs, case.timeout, case.heavy, case.preload)
        after = snapshot(ctx.root)
        shutil.rmtree(logs, ignore_errors=True)
    finally:
        _unfreeze(ctx.root)
    problems = []
    for o in outcomes:
        why = judge(case.expect, o, case.timeout)
        if why:
            problems.append(why)
    succeeded = all(o.rc == 0 for o in outcomes)
    # a refused run writes nothing; with several runs (concurrency cases) any that succeeded may write
    outputs = case.outputs if any(o.rc == 0 for o in outcomes) else ()
    if succeeded and case.expect.outcome == "refused":  # already failed: report only what lies elsewhere
        outputs = ("out", "out/**", "cwd/**")
    changes = compare_snapshots(before, after, outputs)
    if changes:
        problems.append("files outside the output touched: " + "; ".join(changes[:4]))
    if ctx.marker.exists():
        problems.append("planted code ran (its marker file exists)")
    if case.check and not problems:
        why = case.check(ctx, outcomes)
        if why:
            problems.append(why)
    line = next((ln for o in outcomes for ln in error_lines(o.stderr) if ln.startswith("error")), "")
    return Result(case, not problems, "; ".join(problems), line, outcomes=outcomes)


@contextlib.contextmanager
def fifo_reader(path: Path) -> Iterator[bytearray]:
    """Hold a FIFO open for reading (and drain it) while the CLI runs, so that writing into it cannot
    block: the case then tells apart writing into the FIFO from replacing it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    got = bytearray()
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                chunk = b""
            if chunk:
                got.extend(chunk)
            else:
                time.sleep(0.02)

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        yield got
    finally:
        stop.set()
        t.join()
        os.close(fd)
