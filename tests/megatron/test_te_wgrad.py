"""Transformer Engine's weight-gradient deferral driven by primuspp's B/W nodes (te_wgrad.py).

The dispatch layer is tested on `DelayedLinear`, a real linear layer of ours that implements TE's protocol
(a FIFO `wgrad_store` filled by its backward, emptied by `backward_dw()`), checked against autograd on a plain
`torch.nn.Linear`. The same tests on TE's own `Linear` and `GroupedLinear` run where Transformer Engine
imports and a CUDA device exists, and skip elsewhere with a reason starting `hardware:`."""

from __future__ import annotations

import collections
import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from primuspp.backends.megatron import te_wgrad
from primuspp.backends.megatron.schedule import conflicts
from primuspp.errors import ConfigError
from primuspp.runtime.wgrad import WeightGradStore, accumulate


class FifoWgradStore:
    """TE's `wgrad_store` protocol: `delay_wgrad_compute()`, `put(tensors, func)`, `pop()` (oldest first)."""

    def __init__(self, delay: bool) -> None:
        self.delay = delay
        self.queue: collections.deque[tuple[tuple[torch.Tensor, ...], Any]] = collections.deque()

    def delay_wgrad_compute(self) -> bool:
        return self.delay

    def put(self, tensors: tuple[torch.Tensor, ...], func: Any) -> None:
        self.queue.append((tensors, func))

    def pop(self) -> Any:
        tensors, func = self.queue.popleft()
        return func(*tensors)


def _wgrad(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x2, g2 = x.reshape(-1, x.shape[-1]), g.reshape(-1, g.shape[-1])
    return g2.t() @ x2, g2.sum(dim=0)


class _DelayedLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.store = store
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        gx = g @ weight
        if ctx.store.delay_wgrad_compute():
            ctx.store.put((x, g), _wgrad)
            return gx, None, None, None
        gw, gb = _wgrad(x, g)
        return gx, gw, gb, None


class DelayedLinear(torch.nn.Linear):
    """A linear layer whose backward, with `delay_wgrad_compute`, queues its weight-gradient GEMM and
    leaves it to `backward_dw()` (TE's protocol); `calls` logs the order of `backward_dw()` calls."""

    def __init__(self, n_in: int, n_out: int, calls: list[str], name: str, delay: bool = True) -> None:
        super().__init__(n_in, n_out)
        self.wgrad_store = FifoWgradStore(delay)
        self.calls = calls
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return _DelayedLinearFn.apply(x, self.weight, self.bias, self.wgrad_store)

    def backward_dw(self) -> None:
        if not self.wgrad_store.delay_wgrad_compute():
            return
        gw, gb = self.wgrad_store.pop()
        accumulate(self.weight, gw)
        accumulate(self.bias, gb)
        self.calls.append(self.name)


def _models(calls: list[str]) -> tuple[torch.nn.Sequential, torch.nn.Sequential]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        DelayedLinear(4, 8, calls, "first"), torch.nn.Tanh(), DelayedLinear(8, 3, calls, "second")
    )
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference.load_state_dict(model.state_dict())
    return model, reference


def _forward(model: torch.nn.Module, store: WeightGradStore | None, x: torch.Tensor) -> torch.Tensor:
    if store is None:
        return model(x)
    with store.recording():
        return model(x)


def _backward(y: torch.Tensor, store: WeightGradStore, defer: bool) -> None:
    store.defer = defer
    try:
        y.square().sum().backward()
    finally:
        store.defer = False


def _assert_grads_equal(model: torch.nn.Module, reference: torch.nn.Module) -> None:
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-6, msg=name)


def test_delayed_linear_is_a_linear_layer() -> None:
    """The test layer itself: B plus backward_dw gives autograd's gradients."""
    calls: list[str] = []
    model, reference = _models(calls)
    x = torch.randn(5, 4)
    model(x).square().sum().backward()
    assert all(p.grad is None for n, p in model.named_parameters())
    for module in (model[2], model[0]):
        module.backward_dw()
    reference(x).square().sum().backward()
    _assert_grads_equal(model, reference)


def test_b_queues_backward_dw_in_backward_order_and_w_runs_it() -> None:
    calls: list[str] = []
    model, reference = _models(calls)
    assert te_wgrad.attach([model]) == 2
    x = torch.randn(5, 4, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    store = WeightGradStore()
    _backward(_forward(model, store, x), store, defer=True)
    assert all(p.grad is None for p in model.parameters())  # B: input gradient only
    assert len(store) == 2 and calls == []
    reference(x_ref).square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    store.run()  # W
    assert calls == ["second", "first"]  # the order backward reached the modules
    assert len(store) == 0 and not model[0].wgrad_store.queue and not model[2].wgrad_store.queue
    _assert_grads_equal(model, reference)


def test_bw_node_completes_weight_grads_when_its_backward_ends() -> None:
    calls: list[str] = []
    model, reference = _models(calls)
    te_wgrad.attach([model])
    x = torch.randn(5, 4)
    store = WeightGradStore()
    _backward(_forward(model, store, x), store, defer=False)
    assert len(store) == 0 and calls == ["second", "first"]
    reference(x).square().sum().backward()
    _assert_grads_equal(model, reference)


def test_two_microbatches_b_b_then_w_w_sum_like_autograd() -> None:
    calls: list[str] = []
    model, reference = _models(calls)
    te_wgrad.attach([model])
    xs = [torch.randn(5, 4), torch.randn(3, 4)]
    stores = [WeightGradStore(), WeightGradStore()]
    ys = [_forward(model, s, x) for s, x in zip(stores, xs, strict=True)]
    for y, s in zip(ys, stores, strict=True):
        _backward(y, s, defer=True)
    assert all(p.grad is None for p in model.parameters())
    for s in reversed(stores):  # W in another order than B: TE's FIFO pops the oldest entry
        s.run()
    for x in xs:
        reference(x).square().sum().backward()
    _assert_grads_equal(model, reference)


def test_outside_a_runner_the_module_keeps_its_own_queue() -> None:
    calls: list[str] = []
    model, _ = _models(calls)
    te_wgrad.attach([model])
    model(torch.randn(2, 4)).sum().backward()
    assert calls == [] and len(model[0].wgrad_store.queue) == 1  # left to whoever calls backward_dw


def test_attach_finds_deferring_modules_once() -> None:
    calls: list[str] = []
    model = torch.nn.Sequential(
        DelayedLinear(4, 4, calls, "on"),
        DelayedLinear(4, 4, calls, "off", delay=False),
        torch.nn.Linear(4, 4),
    )
    assert [te_wgrad.defers(m) for m in model] == [True, False, False]
    assert te_wgrad.attach([model]) == 1
    assert te_wgrad.attach([copy.copy(model)]) == 1
    assert len(model[0]._forward_hooks) == 1


def test_a_ddp_chunk_without_delay_wgrad_compute_is_refused() -> None:
    from megatron.core.distributed import DistributedDataParallelConfig

    calls: list[str] = []
    model, _ = _models(calls)
    model.ddp_config = DistributedDataParallelConfig(delay_wgrad_compute=False)
    with pytest.raises(ConfigError, match="DistributedDataParallelConfig has delay_wgrad_compute=False"):
        te_wgrad.attach([model])
    assert not model[0]._forward_hooks
    model.ddp_config = DistributedDataParallelConfig(delay_wgrad_compute=True)
    assert te_wgrad.attach([model]) == 2
    plain = torch.nn.Linear(2, 2)
    plain.ddp_config = DistributedDataParallelConfig()  # nothing defers: nothing to say
    assert te_wgrad.attach([plain]) == 0


def test_release_parsing() -> None:
    assert te_wgrad._release("2.10.0+cu12") == (2, 10, 0)
    assert te_wgrad._release("2.3.0.dev0") == (2, 3, 0)
    assert te_wgrad._release("1.13") < te_wgrad.MIN_TE <= te_wgrad._release("2.3")


def test_delay_wgrad_compute_refused_with_the_reason_where_te_cannot_drive_it() -> None:
    found = conflicts({"delay_wgrad_compute": True}, placement="v")
    why = te_wgrad.unsupported()
    if why is None:
        assert found == []
    else:
        assert found == [
            "delay_wgrad_compute=True (primuspp drives Transformer Engine's delayed weight grads from its "
            f"W nodes only where TE >= 2.3 imports: {why})"
        ]
    assert conflicts({"delay_wgrad_compute": False}, placement="v") == []


def test_recomputing_te_linears_with_delayed_wgrad_is_refused() -> None:
    why = "a recomputed TE linear's delayed weight grad would never reach primuspp's W node"
    full = {"delay_wgrad_compute": True, "recompute_granularity": "full"}
    assert f"recompute_granularity=full with delay_wgrad_compute=True ({why})" in conflicts(
        full, placement="linear"
    )
    mlp = {**full, "recompute_granularity": "selective", "recompute_modules": ["core_attn", "mlp"]}
    assert f"recompute_modules=['core_attn', 'mlp'] with delay_wgrad_compute=True ({why})" in conflicts(
        mlp, placement="linear"
    )
    attn = {**mlp, "recompute_modules": ["core_attn", "moe_act"]}
    assert not any("recompute" in f for f in conflicts(attn, placement="linear"))
    assert te_wgrad.recompute_conflicts("full", None) and not te_wgrad.recompute_conflicts(None, ["mlp"])


# -- on Transformer Engine itself (CUDA) -------------------------------------------------------------------


def _te_hardware() -> str | None:
    why = te_wgrad.unsupported()
    if why is not None:
        return f"hardware: {why}"
    if not torch.cuda.is_available():
        return "hardware: Transformer Engine needs a CUDA GPU (torch.cuda.is_available() is False)"
    return None


needs_te = pytest.mark.skipif(_te_hardware() is not None, reason=str(_te_hardware()))


def _te_pair(kind: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    import transformer_engine.pytorch as te

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"params_dtype": torch.float32, "device": "cuda"}
    if kind == "linear":
        make = lambda delay: te.Linear(16, 32, delay_wgrad_compute=delay, **kwargs)  # noqa: E731
    else:
        make = lambda delay: te.GroupedLinear(2, 16, 32, delay_wgrad_compute=delay, **kwargs)  # noqa: E731
    delayed, reference = make(True), make(False)
    reference.load_state_dict(delayed.state_dict())
    return delayed, reference


def _te_call(module: torch.nn.Module, kind: str, x: torch.Tensor) -> torch.Tensor:
    return module(x) if kind == "linear" else module(x, [5, 3])


@needs_te
@pytest.mark.parametrize("kind", ["linear", "grouped"])
@pytest.mark.parametrize("defer", [True, False], ids=["B-then-W", "BW"])
def test_te_module_driven_by_the_store(kind: str, defer: bool) -> None:
    delayed, reference = _te_pair(kind)
    assert te_wgrad.defers(delayed) and not te_wgrad.defers(reference)
    assert te_wgrad.attach([delayed]) == 1
    x = torch.randn(8, 16, device="cuda")
    store = WeightGradStore()
    y = _te_call_recorded(delayed, kind, x, store)
    _backward(y, store, defer=defer)
    if defer:
        assert len(store) == 1
        assert all(p.grad is None for p in delayed.parameters() if p.dim() > 1)
        store.run()
    assert len(store) == 0
    _te_call(reference, kind, x).square().sum().backward()
    for (name, p), q in zip(delayed.named_parameters(), reference.parameters(), strict=True):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)


def _te_call_recorded(module: torch.nn.Module, kind: str, x: torch.Tensor, store: WeightGradStore) -> Any:
    with store.recording():
        return _te_call(module, kind, x)


def test_gpu_check_kernels_te_refused_in_one_line_where_te_cannot_run() -> None:
    """bench/gpu_check.py --kernels te --cpu: TE's check runs on CUDA only; one line, exit 2, nothing run."""
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, str(root / "bench" / "gpu_check.py"), "--cpu", "--kernels", "te"]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    why = te_wgrad.unsupported() or "it runs on CUDA only (drop --cpu)"
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: --kernels te: {why}\n"
