"""Keep the memory a build frees for the next one, instead of handing it back to the system.

Each build + simulation makes and frees a few hundred numpy arrays. glibc's malloc serves the larger ones
with a fresh `mmap` (above its mmap threshold, 128 KiB at start) and gives back the free top of its heap
after a free (above its trim threshold), so the next build asks the kernel for the same memory again and
touches every page of it afresh: a page fault each, the kernel zeroing the page. On this project's
machines (virtual, 2 cores) a build + simulation at p = 16, m = 128 run after one of another program's
(Primus', in `bench/vs_primus.py`) faulted 170-215 times (1f1b, zero-bubble, zbv), and run after run alone
66 times (1f1b); told to keep the memory, a few at most. Beside Primus' runs that made 1f1b and
zero-bubble about 20 % faster and zbv 6-10 %; in the bench's default order (five of ours, then Primus'),
1f1b 20-25 % and zbv 10-15 % (docs/design.md, "Freed memory kept").

`keep_freed_memory()` sets both thresholds high for the rest of the process (glibc's `mallopt`: arrays up to
32 MiB come from the heap, up to 256 MiB of free heap top stays mapped). Memory freed is then reused, not
returned: a process that once built a large table keeps up to that much more resident until it exits.
That suits the offline verbs, which build and simulate many tables and then exit: the CLI calls it for
`simulate`, `dump`, `compare`, `viz` and `plan`, and the benchmarks do (both sides of a side-by-side
share the process). It is never called on import, nor for `train` (a training process's allocator is
torch's business). Elsewhere than glibc (macOS, musl) it does nothing and says so (False).
"""

from __future__ import annotations

import sys

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: allocations up to this size come from the heap: glibc's largest allowed value on 64-bit systems
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top kept mapped, up to this
TRIM_THRESHOLD = 256 << 20

_set: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse (see the module docstring), once per process;
    whether it took (False where the C library is not glibc)."""
    global _set
    if _set is None:
        _set = _mallopt()
    return _set


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
    # (each returns 1 on success; the mmap threshold first: setting the trim threshold alone would leave
    # the large arrays on their own mappings)
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
