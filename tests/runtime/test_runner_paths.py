"""The runner's gloo shortcuts: sends posted straight to the process group (waited at the step end, the last
few kept alive), and receive specs asked once per runner when the executor says they never change. Both
give the gradients a one-process reference computes, step after step."""

from __future__ import annotations

import torch
from torch import nn

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.torch.executor import ModuleExecutor
from primuspp.backends.torch.pipeline import TorchPipeline, reference_step
from primuspp.runtime.executor import TensorSpec
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.runtime.p2p import P2P, RETIRED

HIDDEN, M = 4, 6


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, HIDDEN, generator=g), torch.randn(2, HIDDEN, generator=g)) for _ in range(M)]


def _parts(n: int) -> list[nn.Linear]:
    torch.manual_seed(0)
    return [nn.Linear(HIDDEN, HIDDEN) for _ in range(n)]


class _CountingExecutor(ModuleExecutor):
    """A `ModuleExecutor` that counts the runner's `boundary_spec` questions."""

    calls = 0

    def boundary_spec(self, microbatch: int, stage: int) -> TensorSpec:
        self.calls += 1
        return super().boundary_spec(microbatch, stage)


def _steps_worker(ctx: WorkerContext, static: bool) -> dict:
    table = build_schedule("1f1b", 2, 1, M)
    parts = _parts(2)
    mods = {ctx.rank: parts[ctx.rank]}
    spec = TensorSpec((2, HIDDEN))
    boundary = spec if static else (lambda mb, s: spec)
    pipe = TorchPipeline(table, ctx.rank, mods, _loss, boundary)
    pipe.executor = pipe.runner.executor = ex = _CountingExecutor(mods, _loss, boundary, pipe.device)
    data = _data()
    calls, grads = [], []
    for _ in range(3):
        before = ex.calls
        pipe.step(data)
        calls.append(ex.calls - before)
        grads.append([p.grad.clone() for p in mods[ctx.rank].parameters()])
    p2p = pipe.p2p
    assert isinstance(p2p, P2P)
    nodes = table.ranks[ctx.rank]
    return {
        "calls": calls,
        "sends": sum(1 for n in nodes if n.kind.is_send),
        "recvs": sum(1 for n in nodes if n.kind.is_comm and not n.kind.is_send),
        "direct": p2p.send_work is not None,
        "retired": len(p2p.retired or ()),
        "grads": grads,
        "static": ex.static_boundary,
    }


def _reference_grads() -> list[list[torch.Tensor]]:
    parts = _parts(2)
    grads = []
    for _ in range(3):
        reference_step(parts, _data(), _loss)
        grads.append([[p.grad.clone() for p in part.parameters()] for part in parts])
    return grads


def _check(results: list[dict], static: bool) -> None:
    reference = _reference_grads()
    for rank, res in enumerate(results):
        assert res["direct"] and res["static"] is static
        assert res["retired"] == min(RETIRED, res["sends"])
        for step, grads in enumerate(res["grads"]):
            for got, want in zip(grads, reference[step][rank], strict=True):
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        # every send's tensor is checked against its spec in every step; a receive's spec is asked in every
        # step unless the executor's specs are static (then in the first step only)
        first, *later = res["calls"]
        assert first == res["sends"] + res["recvs"]
        assert later == [res["sends"] + (0 if static else res["recvs"])] * 2


def test_direct_sends_and_static_receive_specs_give_the_reference_gradients():
    _check(launch(_steps_worker, 2, True, backend="gloo"), static=True)


def test_a_boundary_function_is_asked_for_every_receive_of_every_step():
    _check(launch(_steps_worker, 2, False, backend="gloo"), static=False)


def _send_work_worker(ctx: WorkerContext) -> tuple[bool, bool, bool]:
    return (
        P2P().send_work is not None,
        P2P(ranks=[0, 1]).send_work is not None,
        P2P(direct=False).send_work is not None,
    )


def test_sends_go_straight_to_the_group_only_on_the_direct_path():
    assert launch(_send_work_worker, 2, backend="gloo") == [(True, False, False)] * 2
