"""B/W split: split layers defer exactly their weight gradients, and B + W equals an unsplit backward."""

from __future__ import annotations

import copy

import torch

from primuspp.backends.torch.gpt import GPTConfig, gpt_loss, gpt_microbatches, gpt_parts
from primuspp.backends.torch.layers import SplitEmbedding, SplitLinear, split_parameters
from primuspp.backends.torch.pipeline import TorchPipeline
from primuspp.runtime.wgrad import WeightGradStore
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import loop
from primuspp.schedule.table import ScheduleTable

CFG = GPTConfig(vocab=32, seq_len=8, hidden=16, heads=2, layers=2)


def test_split_linear_matches_nn_linear():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 5)
    split = SplitLinear(8, 5)
    split.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 8)
    g = torch.randn(3, 4, 5)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref(xa).backward(g)
    split(xb).backward(g)  # no store: an ordinary, unsplit backward
    for a, b in ((xa.grad, xb.grad), (ref.weight.grad, split.weight.grad), (ref.bias.grad, split.bias.grad)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_deferred_work_runs_only_on_w():
    torch.manual_seed(0)
    lin, emb = SplitLinear(4, 3), SplitEmbedding(10, 4)
    store = WeightGradStore()
    ids = torch.tensor([[1, 2, 2, 7]])
    with store.recording():
        y = lin(emb(ids))
    store.defer = True
    y.sum().backward()
    assert len(store) == 2
    assert all(p.grad is None for p in (lin.weight, lin.bias, emb.weight))
    store.run()
    assert len(store) == 0
    assert all(p.grad is not None for p in (lin.weight, lin.bias, emb.weight))
    assert float(emb.weight.grad[2].abs().sum()) > 0 and float(emb.weight.grad[0].abs().sum()) == 0


def _one_rank_table(order: list[Node], stages: int, m: int) -> ScheduleTable:
    pl = loop(1, stages)
    return ScheduleTable(pl, m, lower_comms(pl, m, [order]), "hand")


def test_gpt_b_then_w_equals_unsplit_backward_exactly():
    """All B nodes first (no split weight has a gradient after them), then all W: bit-identical to BW."""
    stages, m = 4, 3
    F, B, W, BW = NodeKind.F, NodeKind.B, NodeKind.W, NodeKind.BW
    fwd = [Node(F, mb, s) for mb in range(m) for s in range(stages)]
    bwd = [(mb, s) for mb in range(m) for s in reversed(range(stages))]
    split_table = _one_rank_table(
        fwd + [Node(B, mb, s) for mb, s in bwd] + [Node(W, mb, s) for mb, s in bwd], stages, m
    )
    full_table = _one_rank_table(fwd + [Node(BW, mb, s) for mb, s in bwd], stages, m)
    parts = gpt_parts(CFG, stages)
    twins = copy.deepcopy(parts)
    data = gpt_microbatches(CFG, 2, m)
    split_params = [p for part in parts for p in split_parameters(part)]
    other_params = [p for part in parts for p in part.parameters() if all(p is not q for q in split_params)]
    assert split_params and other_params  # embeddings/linears split; layer norms not

    seen: list[str] = []

    def after(node: Node) -> None:
        if node.kind is B and node == Node(B, m - 1, 0):  # the last B
            seen.append("checked")
            assert all(p.grad is None for p in split_params), "a split weight got its gradient during B"
            assert all(p.grad is not None for p in other_params), "non-split parameters get grads in B"

    pipe = TorchPipeline(split_table, 0, dict(enumerate(parts)), gpt_loss, CFG.boundary(2))
    pipe.runner.observer = after
    res_split = pipe.step(data)
    assert seen == ["checked"]
    res_full = TorchPipeline(full_table, 0, dict(enumerate(twins)), gpt_loss, CFG.boundary(2)).step(data)
    assert res_split.losses == res_full.losses
    for a, b in zip(parts, twins, strict=True):
        for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), name
