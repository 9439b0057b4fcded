"""Consoles and the delayed progress bar shared by the verbs."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _width(stream) -> int | None:
    """Terminals report their own width; pipes and logs get 160 columns instead of rich's 80."""
    if os.environ.get("COLUMNS") or stream.isatty():
        return None
    return 160


out = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err = Console(stderr=True, highlight=False, width=_width(sys.stderr))

T = TypeVar("T")


def progress(items: Iterable[T], label: str, delay: float = 1.0) -> Iterator[T]:
    """Yield `items`; once iterating has taken over `delay` seconds, show a progress bar on stderr."""
    items = list(items)
    start = time.perf_counter()
    bar: Progress | None = None
    task = None
    try:
        for i, item in enumerate(items):
            if bar is None and time.perf_counter() - start > delay and err.is_terminal:
                bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err,
                    transient=True,
                )
                bar.start()
                task = bar.add_task(label, total=len(items), completed=i)
            if bar is not None:
                bar.update(task, description=f"{label} {item}" if isinstance(item, str) else label)
            yield item
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
