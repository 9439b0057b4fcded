"""Provider `te`: for CUDA machines with Transformer Engine (`transformer_engine.pytorch` imports).

primuspp's own split layers (Megatron's local linears, split.py, and grouped experts) run their GEMMs with
torch's cuBLAS path here (what TE's own linear layers call for unquantised GEMMs); the provider exists so
`--kernels te` states and checks the TE stack. TE's own linear and grouped-linear modules, when built with
`delay_wgrad_compute`, keep their own GEMMs and weight-gradient deferral: primuspp's B nodes leave their
weight grads queued in TE and W nodes call their `backward_dw()` (primuspp.backends.megatron.te_wgrad)."""

from __future__ import annotations

import functools

import torch

from primuspp.backends.kernels.base import Kernels


@functools.cache
def _import() -> None:
    import transformer_engine.pytorch  # noqa: F401


def unavailable() -> str | None:
    try:
        _import()
    except Exception as err:
        return f"hardware: transformer_engine.pytorch does not import here ({type(err).__name__}: {err})"
    if not torch.cuda.is_available():
        return "hardware: Transformer Engine needs a CUDA GPU (torch.cuda.is_available() is False)"
    return None


class TEKernels(Kernels):
    name = "te"


def provider() -> Kernels:
    return TEKernels()
