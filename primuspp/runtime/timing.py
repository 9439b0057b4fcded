"""Per-node clocks: `perf_counter_ns` on CPU, CUDA events on GPU, read out in ms from the step start.

`mark()` is cheap and never synchronises; `ms(mark)` (or `ms_all(marks)`: a whole step's in one call)
converts after `finish()` (which, on CUDA, waits for the recorded events), so timing does not serialise the
device.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class CpuClock:
    """Wall clock of this process."""

    def __init__(self) -> None:
        self._t0 = 0

    def start(self) -> None:
        self._t0 = time.perf_counter_ns()

    #: the builtin itself (no Python frame: the runner calls it twice per node)
    mark = staticmethod(time.perf_counter_ns)

    def finish(self) -> None:
        pass

    def ms(self, mark: Any) -> float:
        return (mark - self._t0) / 1e6

    def ms_all(self, marks: list[Any]) -> list[float]:
        t0 = self._t0
        return [(m - t0) / 1e6 for m in marks]

    @property
    def origin_ns(self) -> int | None:
        """The step start on this host's monotonic clock (the same clock in every process of one host)."""
        return self._t0


class CudaClock:
    """CUDA events on the current stream: times are when the device reached the mark."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._t0: torch.cuda.Event | None = None

    def start(self) -> None:
        self._t0 = self.mark()

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self._device))
        return event

    def finish(self) -> None:
        torch.cuda.synchronize(self._device)

    def ms(self, mark: Any) -> float:
        assert self._t0 is not None
        return float(self._t0.elapsed_time(mark))

    def ms_all(self, marks: list[Any]) -> list[float]:
        return [self.ms(m) for m in marks]

    @property
    def origin_ns(self) -> int | None:
        return None  # device time: no common origin across processes


def clock_for(device: torch.device) -> CpuClock | CudaClock:
    return CudaClock(device) if device.type == "cuda" else CpuClock()
