"""Writing outputs safely: the one place every verb writes files and directories through.

Rules (a user's data is never lost):

- **Names.** A run name becomes one directory under `--out`: it must be one safe path component (letters,
  digits, `-_.+`, not `.` or `..`), so no name can reach outside the output (`safe_component`).
- **Single files** (`write_file`): a regular file or a missing path is written to a temp file in the same
  directory and renamed over the target (atomic; the old file's permission bits are kept). A symlink is
  written through: the file it points to is replaced atomically, the link stays (a dangling or looping link
  is refused). A character device or FIFO is written straight into (`--out /dev/null` stays a device); a
  FIFO nobody reads is refused instead of blocking. A directory, socket or block device is refused.
- **Directories the tool owns** (`replace_dir`): a simulate result (`<out>/<name>/`) and a pp_data dump of
  `train` are written whole into a temp directory beside the target, then swapped in (an atomic exchange
  where the kernel offers one, else rename aside / rename in / remove the old). An existing directory is
  replaced only when it is *ours*:

  * it carries its kind's marker: a simulate result its `summary.json` (which no other writer makes); a
    pp_data dump of `train` the file `.primuspp` (JSON `{"writer": "primuspp", "kind": "pp_data"}`), since
    its other files are Primus' format (dumps from before the marker count when their `config.json` has a
    `backend` naming a primuspp backend);
  * and every entry in it is a file this tool writes for that kind (`config.json`, `pp_rank_<r>.json`,
    `summary.json`, `schedule.json`, the marker). A directory holding anything else (a user's `NOTES.txt`)
    is not ours: replacing it would lose that file, so the command is refused, naming the file.

  An empty directory is replaced too (nothing in it to lose). Anything else at the path (a foreign
  directory, a plain file, a symlink, a device) is refused with exit 2 and left untouched.
- **Locks** (`locked_dir`): a command writing several result directories under one `--out` holds
  `<out>/.primuspp.lock` (an advisory `flock`, with the holder's pid written in it) for the whole run, so a
  second concurrent run into the same `--out` is refused (exit 2, naming the lock and the pid) instead of
  interleaving. A lock left by a dead process holds no `flock` and is taken over; anything but a regular
  file at the lock path (a FIFO, a directory) is refused and kept. Under the lock, the temp directories a
  killed run left are removed: only those carrying the mark `replace_dir` puts in its own (`TEMP_MARK`).
- **Preflight** (`check_file_target`, `check_dir_target`, `check_writable_dir`): every output location is
  checked before any work or rank starts, so a bad `--out` fails in a second, not after the run.

Every failure is a `ConfigError` naming the option (`--out PATH: ...`), exit 2 through the CLI.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from primuspp.errors import ConfigError

MARKER = ".primuspp"
LOCK = ".primuspp.lock"
#: prefixes of the temp and set-aside directories `replace_dir` makes beside its target, and the file that
#: marks one as made by primuspp (a killed run's are removed only when they carry it)
TMP_PREFIX = ".primuspp-tmp-"
OLD_PREFIX = ".primuspp-old-"
TEMP_MARK = ".primuspp-temporary"

#: what each kind of owned directory may hold (besides the marker)
_RESULT_FILES = re.compile(r"^(config\.json|summary\.json|schedule\.json|pp_rank_\d+\.json)$")
_PP_DATA_FILES = re.compile(r"^(\.primuspp|config\.json|pp_rank_\d+\.json)$")
_MARKERS = {"result": "summary.json", "pp_data": f"{MARKER} marker"}
KINDS = {"result": _RESULT_FILES, "pp_data": _PP_DATA_FILES}
_TRAIN_BACKENDS = ("torch", "megatron", "emulate")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_MAX_NAME = 200


def _fail(key: str, path: str | Path, what: str) -> ConfigError:
    return ConfigError(f"{key} {path}: {what}", key=key)


def safe_component(name: object, key: str) -> str:
    """`name` if it can be one directory under an output (letters, digits, `-_.+`; not `.`, `..`, empty)."""
    text = name if isinstance(name, str) else ""
    if not _SAFE_NAME.match(text) or text in (".", "..") or len(text) > _MAX_NAME:
        raise ConfigError(
            f"{key} {name!r}: a run name must be one path component of letters, digits and - _ . + "
            f"(not '.' or '..', at most {_MAX_NAME} characters)",
            key=key,
        )
    return text


# -- single files ----------------------------------------------------------------------------------------


def _nearest_existing(path: Path) -> Path:
    p = path
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _probe_dir(directory: Path, key: str, shown: str | Path) -> None:
    """Create and remove a temp file in `directory`: the one test that sees read-only mounts, immutable
    directories, ACLs and root alike."""
    try:
        fd, name = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
    except OSError as err:
        raise _fail(key, shown, f"cannot write in {directory} ({err.strerror})") from None
    os.close(fd)
    os.unlink(name)


def check_writable_dir(path: str | Path, key: str, shown: str | Path | None = None) -> Path:
    """`path` is an existing directory we can create files in, or can be created (its nearest existing
    ancestor is a writable directory). Creates nothing. Errors name `shown` (default: `path`)."""
    p = Path(path)
    name = p if shown is None else shown
    base = _nearest_existing(p)
    try:
        st = os.stat(base)  # follows symlinks: a link to a directory is fine as a place to write in
    except OSError as err:
        raise _fail(key, name, f"cannot use {base} ({err.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        what = "is not a directory" if base == Path(name) else f"{base} is not a directory"
        raise _fail(key, name, what)
    _probe_dir(base, key, name)
    return p


def _existing(p: Path, key: str) -> os.stat_result | None:
    """`lstat` of an output target, or None when it does not exist yet and its directory takes new files."""
    try:
        return os.lstat(p)
    except FileNotFoundError:
        check_writable_dir(p.parent, key, p)
        return None
    except OSError as err:
        raise _fail(key, p, f"cannot use ({err.strerror})") from None


def check_file_target(path: str | Path, key: str) -> Path:
    """Before any work: `write_file(path, ...)` can succeed (as far as can be told without writing)."""
    p = Path(path)
    lst = _existing(p, key)
    if lst is None:
        return p
    if stat.S_ISLNK(lst.st_mode):
        target = _link_target(p, key)
        return check_file_target(target, key) if target != p else p
    _check_file_kind(p, lst.st_mode, key)
    if stat.S_ISREG(lst.st_mode):
        check_writable_dir(p.parent, key, p)
    return p


def _check_file_kind(p: Path, mode: int, key: str) -> None:
    if stat.S_ISDIR(mode):
        raise _fail(key, p, "is a directory, expected a file")
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        what = "is a socket or block device; only files, FIFOs and character devices are written to"
        raise _fail(key, p, what)


def _link_target(link: Path, key: str) -> Path:
    """The file a symlink finally points to (which may not exist yet only if its directory does)."""
    try:
        target = Path(os.path.realpath(link, strict=True))
    except FileNotFoundError:
        raise _fail(key, link, f"is a dangling symlink (to {os.readlink(link)}); not followed") from None
    except OSError as err:  # ELOOP
        raise _fail(key, link, f"is a symlink that cannot be resolved ({err.strerror})") from None
    return target


def write_file(path: str | Path, data: str | bytes, key: str = "--out") -> Path:
    """Write `data` (str as UTF-8) to `path` under the rules in the module docstring; returns the path
    actually written (the link target for a symlink)."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        lst = os.lstat(p)
    except FileNotFoundError:
        lst = None
    except OSError as err:
        raise _fail(key, p, f"cannot write ({err.strerror})") from None
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        return write_file(_link_target(p, key), raw, key)
    if lst is not None:
        _check_file_kind(p, lst.st_mode, key)
        if not stat.S_ISREG(lst.st_mode):
            _write_special(p, raw, key)
            return p
    parent = p.parent if str(p.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _fail(key, p, f"cannot create {parent} ({err.strerror})") from None
    _replace_regular(p, raw, None if lst is None else stat.S_IMODE(lst.st_mode), key)
    return p


def _replace_regular(p: Path, raw: bytes, mode: int | None, key: str) -> None:
    """Write an unnamed file in the target's directory (O_TMPFILE), name it only to rename it over `p`: a run
    killed while writing leaves nothing behind. Where the file system has no unnamed files: a named temp."""
    tmp = None
    try:
        try:
            fd = os.open(p.parent, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except (OSError, AttributeError):  # AttributeError: not Linux
            fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:50]}.", suffix=".tmp", dir=p.parent)
    except OSError as err:
        raise _fail(key, p, f"cannot write in {p.parent} ({err.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fchmod(fd, mode if mode is not None else 0o666 & ~_umask())
            if tmp is None:
                tmp = f"{p.parent}/.{p.name[:50]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
                root = os.open("/", os.O_RDONLY)  # a dir fd makes os.link call linkat(AT_SYMLINK_FOLLOW)
                try:
                    os.link(f"/proc/self/fd/{fd}", tmp, src_dir_fd=root)
                finally:
                    os.close(root)
        # the path may have become something else meanwhile: replace only a regular file or nothing
        with contextlib.suppress(FileNotFoundError):
            now = os.lstat(p)
            if not stat.S_ISREG(now.st_mode):
                raise _fail(key, p, "changed into a non-regular file while writing; left as it is")
        os.replace(tmp, p)
    except OSError as err:
        raise _fail(key, p, f"cannot write ({err.strerror})") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_special(p: Path, raw: bytes, key: str) -> None:
    """Straight into a character device or FIFO. O_NONBLOCK on open: a FIFO without a reader fails at once
    (ENXIO) instead of blocking; then blocking writes, like a shell's `> fifo`."""
    try:
        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise _fail(key, p, "is a FIFO that nobody reads; not written") from None
        raise _fail(key, p, f"cannot write ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        _check_file_kind(p, st.st_mode, key)
        if stat.S_ISREG(st.st_mode):  # swapped for a regular file after the lstat: never truncate it here
            raise _fail(key, p, "changed while writing; left as it is")
        os.set_blocking(fd, True)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as err:
        raise _fail(key, p, f"cannot write ({err.strerror})") from None
    finally:
        os.close(fd)


# -- owned directories -----------------------------------------------------------------------------------


def _is_marked(directory: Path, kind: str) -> bool:
    """The directory carries the marker of `kind` (see the module docstring)."""
    if kind == "result":
        return (directory / "summary.json").is_file()
    if (directory / MARKER).is_file():
        return True
    try:
        with open(directory / "config.json", encoding="utf-8") as f:
            config = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("backend") in _TRAIN_BACKENDS


def check_dir_target(path: str | Path, kind: str, key: str) -> Path:
    """Before any work: `replace_dir(path, kind, ...)` may replace what is at `path` (nothing, an empty
    directory or one of ours) and can write beside it. Raises a one-line ConfigError otherwise."""
    p = Path(path)
    allowed = KINDS[kind]
    lst = _existing(p, key)
    if lst is None:
        return p
    if stat.S_ISLNK(lst.st_mode):
        raise _fail(key, p, "is a symlink; primuspp replaces only directories it wrote, give the directory")
    if not stat.S_ISDIR(lst.st_mode):
        raise _fail(key, p, "exists and is not a directory; primuspp replaces only directories it wrote")
    try:
        entries = sorted(os.listdir(p))
    except OSError as err:
        raise _fail(key, p, f"cannot list ({err.strerror})") from None
    if entries:
        if not _is_marked(p, kind):
            raise _fail(
                key,
                p,
                f"exists and was not written by primuspp (no {_MARKERS[kind]}); not replaced. "
                "Move it away or choose another output",
            )
        # a directory named like one of our files is not ours either
        foreign = [e for e in entries if not (allowed.match(e) and (p / e).is_file())]
        if foreign:
            raise _fail(
                key,
                p,
                f"holds {foreign[0]!s}, which primuspp did not write; replacing the directory would lose it. "
                "Move it away or choose another output",
            )
    check_writable_dir(p.parent, key, p)
    return p


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2  # the process' own libc (glibc >= 2.28)
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    res = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if res == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_dir(path: str | Path, kind: str, write: Callable[[Path], None], key: str) -> Path:
    """Build a `kind` directory with `write(tmp_dir)` and put it at `path` whole (see the module docstring).
    Nothing at `path` changes unless all of it was written; what was there is refused unless ours."""
    p = Path(path)
    check_dir_target(p, kind, key)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = make_temp_dir(parent, p.name)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 is for the temp name, not the result
    except OSError as err:
        raise _fail(key, p, f"cannot create a directory beside it ({err.strerror})") from None
    try:
        write(tmp)
        if kind == "pp_data":  # a simulate result is marked by its summary.json
            (tmp / MARKER).write_text(json.dumps({"writer": "primuspp", "kind": kind}) + "\n")
        os.unlink(tmp / TEMP_MARK)
        _swap_in(tmp, p, kind, key)
    except OSError as err:
        raise _fail(key, p, f"cannot write ({err.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return p


def make_temp_dir(parent: Path, name: str, prefix: str = TMP_PREFIX) -> Path:
    """A new temp directory in `parent` for `name`, marked as ours (`TEMP_MARK`) until it is swapped in."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{name[:50]}-", dir=parent))
    (tmp / TEMP_MARK).touch()
    return tmp


def _swap_in(tmp: Path, p: Path, kind: str, key: str) -> None:
    if not os.path.lexists(p):
        try:
            os.rename(tmp, p)  # fails (ENOTEMPTY/EEXIST) if something appeared meanwhile
            return
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    check_dir_target(p, kind, key)  # again, right before the swap: it may have changed during the work
    if _exchange(tmp, p):
        return  # `tmp` now holds the old directory; the caller removes it
    old = make_temp_dir(p.parent, p.name, OLD_PREFIX)
    try:
        os.rename(p, old / "x")
        try:
            os.rename(tmp, p)
        except OSError:
            os.rename(old / "x", p)
            raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


# -- locks -----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked_dir(directory: str | Path, key: str = "--out") -> Iterator[Path]:
    """Hold `<directory>/.primuspp.lock` (created with the directory if needed) for the block; a second
    holder, in this process or another, is refused with exit 2 naming the lock and its pid."""
    d = Path(directory)
    check_writable_dir(d, key)
    created = not os.path.lexists(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _fail(key, d, f"cannot create ({err.strerror})") from None
    lock = d / LOCK
    while True:
        _check_lock(lock, d, key)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as err:
            raise _fail(key, d, f"cannot create the lock {lock} ({err.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise _fail(
                key,
                d,
                f"in use by another primuspp run (pid {holder}, lock {lock}); wait for it to finish "
                "or choose another output",
            ) from None
        except OSError as err:
            os.close(fd)
            raise _fail(key, d, f"cannot lock {lock} ({err.strerror})") from None
        try:
            now = os.fstat(fd)
            same = os.path.samestat(now, os.lstat(lock))
        except FileNotFoundError:
            same = False
        if same and not stat.S_ISREG(now.st_mode):  # swapped in after the check: never removed by us
            os.close(fd)
            _check_lock(lock, d, key)
        if same:
            break
        os.close(fd)  # the previous holder removed the file between our open and our lock: try again
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _remove_leftovers(d)
        yield d
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
        if created:  # a run that wrote nothing leaves no empty directory behind
            with contextlib.suppress(OSError):
                d.rmdir()


def _check_lock(lock: Path, d: Path, key: str) -> None:
    """The lock path holds nothing or a regular file: anything else (a FIFO, a directory) is refused and
    left as it is."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(lock).st_mode):
            raise _fail(key, d, f"{lock} is not a regular file; left as it is, remove it to write here")


def _remove_leftovers(d: Path) -> None:
    """Temp directories a killed run left beside its targets: named as ours and carrying `TEMP_MARK` (a
    directory only named like them is the user's and is kept; only under the lock)."""
    for entry in d.iterdir():
        if entry.name.startswith((TMP_PREFIX, OLD_PREFIX)) and entry.is_dir() and not entry.is_symlink():
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(entry / TEMP_MARK).st_mode):
                    shutil.rmtree(entry, ignore_errors=True)


# -- default locations -----------------------------------------------------------------------------------

#: where `primuspp train` writes its pp_data unless `--dump-pp-data DIR` or `$DUMP_PP_DIR` say otherwise
DEFAULT_PP_DATA = Path("output") / "pp_data"


def default_pp_data_dir() -> Path:
    """`$DUMP_PP_DIR` if set (and not empty), else `output/pp_data` (relative to the working directory)."""
    return Path(os.environ.get("DUMP_PP_DIR") or DEFAULT_PP_DATA)
