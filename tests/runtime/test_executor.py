"""The plain-torch executor's direct engine call behaves as torch.autograd.backward."""

from __future__ import annotations

import pytest
import torch

from primuspp.backends.torch.executor import run_backward


def test_run_backward_equals_autograd_backward():
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 4)
    x = torch.randn(3, 6)
    g = torch.randn(3, 4)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.autograd.backward(lin(xa), g)
    ref = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad(set_to_none=True)
    run_backward(lin(xb), g)
    assert torch.equal(xa.grad, xb.grad)
    for a, p in zip(ref, lin.parameters(), strict=True):
        assert torch.equal(a, p.grad)


def test_run_backward_refuses_a_gradient_of_the_wrong_shape():
    y = torch.nn.Linear(6, 4)(torch.randn(3, 6))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        run_backward(y, torch.randn(2, 4))
