"""Provider `turbo`: AMD Primus-Turbo's GEMM and grouped-GEMM kernels (`primus_turbo.pytorch.ops.gemm`,
`grouped_gemm`) on ROCm GPUs; install Primus-Turbo on the machine (docs/megatron.md) and it imports.

Its kernels take 16-bit floating-point tensors on the GPU: anything else (fp32, CPU tensors) runs the torch
implementation. The variable-K grouped GEMM of W runs one Turbo GEMM per expert (`dy_eᵀ·x_e`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from primuspp.backends.kernels.base import Kernels

_HALF = (torch.bfloat16, torch.float16)


@functools.cache
def _ops() -> Any:
    import primus_turbo.pytorch as turbo

    return turbo.ops


def unavailable() -> str | None:
    try:
        _ops()
    except Exception as err:  # ImportError, or a build without this GPU's kernels
        return f"hardware: primus_turbo.pytorch does not import here ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        return "hardware: Primus-Turbo needs a ROCm GPU (torch.cuda.is_available() is False)"
    return None


def _fits(*tensors: torch.Tensor) -> bool:
    return all(t.is_cuda and t.dtype in _HALF for t in tensors)


class TurboKernels(Kernels):
    name = "turbo"

    def gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not _fits(x, w):
            return super().gemm(x, w)
        out = _ops().gemm(x.reshape(-1, x.shape[-1]), w, trans_a=False, trans_b=True, out_dtype=x.dtype)
        return out.view(*x.shape[:-1], w.shape[0])

    def gemm_dgrad(self, dy: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if not _fits(dy, w):
            return super().gemm_dgrad(dy, w)
        out = _ops().gemm(dy.reshape(-1, dy.shape[-1]), w, trans_a=False, trans_b=False, out_dtype=dy.dtype)
        return out.view(*dy.shape[:-1], w.shape[1])

    def gemm_wgrad(self, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not _fits(dy, x):
            return super().gemm_wgrad(dy, x)
        return _ops().gemm(dy, x, trans_a=True, trans_b=False, out_dtype=dy.dtype)

    def grouped_gemm(
        self, x: torch.Tensor, ws: Sequence[torch.Tensor], splits: Sequence[int]
    ) -> torch.Tensor:
        if not _fits(x, *ws):
            return super().grouped_gemm(x, ws, splits)
        lens = torch.tensor(list(splits), dtype=torch.long, device=x.device)
        return _ops().grouped_gemm(x, torch.stack(list(ws)), lens, trans_b=True)

    def grouped_dgrad(
        self, dy: torch.Tensor, ws: Sequence[torch.Tensor], splits: Sequence[int]
    ) -> torch.Tensor:
        if not _fits(dy, *ws):
            return super().grouped_dgrad(dy, ws, splits)
        lens = torch.tensor(list(splits), dtype=torch.long, device=dy.device)
        return _ops().grouped_gemm(dy, torch.stack(list(ws)), lens, trans_b=False)


def provider() -> Kernels:
    return TurboKernels()
