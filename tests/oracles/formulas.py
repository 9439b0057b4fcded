"""Closed-form step times (no comm, uniform stages): a cross-check for the simulator, nothing more.

`forward`, `backward`, `wgrad` are one rank's share per microbatch, as in the cost model. Korthikanti et
al.'s per-layer activation formula, a cross-check for `models.memory.layer_memory`.
"""

from __future__ import annotations

from primuspp.models.parallel import Parallel
from primuspp.models.spec import ModelSpec


def step_time(
    algorithm: str, p: int, v: int, m: int, forward: float, backward: float, wgrad: float
) -> float | None:
    """Busy time of every rank (m microbatches through one rank's share) plus the idle time of the busiest
    rank, or None where no closed form is known."""
    full = forward + backward + wgrad
    if algorithm in ("1f1b", "gpipe"):
        bubble = (p - 1) * full
    elif algorithm == "1f1b-interleaved":
        bubble = (p - 1) * full / v
    elif algorithm == "zero-bubble" and wgrad <= forward + backward:
        bubble = (p - 1) * max(forward + backward - wgrad, 0.0)
    else:
        return None
    return m * full + bubble


def korthikanti_bytes(spec: ModelSpec, par: Parallel) -> float:
    """Korthikanti et al.'s per-layer formula for a GPT layer (their eq. 1-4): s·b·h·(34 + 5as/h), divided
    by t for the parts TP (+SP) splits; selective recompute drops the 5as/h term."""
    s, b, h, a, t = par.seq_len, par.micro_batch_size, spec.hidden, spec.heads, par.tp
    quadratic = 0.0 if par.recompute == "selective" else 5 * a * s / h
    if par.sp:
        return s * b * h * (34 + quadratic) / t
    return s * b * h * (10 + 24 / t + quadratic / t)
