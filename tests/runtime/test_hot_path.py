"""The runner's per-node details behave as the general paths would: a hook registered between steps runs,
the meter's record of saved tensors, the losses divided once per step, and gloo works kept alive a little
after their wait."""

from __future__ import annotations

import torch
from torch import nn

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.torch.executor import ModuleExecutor
from primuspp.backends.torch.pipeline import TorchPipeline
from primuspp.runtime.executor import TensorSpec
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.runtime.memory import ActivationMeter, SavedRecord
from primuspp.runtime.p2p import P2P, RETIRED, Message


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def test_a_hook_registered_between_steps_runs_in_the_next_step():
    table = build_schedule("1f1b", 1, 1, 3)
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    data = [(torch.randn(1, 4), torch.randn(1, 4)) for _ in range(3)]
    pipe = TorchPipeline(table, 0, {0: lin}, _loss, TensorSpec((1, 4)))
    pipe.step(data)
    calls = []
    lin.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    pipe.step(data)
    assert calls == [torch.Size([1, 4])] * 3


def test_losses_divided_once_equal_each_loss_divided():
    ex = ModuleExecutor({0: nn.Linear(2, 2)}, _loss, TensorSpec((1, 2)), torch.device("cpu"))
    ex.begin_step([None] * 7)  # type: ignore[list-item]
    torch.manual_seed(1)
    raw = {mb: torch.rand(()) * 1000 for mb in (0, 3, 5)}
    ex.losses = dict(raw)
    assert ex.scaled_losses() == {mb: float(loss / 7) for mb, loss in raw.items()}
    ex.losses = {2: raw[0]}
    assert ex.scaled_losses() == {2: float(raw[0] / 7)}


def _metered_pass(meter: ActivationMeter, record: SavedRecord) -> list[int]:
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    meter.set_exclude(lin.parameters())
    seen = []
    x = torch.randn(2, 8).requires_grad_()
    meter.begin_saving(record)
    try:
        y = _loss(torch.tanh(lin(x)), torch.zeros(2, 8))
    finally:
        meter.end_saving()
    seen += [meter.current, meter.peak]
    y.backward()
    seen += [meter.current, meter.peak]
    return seen


def test_meter_records_and_counts_the_saved_tensors():
    record = SavedRecord()
    seen = _metered_pass(ActivationMeter(), record)
    assert len(record.handles) == 3  # x, tanh's output, the difference squared; not the weight
    assert seen[0] > 0 and seen[2] == 0


def _retire_worker(ctx: WorkerContext, n: int) -> list[tuple[int, float]]:
    p2p = P2P()
    peer = 1 - ctx.rank
    if ctx.rank == 0:
        requests = p2p.post(
            [Message(True, peer, f"send {i}") for i in range(n)],
            [torch.full((3,), float(i)) for i in range(n)],
        )
        for request in requests:
            request.wait()
        return []
    requests = p2p.post(
        [Message(False, peer, f"recv {i}") for i in range(n)], [torch.empty(3) for _ in range(n)]
    )
    seen = []
    for request in requests:
        value = request.wait()
        seen.append((len(p2p.retired), float(value[0])))
    return seen


def test_waited_works_are_kept_alive_for_a_few_more_waits():
    n = RETIRED + 3
    seen = launch(_retire_worker, 2, n, backend="gloo")[1]
    assert seen == [(min(i + 1, RETIRED), float(i)) for i in range(n)]
