"""The `primuspp` command's process-level settings, all of them. Each is kept because it buys at least 10 %
of a user's whole command (CPU seconds, user + system, `bench/command_cost.py`; measured with the setting
off against on, side by side, on the project's 2-core machines); the library sets none of them, so a
process that imports primuspp keeps Python's, typer's, glibc's and numpy's defaults.

- **numpy's huge-page advice off** (`set_environment`, from `commands/__init__.py` before numpy is
  imported, unless the environment names a choice through numpy's documented `NUMPY_MADVISE_HUGEPAGE`).
  numpy asks for transparent huge pages on every array of 4 MB or more; where the kernel's THP defrag mode
  is `madvise` (so on this project's machines) the first touch of each may stall in a synchronous
  compaction. `simulate --algo zbv --pp 256 --mb 2048`: 10.9 CPU s with the advice, 6.5 without (a quiet
  machine, before results were written a rank at a time); measured again beside 15-20 other processes, the
  difference was within that noise (13.1-13.9 with, 11.1-14.1 without): to be measured again quietly.
- **Freed memory kept for reuse** (`keep_freed_memory`, when a verb that builds tables runs: not for
  `train`, `algorithms` or a --help). glibc's `mallopt`: arrays up to 32 MiB come from the heap and up to
  256 MiB of free heap top stays mapped, instead of a fresh `mmap` (a page fault per page, zeroed by the
  kernel) for each of the few hundred large arrays a build and simulation make and drop. Without it: `simulate
  --algo zbv --pp 64 --mb 512` +14 % CPU, the default `simulate` +9 %, zbv at p = 16 +7 % (medians of 3,
  side by side, a loaded machine). Elsewhere than glibc it does nothing (False).
- **No collection at exit** (`before_exit`: `gc.freeze()` once the verb is done). The interpreter's
  shutdown collections need not walk everything a run left alive (the algorithms' memos, the results);
  exit handlers and flushes run as ever. The default `simulate` without it, five pairs side by side: +5,
  +6, +8, +11, +20 % (borderline; kept while it measures so).

Measured and removed (under 10 % on every command above): pausing the cyclic collector around builds
(`gc_paused`: +6 % at p = 64, -1 to +2 % at p = 16 and on the default `simulate`). Removed as a second
implementation under 3x: typer's coercion answered without pydantic for plain values (`defer_coercion`,
on typer's private API): CPU seconds with / without it, side by side, load 7, `simulate --algo 1f1b --pp 4
--mb 8 --json` 0.46, 0.59, 0.50 / 0.77, 0.77, 0.81 and `simulate --algo zbv --pp 16 --mb 128 --json` 0.80,
0.82, 0.89 / 0.89, 1.07, 0.96 (1.1-1.6x).
"""

from __future__ import annotations

import gc
import os
import sys

#: numpy's environment switch for its huge-page advice, and the command line's default for it
HUGEPAGE_ADVICE = ("NUMPY_MADVISE_HUGEPAGE", "0")
#: glibc's mallopt parameters (malloc.h) and the values set
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 256 << 20


def set_environment() -> None:
    """The environment the command's process (and the ranks it starts) runs with."""
    os.environ.setdefault(*HUGEPAGE_ADVICE)


def before_exit() -> None:
    """The process is about to exit: its live objects need no more collections."""
    gc.freeze()


_kept: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse, once per process; whether it took."""
    global _kept
    if _kept is None:
        _kept = _mallopt()
    return _kept


def _mallopt() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc's alone: musl's mallopt is a stub)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # the mmap threshold first: the trim threshold alone would leave the large arrays on their own mappings
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
