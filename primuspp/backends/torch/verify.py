"""Compare a pipelined run with the one-process reference: max relative difference of losses and grads.

Relative difference of a tensor: max |a - b| / max |b| (a per-tensor scale: an element-wise ratio would
blow up on gradients that are nearly zero). Of a loss: |a - b| / |b|.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from primuspp.backends.torch.train import ReferenceStep, StepRecord


@dataclass(frozen=True)
class VerifyReport:
    steps: int
    tensors: int
    max_loss_rel: float
    max_grad_rel: float
    worst: str  # the tensor with the largest relative difference, "part P name (step S)"
    losses: tuple[float, ...]  # the pipelined step losses
    missing: tuple[str, ...] = ()  # reference gradients no rank reported

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "tensors": self.tensors,
            "max_rel_loss_diff": self.max_loss_rel,
            "max_rel_grad_diff": self.max_grad_rel,
            "worst_tensor": self.worst,
            "missing": list(self.missing),
        }


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(b.abs().max()) if b.numel() else 0.0
    diff = float((a.double() - b.double()).abs().max()) if b.numel() else 0.0
    return diff / scale if scale > 0 else diff


def step_losses(per_rank: Sequence[Sequence[StepRecord]]) -> list[float]:
    """The step loss (sum over microbatches of loss / m) from every rank's share."""
    steps = len(per_rank[0])
    return [sum(sum(records[i].losses.values()) for records in per_rank) for i in range(steps)]


def compare(per_rank: Sequence[Sequence[StepRecord]], reference: Sequence[ReferenceStep]) -> VerifyReport:
    """Every step's loss and every gradient the ranks reported, against the reference."""
    losses = step_losses(per_rank)
    max_loss = max(
        (abs(a - r.loss) / abs(r.loss) if r.loss else abs(a) for a, r in zip(losses, reference, strict=True)),
        default=0.0,
    )
    max_grad, worst, tensors, missing = 0.0, "", 0, []
    for i, ref in enumerate(reference):
        got: dict[tuple[int, str], torch.Tensor] = {}
        for records in per_rank:
            got.update(records[i].grads or {})
        for key, want in ref.grads.items():
            if key not in got:
                missing.append(f"part {key[0]} {key[1]} (step {i})")
                continue
            tensors += 1
            d = relative_difference(got[key], want)
            if d > max_grad or not worst:
                max_grad, worst = d, f"part {key[0]} {key[1]} (step {i})"
    return VerifyReport(len(reference), tensors, max_loss, max_grad, worst, tuple(losses), tuple(missing))
