"""Mixture-of-experts layers for the Megatron backend (docs/megatron.md, "MoE").

`settings(...)` gives the TransformerConfig fields of an MoE model (every layer: a top-k router with
Megatron's load-balancing aux loss, `experts` experts, an optional shared expert; no linear biases, the
all-to-all token dispatcher). The layers are megatron-core's own `MoELayer` from the local (CPU-capable)
spec; only the experts module is `GroupedExperts`, megatron-core's `SequentialMLP` (same parameters, same
state dict) whose forward, inside a primuspp runner, runs the experts as two grouped GEMMs with the B/W split
(`kernels.grouped`): B computes all experts' input gradient, W the per-expert weight gradients. Outside a
runner (the one-process reference, evaluation, Megatron's own schedules) it is `SequentialMLP` unchanged.

Tensor parallelism (EP 1, tp.py): megatron-core's expert tensor parallelism is TP, so each rank's experts
are its TP pieces (fc1 column-, fc2 row-parallel, without collectives of their own: the dispatcher gathers
the tokens over the TP group and reduce-scatters the output); the grouped GEMMs run on the pieces unchanged.

Expert parallelism: EP ranks hold `experts / ep` consecutive experts each (Megatron's rule); stage weights
are cut from the whole model (model.py), which is built with every expert on one process (`whole_groups`).
"""

from __future__ import annotations

import functools
from typing import Any

from primuspp.errors import ConfigError

#: the load-balancing aux-loss coefficient (Megatron's default is 0: no aux loss, nothing to check)
AUX_LOSS_COEFF = 1e-2
#: attribute set on a stage model: (first global expert index, local experts) of its MoE layers
EXPERTS_ATTR = "primuspp_experts"


def settings(
    experts: int, topk: int, ffn: int | None = None, shared_ffn: int | None = None
) -> tuple[tuple[str, Any], ...]:
    """TransformerConfig fields of the MoE model (see the module docstring)."""
    out: dict[str, Any] = {
        "num_moe_experts": experts,
        "moe_router_topk": topk,
        "moe_aux_loss_coeff": AUX_LOSS_COEFF,
        "moe_token_dispatcher_type": "alltoall",
        "add_bias_linear": False,
    }
    if ffn is not None:
        out["moe_ffn_hidden_size"] = ffn
    if shared_ffn is not None:
        out["moe_shared_expert_intermediate_size"] = shared_ffn
    return tuple(sorted(out.items()))


def check(
    experts: int | None, topk: int | None, ep: int, ffn: int | None = None, shared_ffn: int | None = None
) -> None:
    """One-line ConfigErrors for MoE flags that cannot build a model (before any rank starts)."""
    if experts is None:
        for flag, value in (("moe-topk", topk), ("moe-ffn", ffn), ("moe-shared-ffn", shared_ffn)):
            if value is not None:
                raise ConfigError(f"--{flag} needs --moe-experts N (an MoE model)", key=flag)
        if ep != 1:
            raise ConfigError(f"--ep {ep}: expert parallelism needs --moe-experts N (an MoE model)", key="ep")
        return
    if experts < 1:
        raise ConfigError(f"--moe-experts must be >= 1 (got {experts})", key="moe-experts")
    if topk is None:
        raise ConfigError("--moe-experts needs --moe-topk K (experts per token)", key="moe-topk")
    if not 1 <= topk <= experts:
        raise ConfigError(f"--moe-topk {topk}: must be between 1 and --moe-experts {experts}", key="moe-topk")
    if ep < 1 or experts % ep:
        raise ConfigError(
            f"--ep {ep}: must divide --moe-experts {experts} (each EP rank holds experts / ep experts)",
            key="ep",
        )
    for flag, value in (("moe-ffn", ffn), ("moe-shared-ffn", shared_ffn)):
        if value is not None and value < 1:
            raise ConfigError(f"--{flag} must be >= 1 (got {value})", key=flag)


def is_moe(settings_: Any) -> bool:
    return bool(dict(settings_).get("num_moe_experts"))


@functools.cache
def patch_megatron() -> None:
    """megatron-core 0.16.1 without Transformer Engine: the router's `router_gating_linear` reads the name
    `te_general_gemm`, which is only defined when TE imports (NameError): define it as None."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None  # type: ignore[attr-defined]


def layer_spec(num_experts: int) -> Any:
    """megatron-core's local GPT layer spec with `num_experts` experts; the experts module: GroupedExperts."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    patch_megatron()
    spec = get_gpt_layer_local_spec(num_experts=num_experts, moe_grouped_gemm=False)
    spec.submodules.mlp.submodules.experts.module = _grouped_experts_class()
    return spec


_TRACKED = ("load_balancing_loss", "seq_load_balancing_loss", "global_load_balancing_loss", "z_loss")


def number_layers(model: Any, layers: range, total: int) -> None:
    """Give a stage's MoE layers their whole-model layer numbers (Megatron numbers a stage's layers from 1:
    the cut is ours) and size the process-wide aux-loss logging tracker for `total` layers (Megatron sizes
    it by the first layer that logs, a stage's layer count, which later stages and the whole model
    overrun)."""
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    decoder = getattr(model, "decoder", None)
    for i, layer in enumerate(getattr(decoder, "layers", ())):
        mlp = getattr(layer, "mlp", None)
        if hasattr(mlp, "router"):
            mlp.set_layer_number(layers.start + i + 1)
    tracker = get_moe_layer_wise_logging_tracker()
    for name in _TRACKED:
        entry = tracker.setdefault(name, {})
        values = entry.get("values")
        if values is None or values.numel() < total:
            import torch

            grown = torch.zeros(total)
            if values is not None:
                grown[: values.numel()] = values.cpu()
            entry["values"] = grown


class _Solo:
    """A one-rank process group (size 1, rank 0): Megatron skips every collective over it."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def expert_parallel() -> tuple[int, int]:
    """(EP size, EP rank) of this process: (1, 0) when Megatron's parallel state is not initialised."""
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1, 0
    return (
        parallel_state.get_expert_model_parallel_world_size(),
        parallel_state.get_expert_model_parallel_rank(),
    )


def whole_groups() -> Any:
    """Process groups for the whole model on one process: Megatron's, with the expert-parallel ones
    replaced by one-rank groups (every expert local), or None (Megatron's own) when EP is 1."""
    if expert_parallel()[0] == 1:
        return None
    from megatron.core.process_groups_config import ProcessGroupCollection

    groups = ProcessGroupCollection.use_mpu_process_groups()
    for name in ("ep", "tp_ep", "expt_dp"):
        setattr(groups, name, _Solo())
    return groups


def local_experts(settings_: Any) -> tuple[int, int]:
    """(first global expert, count) this EP rank holds; (0, 0) = all (no MoE, or EP 1)."""
    n = dict(settings_).get("num_moe_experts")
    size, rank = expert_parallel()
    if not n or size == 1:
        return 0, 0
    return rank * (n // size), n // size


@functools.cache
def _grouped_experts_class() -> type:
    import torch
    from megatron.core.transformer.moe.experts import SequentialMLP

    from primuspp.backends.kernels.grouped import grouped_linear
    from primuspp.backends.megatron.split import deposit
    from primuspp.runtime.wgrad import recording_store

    class GroupedExperts(SequentialMLP):
        """megatron-core's SequentialMLP whose experts run as grouped GEMMs with the B/W split inside a
        primuspp runner (module docstring of primuspp.backends.megatron.moe)."""

        def _unsplit(self, x: torch.Tensor) -> bool:
            c = self.config
            return (
                not x.requires_grad
                or c.moe_apply_probs_on_input
                or bool(c.fp8 or c.fp4)
                or c.add_bias_linear
                or c.bias_activation_fusion
                or c.use_te_activation_func
                or not all(p.requires_grad for p in self.parameters())
            )

        def _activation(self, h: torch.Tensor) -> torch.Tensor:
            c = self.config
            if not c.gated_linear_unit:
                return c.activation_func(h)
            h_glu, h_linear = torch.chunk(h, 2, dim=-1)
            if (val := c.activation_func_clamp_value) is not None:
                h_glu = h_glu.clamp(min=None, max=val)
                h_linear = h_linear.clamp(min=-val, max=val)
            return c.activation_func(h_glu) * (h_linear + c.glu_linear_offset)

        def forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):  # type: ignore[override]
            x = permuted_local_hidden_states
            store = recording_store()
            if store is None or self._unsplit(x):
                return super().forward(x, tokens_per_expert, permuted_probs)
            splits = [int(n) for n in tokens_per_expert.tolist()]
            fc1 = [e.linear_fc1.weight for e in self.local_experts]
            fc2 = [e.linear_fc2.weight for e in self.local_experts]
            h = grouped_linear(x, fc1, splits, store, deposit)
            h = self._activation(h)
            h = (h * permuted_probs.unsqueeze(-1)).to(x.dtype)
            return grouped_linear(h, fc2, splits, store, deposit), None

    return GroupedExperts
