"""Gradients of replicated stages: in the bidirectional (DualPipe) placement stage p+j holds a copy of model
part j, on another rank than stage j (or the same one, for the middle rank when p is odd). After a step each
copy must hold the full gradient of its part: the sum of both copies' gradients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from primuspp.runtime.p2p import P2P, Message
from primuspp.schedule.placement import Placement


def replica_groups(placement: Placement) -> dict[int, list[int]]:
    """Model part -> the stages holding a copy of it, for parts held more than once."""
    groups: dict[int, list[int]] = {}
    for stage, part in enumerate(placement.model_part):
        groups.setdefault(part, []).append(stage)
    return {part: stages for part, stages in groups.items() if len(stages) > 1}


def _flat_grads(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])


def _assign(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    i = 0
    for p in params:
        n = p.numel()
        p.grad = flat[i : i + n].view_as(p).clone()
        i += n


def sum_replica_grads(
    placement: Placement, rank: int, params_of: Mapping[int, Sequence[torch.Tensor]], p2p: P2P | None
) -> None:
    """Give every copy of a replicated part the sum of all copies' gradients.

    `params_of[s]` lists stage s's parameters (same order for every copy of a part); this rank passes its
    own stages. Copies on two ranks exchange their flattened gradients in one batch, ordered by part, so
    both sides pair their messages identically; both compute the same sum (addition of two terms commutes
    exactly), so the copies stay bit-identical.
    """
    messages: list[Message] = []
    tensors: list[torch.Tensor] = []
    sums: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []
    for part, stages in sorted(replica_groups(placement).items()):
        mine = [s for s in stages if placement.stage_rank[s] == rank]
        if not mine:
            continue
        if len(stages) != 2:
            raise NotImplementedError(f"part {part} has {len(stages)} copies; only pairs are summed")
        a, b = stages
        if len(mine) == 2:  # both copies here
            total = _flat_grads(params_of[a]) + _flat_grads(params_of[b])
            _assign(params_of[a], total)
            _assign(params_of[b], total)
            continue
        (s,) = mine
        other = b if s == a else a
        local = _flat_grads(params_of[s])
        remote = torch.empty_like(local)
        peer = placement.stage_rank[other]
        messages += [
            Message(True, peer, f"grads of stage {s}"),
            Message(False, peer, f"grads of stage {other}"),
        ]
        tensors += [local, remote]
        sums.append(([s], local, remote) if s == a else ([s], remote, local))
    if messages:
        if p2p is None:
            raise ValueError("replicated stages on other ranks need a P2P to sum their gradients")
        for request in p2p.post(messages, tensors):
            request.wait()
    for (s,), first, second in sums:
        _assign(params_of[s], first + second)
