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
- **typer's coercion deferred** (`defer_coercion`, on every parameter of the root and of the verb run).
  typer 0.29 builds a pydantic TypeAdapter for every parameter it processes, a flag not given included;
  importing pydantic and building them is a third of `simulate --algo zbv --pp 16 --mb 128 --json` (+54 %
  without the deferral, +22 % at p = 64). A value typer would answer without doubt (None, plain digits, a
  plain decimal, a string, a list of strings, a path) is answered here as typer answers it
  (tests/commands/test_process.py holds both equal over every verb's parameters); any other goes to typer's
  own coercion, built on first use. It uses typer's private API, so it is applied only on the typer minor
  version it was written and tested against (`TYPER_HOOKED`); on any other typer runs as it always does.

- **No collection at exit** (`before_exit`: `gc.freeze()` once the verb is done). The interpreter's
  shutdown collections need not walk everything a run left alive (the algorithms' memos, the results);
  exit handlers and flushes run as ever. The default `simulate` without it, five pairs side by side: +5,
  +6, +8, +11, +20 % (borderline; kept while it measures so).

Measured and removed (under 10 % on every command above): pausing the cyclic collector around builds
(`gc_paused`: +6 % at p = 64, -1 to +2 % at p = 16 and on the default `simulate`).
"""

from __future__ import annotations

import gc
import os
import re
import sys
from pathlib import Path
from typing import Any

import typer

#: numpy's environment switch for its huge-page advice, and the command line's default for it
HUGEPAGE_ADVICE = ("NUMPY_MADVISE_HUGEPAGE", "0")
#: glibc's mallopt parameters (malloc.h) and the values set
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 << 20, 256 << 20
#: the typer versions (major.minor) whose private coercion API `defer_coercion` uses
TYPER_HOOKED = typer.__version__.split(".")[:2] == ["0", "29"]


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


# -- typer's coercion, deferred ---------------------------------------------------------------------------


def defer_coercion(params: list[Any]) -> list[Any]:
    """Each typer parameter whose coercion is not built yet gets a `_DeferredCoercion`, on `TYPER_HOOKED`
    versions only (a parameter without typer's private `_runtime_param`/`type_descriptor` is left alone)."""
    if not TYPER_HOOKED:
        return params
    for param in params:
        if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = _DeferredCoercion(param.type_descriptor)
    return params


class _DeferredCoercion:
    """Stands in for a parameter's typer coercion until a value arrives: None is answered as typer's
    `RuntimeParam.coerce` answers it, a plain value by `fast_coerce`, any other by typer's own."""

    __slots__ = ("descriptor", "real")

    def __init__(self, descriptor: Any) -> None:
        self.descriptor, self.real = descriptor, None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if not (param.multiple or param.nargs == -1) or not isinstance(value, str):
            fast = fast_coerce(self.descriptor, value, param, ctx)
            if fast is not SLOW:
                return fast
        if self.real is None:
            from typer._coercion import build_runtime_param

            self.real = build_runtime_param(self.descriptor)
        return self.real.coerce(value, param=param, ctx=ctx)


#: returned when the value is left to typer's coercion
SLOW = object()

_INT = re.compile(r"(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_PATH_FLAGS = ("exists", "resolve_path", "allow_dash", "path_type", "parser", "writable", "executable")


def fast_coerce(descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    """Typer's coercion of `value` (not None) for a parameter of `descriptor`'s type, or SLOW: only values
    whose result is certain (plain digits for an int, a plain decimal for a float, a default of the
    parameter's own type, strings, a list of strings, a path typer would accept)."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return SLOW
    annotation = descriptor.annotation
    if annotation in (str, int, float, bool) and type(value) is annotation:  # a default, or a string
        return value if annotation in (str, bool) or _plain_number(info) else SLOW
    if annotation is int and type(value) is str and _plain_number(info) and _INT.fullmatch(value):
        return int(value)
    if annotation is float and type(value) is str and _plain_number(info) and _FLOAT.fullmatch(value):
        return float(value)
    if annotation == list[str] and type(value) in (list, tuple) and all(type(v) is str for v in value):
        return list(value)
    if annotation is Path and type(value) is str and value and "\0" not in value:
        return _path(info, value, param, ctx)
    return SLOW


def _plain_number(info: Any) -> bool:
    return info.min is None and info.max is None and not info.clamp


def _path(info: Any, value: str, param: Any, ctx: Any) -> Any:
    """typer's own path checks on `Path(value)` (what pydantic makes of a non-empty string); a value they
    refuse goes to typer's coercion, which refuses it in its own words."""
    if any(getattr(info, flag, None) for flag in _PATH_FLAGS):
        return SLOW
    from typer._click.exceptions import BadParameter
    from typer._param_types import coerce_cli_path

    try:
        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    except BadParameter:
        return SLOW
