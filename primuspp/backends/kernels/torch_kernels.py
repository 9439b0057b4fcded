"""Provider `torch`: torch's own matmul (CPU and GPU). Always available."""

from __future__ import annotations

from primuspp.backends.kernels.base import Kernels


def unavailable() -> str | None:
    return None


def provider() -> Kernels:
    return Kernels()
