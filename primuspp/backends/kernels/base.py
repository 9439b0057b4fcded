"""The kernel-provider interface (see the package docstring) and the torch reference implementation, which
the other providers fall back to for what their kernels do not cover (e.g. fp32, or CPU tensors)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


class Kernels:
    """GEMM and grouped-GEMM forward, dgrad and wgrad, in torch (`matmul`; one GEMM per expert)."""

    name = "torch"

    def gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x·Wᵀ: x [..., in], w [out, in]."""
        return torch.matmul(x, w.t())

    def gemm_dgrad(self, dy: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The input gradient dy·W: dy [..., out], w [out, in]."""
        return dy.matmul(w)

    def gemm_wgrad(self, dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The weight gradient dyᵀ·x: dy [tokens, out], x [tokens, in] -> [out, in]."""
        return dy.t().matmul(x)

    def grouped_gemm(
        self, x: torch.Tensor, ws: Sequence[torch.Tensor], splits: Sequence[int]
    ) -> torch.Tensor:
        """Per expert e: x_e·W_eᵀ, x [tokens, in] with expert e's `splits[e]` rows contiguous."""
        parts = torch.split(x, list(splits))
        return torch.cat([self.gemm(xe, w) for xe, w in zip(parts, ws, strict=True)])

    def grouped_dgrad(
        self, dy: torch.Tensor, ws: Sequence[torch.Tensor], splits: Sequence[int]
    ) -> torch.Tensor:
        """Per expert e: dy_e·W_e (all experts' input gradient, B)."""
        parts = torch.split(dy, list(splits))
        return torch.cat([self.gemm_dgrad(g, w) for g, w in zip(parts, ws, strict=True)])

    def grouped_wgrad(self, dy: torch.Tensor, x: torch.Tensor, splits: Sequence[int]) -> list[torch.Tensor]:
        """Per expert e: dy_eᵀ·x_e (the variable-K grouped GEMM of W; zeros for an expert without tokens)."""
        return [
            self.gemm_wgrad(g, xe)
            for g, xe in zip(torch.split(dy, list(splits)), torch.split(x, list(splits)), strict=True)
        ]
