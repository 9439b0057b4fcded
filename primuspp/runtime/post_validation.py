"""Optimizer post-validation: each pipeline rank steps as soon as its own backward work is done, and the
global conditions of the step (gradient clipping, inf/NaN) are checked afterwards.

A synchronous optimizer step (Megatron's) needs two global facts before any rank may update: the global
gradient norm (to clip) and whether any rank's gradients overflowed (to skip the step). Both are reductions
over every pipeline rank, so every rank waits for the slowest one's last W before it can step: the tail of
one iteration cannot overlap the head of the next. Post-validation (the zero-bubble papers' "bypassing
optimizer synchronizations") makes the update optimistic instead:

1. after its last W, each rank computes its *partials*: its share of the squared gradient norm and a
   non-finite flag (`local_partials`), posts their global sum asynchronously (`all_reduce(async_op=True)` on a
   gloo group of its own, so it never mixes with the pipeline's p2p messages), keeps a copy of what the
   update changes (parameters, optimizer state) and updates with the unclipped gradients;
2. the next step runs at once, on these optimistic weights (no barrier); after it — or, where the caller
   cannot run a step again, before it — the rank waits for the global sum (usually arrived by then) and
   decides exactly as the synchronous step would (`decide`): nothing to do (*validated*), or the global
   norm exceeds the clip threshold — restore the copy and redo the update with the clipped gradients
   (*rolled back*) — or some rank overflowed — restore the copy and drop the step (*skipped*, as
   Megatron's grad scaler does). After a rollback or a skip the step that ran on the optimistic weights is
   wrong: every rank (they all see the same sum) drops its gradients and runs it again.

Both modes compute the same partials and reduce them the same way, and the redo restores the very values
the optimistic update started from, so a post-validated run equals the synchronous one bit for bit. A rank
whose own partials are non-finite knows the step is skipped and does not update at all. The loss scaler
(below) is updated optimistically too (no overflow) and corrected by the check.

With a loss scaler (Megatron's `MegatronGradScaler` interface: `inv_scale`, `update(found_inf)`) the
gradients are unscaled before the norm is taken, as Megatron's `prepare_grads` does, and the scaler is
updated once per step with the global overflow flag.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

#: what happened to one step: post-validation's three outcomes, and the synchronous step's
VALIDATED, ROLLED_BACK, SKIPPED = "validated", "rolled_back", "skipped"
STEPPED, CLIPPED = "stepped", "clipped"
POST_OUTCOMES = (VALIDATED, ROLLED_BACK, SKIPPED)

#: Megatron's clip_grad_by_total_norm_fp32: coefficient = max_norm / (total_norm + eps)
CLIP_EPS = 1.0e-6


def post_validation_record(outcomes: Sequence[str | None] | None) -> dict[str, Any]:
    """A post-validated run's summary key: `{"post_validation": {outcome: steps}}` ({} without outcomes)."""
    if not outcomes:
        return {}
    return {"post_validation": {k: list(outcomes).count(k) for k in POST_OUTCOMES}}


def local_partials(
    grads: Sequence[torch.Tensor | None],
    inv_scale: float | None = None,
    also_check: Sequence[torch.Tensor | None] = (),
) -> torch.Tensor:
    """This rank's [sum of squared gradient entries, non-finite flag], float64 on the CPU.

    `inv_scale` multiplies the gradients first (a loss scaler's 1/scale); the flag is 1 when the sum is
    inf or NaN, which is the case exactly when some entry is, or when an entry of `also_check` is: the
    gradients that do not count in the norm (a tensor-parallel duplicate, a data-parallel replica) but
    whose overflow skips the step all the same, as Megatron's grad scaler checks every main gradient."""
    total: torch.Tensor | None = None
    for g in grads:  # summed where the gradients live: one transfer to the CPU at the end
        if g is None:
            continue
        norm = torch.linalg.vector_norm(g.detach(), 2, dtype=torch.float64)
        if inv_scale is not None:
            norm = norm * inv_scale
        square = norm * norm
        total = square if total is None else total + square.to(total.device)
    value = 0.0 if total is None else float(total)
    finite = math.isfinite(value) and all(g is None or bool(torch.isfinite(g).all()) for g in also_check)
    flag = 0.0 if finite else 1.0
    return torch.tensor([value, flag], dtype=torch.float64)


@dataclass(frozen=True)
class Decision:
    """What the global partials say: skip the step, or step with the gradients times `coeff` (1: as is)."""

    skip: bool
    coeff: float
    norm: float


def decide(reduced: torch.Tensor, clip_grad: float | None) -> Decision:
    """The synchronous step's rule on the global partials: skip on any overflow, else clip the gradients
    when the global norm exceeds `clip_grad` (Megatron's coefficient and epsilon)."""
    sumsq, flag = float(reduced[0]), float(reduced[1])
    if flag > 0 or not math.isfinite(sumsq):
        return Decision(True, 0.0, math.inf)
    norm = math.sqrt(sumsq)
    if clip_grad is not None and clip_grad > 0:
        coeff = clip_grad / (norm + CLIP_EPS)
        if coeff < 1.0:
            return Decision(False, coeff, norm)
    return Decision(False, 1.0, norm)


@dataclass
class _Pending:
    """A step updated optimistically (or not at all) whose global partials are still on their way."""

    work: Any
    reduced: torch.Tensor
    grads: list[torch.Tensor | None]
    inv_scale: float | None
    stepped: bool
    params: list[torch.Tensor] = field(default_factory=list)
    state: dict[int, dict[str, Any]] = field(default_factory=dict)
    scaler_state: dict[str, Any] | None = None


class StepValidator:
    """Runs the optimizer step of one pipeline rank, synchronously or post-validated.

    `params` are what the update changes (in the optimizer's order); `update()` applies the optimizer to
    their `.grad` (e.g. `optimizer.step`); `optimizer` (optional) is the one whose state a rollback restores.
    `counted[i]` says whether params[i]'s gradient counts in the norm (False for a copy another rank of
    `group` counts: a tensor-parallel duplicate, a data-parallel replica, a tied weight's second copy; an
    inf/NaN in it still skips the step). The norm is the square root of the counted squares summed over
    `group`, so `group` must cover every rank holding a counted gradient (with tensor and expert
    parallelism: TP x PP x EP, see backends/megatron/train.py's `norm_counted`). `clone_grads`: keep
    copies of the gradients for a redo, for callers that reuse their gradient buffers before `finish()`
    (Megatron-LM zeroes DDP's buffers before the next forward).
    Every rank of `group` (default: a new gloo group of the whole world, created here, collectively) must
    build its validator at the same point and call `step()` once per iteration.

    Per iteration: `step()` once the rank's gradients are final (each param's `.grad` set); then
    `finish()` (a no-op in synchronous mode, where `step()` already decided): after the next iteration's
    pipeline, which then must run again unless `finish()` returned "validated", or before it. `finish()`
    leaves the parameters' current `.grad` as they are. `outcomes` lists each step's outcome."""

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        update: Callable[[], Any],
        *,
        optimizer: torch.optim.Optimizer | None = None,
        clip_grad: float | None = None,
        post: bool = True,
        counted: Sequence[bool] | None = None,
        scaler: Any = None,
        group: Any = None,
        clone_grads: bool = False,
    ) -> None:
        self.params = list(params)
        self.update = update
        self.optimizer = optimizer
        self.clip_grad = clip_grad
        self.post = post
        self.counted = [True] * len(self.params) if counted is None else list(counted)
        if len(self.counted) != len(self.params):
            raise ValueError(f"counted has {len(self.counted)} entries for {len(self.params)} params")
        self.scaler = scaler
        self.clone_grads = clone_grads
        self.distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if group is None and self.distributed:
            group = dist.new_group(backend="gloo")
        self.group = group
        self.outcomes: list[str] = []
        self.norms: list[float] = []
        self._pending: _Pending | None = None

    def _inv_scale(self) -> float | None:
        if self.scaler is None:
            return None
        inv = self.scaler.inv_scale
        return float(inv) if not isinstance(inv, torch.Tensor) else float(inv.item())

    def step(self) -> None:
        """The rank's gradients are final: step (synchronous) or post the check and step optimistically."""
        if self._pending is not None:
            raise RuntimeError("step() again before finish(): the previous step is not validated yet")
        grads = [p.grad for p in self.params]
        inv_scale = self._inv_scale()
        counted = [g for g, c in zip(grads, self.counted, strict=True) if c]
        others = [g for g, c in zip(grads, self.counted, strict=True) if not c]
        partials = local_partials(counted, inv_scale, also_check=others)
        work = None
        if self.distributed:
            work = dist.all_reduce(partials, group=self.group, async_op=self.post)
        if not self.post:
            if work is not None:
                work.wait()
            self._apply(grads, inv_scale, decide(partials, self.clip_grad))
            return
        local_overflow = float(partials[1]) > 0
        pending = _Pending(work, partials, grads, inv_scale, stepped=not local_overflow)
        if pending.stepped:  # keep what the update changes, then update with the unclipped gradients
            pending.params = [p.detach().clone() for p in self.params]
            pending.state = self._save_state()
            self._unscale(grads, inv_scale)
            if self.clone_grads:  # the caller zeroes its gradient buffers before finish()
                pending.grads = [g.detach().clone() if g is not None else None for g in grads]
            self.update()
        self._clear_grads()
        if self.scaler is not None:  # optimistic too: the next step's loss scale is the no-overflow one
            pending.scaler_state = copy.deepcopy(self.scaler.__dict__)
            self.scaler.update(local_overflow)
        self._pending = pending

    @property
    def pending(self) -> bool:
        """A step was taken optimistically and its check is not finished."""
        return self._pending is not None

    def finish(self) -> str | None:
        """Wait for the pending step's global partials and correct the step if they say so; the outcome."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        if pending.work is not None:
            pending.work.wait()
        decision = decide(pending.reduced, self.clip_grad)
        self.norms.append(decision.norm)
        if decision.skip:
            if pending.stepped:
                self._restore(pending)
            outcome = SKIPPED
        elif decision.coeff < 1.0:
            self._restore(pending)
            current = [p.grad for p in self.params]  # the next step's, when it already ran: left alone
            for p, g in zip(self.params, pending.grads, strict=True):
                if g is not None:
                    g.mul_(decision.coeff)
                p.grad = g
            self.update()
            for p, g in zip(self.params, current, strict=True):
                p.grad = g
            outcome = ROLLED_BACK
        else:
            outcome = VALIDATED
        if self.scaler is not None and pending.scaler_state is not None:
            self.scaler.__dict__.update(pending.scaler_state)  # redo its update with the global flag
            self.scaler.update(decision.skip)
        self.outcomes.append(outcome)
        return outcome

    # -- synchronous step ---------------------------------------------------------------------------

    def _apply(self, grads: list[torch.Tensor | None], inv_scale: float | None, decision: Decision) -> None:
        self.norms.append(decision.norm)
        if decision.skip:
            outcome = SKIPPED
        else:
            self._unscale(grads, inv_scale)
            if decision.coeff < 1.0:
                for g in grads:
                    if g is not None:
                        g.mul_(decision.coeff)
            self.update()
            outcome = CLIPPED if decision.coeff < 1.0 else STEPPED
        self._clear_grads()
        self._update_scaler(decision.skip)
        self.outcomes.append(outcome)

    # -- helpers ------------------------------------------------------------------------------------

    @staticmethod
    def _unscale(grads: list[torch.Tensor | None], inv_scale: float | None) -> None:
        if inv_scale is not None and inv_scale != 1.0:
            for g in grads:
                if g is not None:
                    g.mul_(inv_scale)

    def _clear_grads(self) -> None:
        for p in self.params:
            p.grad = None

    def _update_scaler(self, found_inf: bool) -> None:
        if self.scaler is not None:
            self.scaler.update(found_inf)

    def _save_state(self) -> dict[int, dict[str, Any]]:
        """A copy of the optimizer's per-parameter state (tensors cloned); absent entries stay absent."""
        if self.optimizer is None:
            return {}
        saved = {}
        for i, p in enumerate(self.params):
            state = self.optimizer.state.get(p)
            if state is not None:
                saved[i] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
        return saved

    def _restore(self, pending: _Pending) -> None:
        """Parameters and optimizer state back to what the optimistic update started from, in place."""
        with torch.no_grad():
            for p, saved in zip(self.params, pending.params, strict=True):
                p.copy_(saved)
        if self.optimizer is None:
            return
        for i, p in enumerate(self.params):
            before = pending.state.get(i)
            if before is None:
                self.optimizer.state.pop(p, None)  # the optimistic update created it
                continue
            state = self.optimizer.state[p]
            for k, v in before.items():
                if isinstance(v, torch.Tensor) and isinstance(state.get(k), torch.Tensor):
                    state[k].copy_(v)
                else:
                    state[k] = v
            for k in [k for k in state if k not in before]:
                del state[k]
