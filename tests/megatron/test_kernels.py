"""Kernel providers (primuspp.backends.kernels): every provider that runs here computes what the torch one
does; the others skip with a reason starting "hardware:". The grouped GEMM's B/W split: after B no expert
weight has a gradient, after W they equal an unsplit backward. `--kernels` resolution."""

from __future__ import annotations

import pytest
import torch

from primuspp.backends import kernels
from primuspp.backends.kernels.grouped import grouped_linear
from primuspp.errors import ConfigError
from primuspp.runtime.wgrad import WeightGradStore

SPLITS = [5, 0, 9, 2]  # an expert without tokens included


def _provider(name: str) -> kernels.base.Kernels:
    why = kernels.unavailable(name)
    if why is not None:
        assert why.startswith("hardware:"), why
        pytest.skip(why)
    return kernels.get(name)


def _case(name: str) -> tuple[torch.device, torch.dtype, float]:
    if name == "torch":
        return torch.device("cpu"), torch.float32, 1e-6
    return torch.device("cuda"), torch.bfloat16, 2e-2  # the GPU providers' kernels take 16-bit inputs


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    scale = float(b.float().abs().max()) or 1.0
    assert float((a.float() - b.float()).abs().max()) / scale <= tol


@pytest.mark.parametrize("name", kernels.NAMES)
def test_provider_matches_torch(name):
    k = _provider(name)
    ref = kernels.base.Kernels()
    device, dtype, tol = _case(name)
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device, dtype)

    x, w, dy = rand(16, 8), rand(12, 8), rand(16, 12)
    _close(k.gemm(x, w), ref.gemm(x.float(), w.float()), tol)
    _close(k.gemm_dgrad(dy, w), ref.gemm_dgrad(dy.float(), w.float()), tol)
    _close(k.gemm_wgrad(dy, x), ref.gemm_wgrad(dy.float(), x.float()), tol)
    ws = [rand(12, 8) for _ in SPLITS]
    f32 = [v.float() for v in ws]
    _close(k.grouped_gemm(x, ws, SPLITS), ref.grouped_gemm(x.float(), f32, SPLITS), tol)
    _close(k.grouped_dgrad(dy, ws, SPLITS), ref.grouped_dgrad(dy.float(), f32, SPLITS), tol)
    wants = ref.grouped_wgrad(dy.float(), x.float(), SPLITS)
    for got, want in zip(k.grouped_wgrad(dy, x, SPLITS), wants, strict=True):
        _close(got, want, tol)


@pytest.mark.parametrize("name", kernels.NAMES)
def test_grouped_split_defers_expert_weight_grads_to_w(name):
    k = _provider(name)
    device, dtype, tol = _case(name)
    torch.manual_seed(0)
    fc1 = [torch.randn(12, 8).to(device, dtype).requires_grad_() for _ in SPLITS]
    fc2 = [torch.randn(8, 12).to(device, dtype).requires_grad_() for _ in SPLITS]
    x = torch.randn(sum(SPLITS), 8).to(device, dtype)
    dy = torch.randn(sum(SPLITS), 8).to(device, dtype)

    xa = x.clone().requires_grad_()  # unsplit: per-expert matmuls, torch's own backward
    parts = torch.split(xa, SPLITS)
    h = [torch.nn.functional.gelu(p @ w.t()) for p, w in zip(parts, fc1, strict=True)]
    torch.cat([a @ w.t() for a, w in zip(h, fc2, strict=True)]).backward(dy)
    want = [w.grad.clone() for w in (*fc1, *fc2)]
    want_x = xa.grad.clone()
    for w in (*fc1, *fc2):
        w.grad = None

    store = WeightGradStore()
    xb = x.clone().requires_grad_()
    hidden = torch.nn.functional.gelu(grouped_linear(xb, fc1, SPLITS, store, kernels=k))
    out = grouped_linear(hidden, fc2, SPLITS, store, kernels=k)
    store.defer = True
    out.backward(dy)  # B
    assert all(w.grad is None for w in (*fc1, *fc2))
    assert len(store) == 2
    _close(xb.grad, want_x, tol)
    store.run()  # W
    for w, g in zip((*fc1, *fc2), want, strict=True):
        _close(w.grad, g, tol)


def test_grouped_linear_without_deferral_computes_weight_grads_at_once():
    ws = [torch.randn(3, 4, requires_grad=True) for _ in range(2)]
    x = torch.randn(5, 4, requires_grad=True)
    grouped_linear(x, ws, [2, 3], WeightGradStore()).sum().backward()  # a BW node: defer is False
    assert all(w.grad is not None for w in ws)
    with pytest.raises(ValueError, match="do not cover"):
        grouped_linear(x, ws, [2, 2])


def test_auto_picks_the_first_provider_that_runs():
    want = next(n for n in ("turbo", "te", "torch") if kernels.unavailable(n) is None)
    assert kernels.resolve("auto") == want
    assert kernels.resolve("torch") == "torch"


@pytest.mark.parametrize("name", ["turbo", "te"])
def test_a_provider_that_cannot_run_is_one_config_error(name):
    why = kernels.unavailable(name)
    if why is None:
        assert kernels.resolve(name) == name
        return
    with pytest.raises(ConfigError) as err:
        kernels.resolve(name)
    assert err.value.key == "kernels" and "\n" not in str(err.value)


def test_unknown_provider():
    with pytest.raises(ConfigError) as err:
        kernels.resolve("cutlass")
    assert err.value.key == "kernels"


def test_use_sets_the_active_provider():
    try:
        assert kernels.use("torch") is kernels.active()
        assert kernels.active().name == "torch"
    finally:
        kernels.use("torch")
