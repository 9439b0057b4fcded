"""The runner on one process: every node kind on random orders, activation accounting, OFFLOAD/RELOAD,
failures naming the node. (Across processes: test_distributed.py.)"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from primuspp.backends.torch.gpt import GPTConfig, gpt_loss, gpt_microbatches, gpt_parts
from primuspp.backends.torch.pipeline import TorchPipeline, reference_step
from primuspp.backends.torch.verify import relative_difference
from primuspp.runtime.runner import NodeFailure, ScheduleRunner
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import bidirectional, loop
from primuspp.schedule.table import ScheduleTable
from tests.schedule.random_orders import random_order

CFG = GPTConfig(vocab=32, seq_len=8, hidden=16, heads=2, layers=3)


def _random_table(seed: int, stages: int = 4, m: int = 5) -> ScheduleTable:
    pl = loop(1, stages)
    order = random_order(pl, m, random.Random(seed), split=0.5, fuse=0.3, offload=0.3)
    return ScheduleTable(pl, m, lower_comms(pl, m, order), f"random-{seed}")


@pytest.mark.parametrize("offload_mode", ["account", "copy"])
@pytest.mark.parametrize("seed", range(4))
def test_random_orders_match_reference(seed, offload_mode):
    table = _random_table(seed)
    kinds = {n.kind for n in table.ranks[0]}
    parts = gpt_parts(CFG, table.num_stages)
    ref = copy.deepcopy(parts)
    data = gpt_microbatches(CFG, 2, table.num_microbatches)
    pipe = TorchPipeline(
        table, 0, dict(enumerate(parts)), gpt_loss, CFG.boundary(2), offload_mode=offload_mode
    )
    host_seen = []
    pipe.runner.observer = lambda node: host_seen.append(pipe.runner.meter.host_current)
    result = pipe.step(data)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref_losses = reference_step(ref, data, gpt_loss)
    finally:
        torch.set_num_threads(threads)
    assert abs(result.loss - sum(ref_losses)) <= 1e-6 * abs(sum(ref_losses))
    for a, b in zip(parts, ref, strict=True):
        for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
            assert relative_difference(p.grad, q.grad) <= 1e-6, name
    meter = pipe.runner.meter
    assert meter.current == 0 and meter.host_current == 0  # everything freed at the end of the step
    assert result.measured.peak_bytes > 0
    if NodeKind.OFFLOAD in kinds:
        assert max(host_seen) > 0
    assert len(result.measured.intervals) == sum(1 for n in table.ranks[0] if n.kind.is_compute)


def test_offload_moves_bytes_to_host():
    F, BW, OFF, REL = NodeKind.F, NodeKind.BW, NodeKind.OFFLOAD, NodeKind.RELOAD
    order = [Node(F, 0, 0), Node(F, 0, 1), Node(OFF, 0, 0), Node(BW, 0, 1), Node(REL, 0, 0), Node(BW, 0, 0)]
    pl = loop(1, 2)
    table = ScheduleTable(pl, 1, lower_comms(pl, 1, [order]), "hand")
    pipe = TorchPipeline(table, 0, dict(enumerate(gpt_parts(CFG, 2))), gpt_loss, CFG.boundary(2))
    levels = {}
    meter = pipe.runner.meter

    def after(node):
        levels[str(node)] = (meter.current, meter.host_current)

    pipe.runner.observer = after
    pipe.step(gpt_microbatches(CFG, 2, 1))
    both = levels["F0.1"][0]
    after_offload = levels["OFFLOAD0.0"]
    # stage 0's saved tensors went to the host (its output, also saved by stage 1, stays on the device too)
    assert after_offload[1] > 0 and after_offload[0] < both <= after_offload[0] + after_offload[1]
    assert levels["RELOAD0.0"][1] == 0
    assert levels["BW0.0"] == (0, 0)


def test_failure_names_rank_and_node():
    table = _random_table(0)
    pipe = TorchPipeline(table, 0, dict(enumerate(gpt_parts(CFG, 4))), gpt_loss, CFG.boundary(2))
    pipe.executor.fault = ("F", 2, 1)
    with pytest.raises(NodeFailure, match=r"rank 0 failed at F2\.1: RuntimeError: injected fault"):
        pipe.step(gpt_microbatches(CFG, 2, table.num_microbatches))
    pipe.executor.fault = None
    with pytest.raises(
        RuntimeError, match=r"runner failed \(rank 0 failed at F2\.1.*cannot run another step"
    ):
        pipe.step(gpt_microbatches(CFG, 2, table.num_microbatches))


def test_recv_ahead_needs_a_transport_that_completes_ops_alone():
    table = _random_table(0)
    pipe = TorchPipeline(
        table, 0, dict(enumerate(gpt_parts(CFG, table.num_stages))), gpt_loss, CFG.boundary(2)
    )
    assert pipe.runner.recv_ahead == 0  # one rank: no P2P, every op at its table position
    with pytest.raises(ValueError, match="recv_ahead"):
        ScheduleRunner(table, 0, pipe.executor, recv_ahead=-1)


def test_replicated_parts_accumulate_over_steps_like_the_reference():
    """Bidirectional placement on one rank (both copies of the part here), three steps without zeroing the
    gradients: each step adds its share once, exactly as the one-process reference does."""
    pl = bidirectional(1)
    m = 4
    order = [Node(NodeKind.F, mb, mb % 2) for mb in range(m)]
    order += [Node(NodeKind.BW, mb, mb % 2) for mb in range(m)]
    table = ScheduleTable(pl, m, lower_comms(pl, m, [order]), "two copies")
    parts = gpt_parts(CFG, 1)
    ref = copy.deepcopy(parts)
    stages = {0: parts[0], 1: copy.deepcopy(parts[0])}
    data = gpt_microbatches(CFG, 2, m)
    pipe = TorchPipeline(table, 0, stages, gpt_loss, CFG.boundary(2))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(3):
            pipe.step(data)
            reference_step(ref, data, gpt_loss, replicas=2)
    finally:
        torch.set_num_threads(threads)
    for copy_ in stages.values():
        for (name, p), q in zip(copy_.named_parameters(), ref[0].parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), name
