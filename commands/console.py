"""Consoles and the delayed progress bar shared by the verbs."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress


def _width(stream) -> int | None:
    """Terminals report their own width; pipes and logs get 160 columns instead of rich's 80."""
    if os.environ.get("COLUMNS") or stream.isatty():
        return None
    return 160


class LazyConsole:
    """A rich Console made on first use: importing rich is a tenth of a small command's whole CPU time, and
    `simulate --json` prints nothing through it."""

    def __init__(self, **settings: Any) -> None:
        self._settings, self._console = settings, None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._settings)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


out = LazyConsole(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err = LazyConsole(stderr=True, highlight=False, width=_width(sys.stderr))

T = TypeVar("T")


def progress(items: Iterable[T], label: str, delay: float = 1.0, every: float = 5.0) -> Iterator[T]:
    """Yield `items`; once iterating has taken over `delay` seconds, show progress on stderr: a bar on a
    terminal, else (a pipe, a log file) plain lines `label i/n (item) elapsed`, at most one each `every`
    seconds or 10 % of the items, and a last line when done, so a piped run is never silent for long."""
    items = list(items)
    if not sys.stderr.isatty():  # (rich's is_terminal, without rich)
        yield from _progress_lines(items, label, delay, every)
        return
    start = time.perf_counter()
    bar: Progress | None = None
    task = None
    try:
        for i, item in enumerate(items):
            if bar is None and time.perf_counter() - start > delay:
                # imported here: most runs end before the bar would show (start-up time)
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                )

                bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err.console,
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


class StepLines:
    """Progress of a long run as plain stderr lines (`label: 3/10 steps, <status>, 42 s`): nothing while the
    run may still be refused (a bad input stays one line), then one line each `every` seconds while the
    ranks set up, one each `every` seconds or 10 % of the steps, and one at the last step. `close()` ends
    the set-up lines."""

    def __init__(self, label: str, total: int, every: float = 5.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.completed, self.status = 0, ""
        self.start = time.perf_counter()
        self._last_time, self._last_tenth = self.start, 0
        self._stepping = threading.Event()
        threading.Thread(target=self._setting_up, daemon=True).start()

    def _setting_up(self) -> None:
        while not self._stepping.wait(self.every):
            elapsed = time.perf_counter() - self.start
            print(f"{self.label}: setting up ({self.total} steps), {elapsed:.0f} s", file=sys.stderr)

    def close(self) -> None:
        self._stepping.set()

    def update(self, completed: int | None = None, advance: int = 0, status: str | None = None, **_) -> None:
        self._stepping.set()
        self.completed = (self.completed if completed is None else completed) + advance
        self.status = self.status if status is None else status
        now = time.perf_counter()
        tenth = 10 * self.completed // self.total if self.total else 0
        done = self.completed >= self.total
        if done or tenth > self._last_tenth or now - self._last_time >= self.every:
            status = f", {self.status}" if self.status else ""
            print(
                f"{self.label}: {self.completed}/{self.total} steps{status}, {now - self.start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            self._last_time, self._last_tenth = now, tenth


def _progress_lines(items: list[T], label: str, delay: float, every: float) -> Iterator[T]:
    n = len(items)
    start = time.perf_counter()
    last_time, last_tenth, printed = start, 0, False
    for i, item in enumerate(items):
        now = time.perf_counter()
        tenth = 10 * i // n if n else 0
        if now - start > delay and (now - last_time >= every or tenth > last_tenth or not printed):
            name = getattr(item, "name", item if isinstance(item, str) else None)
            what = f" ({name})" if name else ""
            print(f"{label} {i + 1}/{n}{what} {now - start:.0f} s", file=sys.stderr, flush=True)
            last_time, last_tenth, printed = now, tenth, True
        yield item
    if printed:
        print(f"{label}: {n}/{n} done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
