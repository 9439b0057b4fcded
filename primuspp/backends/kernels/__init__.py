"""Kernel providers for the B/W split: who computes the GEMMs of a split linear layer and of the grouped GEMM
of MoE experts (docs/megatron.md, "Kernel providers").

A provider (`base.Kernels`) has six operations on 2-D tensors, `W` stored `[out, in]` as torch's Linear:

- `gemm(x, w)` = x·Wᵀ, `gemm_dgrad(dy, w)` = dy·W (B), `gemm_wgrad(dy, x)` = dyᵀ·x (W);
- `grouped_gemm(x, ws, splits)`, `grouped_dgrad(dy, ws, splits)`, `grouped_wgrad(dy, x, splits)`: the same
  per expert e on the rows `splits[e]` of x / dy (rows of an expert are contiguous), the wgrad one being the
  variable-K grouped GEMM (one `dy_eᵀ·x_e` per expert, K = that expert's token count).

Providers: `torch` (default; any device), `turbo` (AMD Primus-Turbo's `primus_turbo.pytorch` GEMM and
grouped-GEMM kernels; ROCm), `te` (Transformer Engine on CUDA). `resolve("auto")` picks the first of turbo,
te, torch that can run here. The split layers call `active()`, which the training worker sets with `use()`.
Importing this package imports neither torch nor any provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from primuspp.errors import ConfigError

if TYPE_CHECKING:
    from primuspp.backends.kernels.base import Kernels

NAMES = ("torch", "turbo", "te")
CHOICES = ("auto", *NAMES)
_MODULES = {"torch": "torch_kernels", "turbo": "turbo", "te": "te"}
_ACTIVE: list[Kernels] = []


def _module(name: str) -> Any:
    return importlib.import_module(f"primuspp.backends.kernels.{_MODULES[name]}")


def unavailable(name: str) -> str | None:
    """Why provider `name` cannot run on this machine (a reason starting "hardware:"), or None."""
    return _module(name).unavailable()


def resolve(choice: str) -> str:
    """The provider for `--kernels CHOICE`: auto picks turbo, then te, then torch (what runs here); a named
    provider that cannot run here is a ConfigError naming why."""
    if choice not in CHOICES:
        raise ConfigError(f"--kernels {choice}: expected one of {', '.join(CHOICES)}", key="kernels")
    if choice == "auto":
        return next(n for n in ("turbo", "te", "torch") if unavailable(n) is None)
    why = unavailable(choice)
    if why is not None:
        raise ConfigError(f"--kernels {choice}: {why.removeprefix('hardware: ')}", key="kernels")
    return choice


def get(name: str) -> Kernels:
    """The provider `name` (raises ConfigError when it cannot run here)."""
    if name not in NAMES:
        raise ConfigError(f"kernels {name!r}: expected one of {', '.join(NAMES)}", key="kernels")
    why = unavailable(name)
    if why is not None:
        raise ConfigError(f"--kernels {name}: {why}", key="kernels")
    return _module(name).provider()


def use(name: str) -> Kernels:
    """Make provider `name` the one split layers use in this process; returns it."""
    kernels = get(name)
    _ACTIVE[:] = [kernels]
    return kernels


def active() -> Kernels:
    """The provider split layers use now (torch unless `use()` chose another)."""
    if not _ACTIVE:
        _ACTIVE.append(_module("torch").provider())
    return _ACTIVE[0]


__all__ = ["CHOICES", "NAMES", "active", "get", "resolve", "unavailable", "use"]
