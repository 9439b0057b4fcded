"""Pause Python's cyclic garbage collector around bulk building of acyclic data.

Generating, lowering, validating and simulating a large table allocates hundreds of thousands of small
objects (nodes, intervals, tuples) that form no reference cycles. Each allocation burst triggers generation-2
collections that rescan every live object, including the whole table: at p=64, m=512 that is half of the
simulator's time. Reference counting still frees everything as usual while the collector is paused; the
previous collector state is restored on exit, so nesting is harmless.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def without_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of `gc_paused`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return fn(*args, **kwargs)

    return wrapper
