"""Closed-form step times (no comm, uniform stages): a cross-check for the simulator, nothing more.

`forward`, `backward`, `wgrad` are one rank's share per microbatch, as in the cost model.
"""

from __future__ import annotations


def ideal_time(m: int, forward: float, backward: float, wgrad: float) -> float:
    """Busy time of every rank: m microbatches through one rank's share."""
    return m * (forward + backward + wgrad)


def bubble_time(
    algorithm: str, p: int, v: int, forward: float, backward: float, wgrad: float
) -> float | None:
    """Idle time of the busiest rank (the step-time bubble), or None where no closed form is known."""
    full = forward + backward + wgrad
    if algorithm in ("1f1b", "gpipe"):
        return (p - 1) * full
    if algorithm == "1f1b-interleaved":
        return (p - 1) * full / v
    if algorithm == "zero-bubble" and wgrad <= forward + backward:
        return (p - 1) * max(forward + backward - wgrad, 0.0)
    return None


def step_time(
    algorithm: str, p: int, v: int, m: int, forward: float, backward: float, wgrad: float
) -> float | None:
    bubble = bubble_time(algorithm, p, v, forward, backward, wgrad)
    return None if bubble is None else ideal_time(m, forward, backward, wgrad) + bubble


def bubble_rate(
    algorithm: str, p: int, v: int, m: int, forward: float, backward: float, wgrad: float
) -> float | None:
    total = step_time(algorithm, p, v, m, forward, backward, wgrad)
    return None if total is None else 1.0 - ideal_time(m, forward, backward, wgrad) / total
