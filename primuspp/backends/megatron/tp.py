"""Tensor parallelism for the Megatron backend: one whole model, sharded over the TP ranks.

Every placement and the one-process reference start from one whole model's weights (model.py). With
TP > 1 each rank builds its stage with Megatron's TP-sized layers and takes its slice of the whole model:
a parameter Megatron marks `tensor_model_parallel` is cut along its `partition_dim` (column-parallel
weights and biases, the vocab-parallel embedding and output layer: dim 0; row-parallel weights: dim 1)
into TP equal, contiguous pieces; every other parameter (norms, row-parallel biases, position
embeddings) is copied whole. Megatron's fused QKV weight is laid out per query group, so contiguous pieces
are exactly its per-rank layout when TP divides the key/value heads; a gated MLP's fc1 (`[gate; up]`) is
cut half by half.

MoE layers (EP 1): megatron-core's expert tensor parallelism defaults to TP, so each expert's fc1 / fc2 is
column- / row-parallel like a dense MLP and is cut the same way; the token dispatcher gathers the tokens
over the TP group and reduce-scatters the experts' output. megatron-core needs sequence parallelism then.

`solo()` makes Megatron's parallel state look like TP = 1 for a while (a one-rank TP and expert-TP group of
this process): the whole model, and the one-process reference of the tests, are built and run inside it.
`gather()` is `shard()`'s inverse for gradients and weights (tests, bench/gpu_check.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from primuspp.errors import ConfigError

#: this process's one-rank group (every rank's, created together by `make_solo_groups`)
_SOLO: list[Any] = []

# parallel_state globals that name the TP group (and, for MoE experts, the expert-TP groups: with EP 1 the
# same ranks), swapped by `solo()`
_GROUPS = (
    "_TENSOR_MODEL_PARALLEL_GROUP",
    "_TENSOR_AND_CONTEXT_PARALLEL_GROUP",
    "_EXPERT_TENSOR_PARALLEL_GROUP",
    "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
)


def check(tp: int, heads: int, kv_heads: int | None, sequence_parallel: bool) -> None:
    """The TP settings a run can use (one-line ConfigErrors, before any rank starts)."""
    if tp < 1:
        raise ConfigError(f"--tp {tp}: must be >= 1", key="tp")
    if heads % tp:
        raise ConfigError(f"--tp {tp}: does not divide the model's {heads} attention heads", key="tp")
    if kv_heads is not None and kv_heads % tp:
        raise ConfigError(
            f"--tp {tp}: does not divide the model's {kv_heads} key/value heads (num_query_groups)", key="tp"
        )
    if sequence_parallel and tp <= 1:
        raise ConfigError(
            "--sequence-parallel needs --tp > 1 (it splits the sequence over the tensor-parallel ranks)",
            key="sequence-parallel",
        )


def check_moe(tp: int, ep: int, sequence_parallel: bool, experts: int | None) -> None:
    """The TP settings an MoE model can use: its experts are TP-sharded like a dense MLP (megatron-core's
    expert tensor parallelism = TP) with EP 1, and megatron-core trains MoE layers under TP only with
    sequence parallelism (its MoELayer raises otherwise)."""
    if tp <= 1 or not experts:
        return
    if ep > 1:
        raise ConfigError(
            f"--ep {ep} with --tp {tp}: MoE layers under tensor parallelism run with --ep 1 for now "
            "(the experts are sharded over the tensor-parallel ranks)",
            key="ep",
        )
    if not sequence_parallel:
        raise ConfigError(
            f"--tp {tp} with MoE layers needs --sequence-parallel (megatron-core trains MoE layers under "
            "tensor parallelism only with sequence parallelism)",
            key="sequence-parallel",
        )


def make_solo_groups() -> None:
    """Create every rank's one-rank group (a collective: every rank calls it at the same point);
    idempotent."""
    if not _SOLO and dist.is_initialized():
        group, _ = dist.new_subgroups(group_size=1)
        _SOLO.append(group)


def tp_size() -> int:
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1
    return parallel_state.get_tensor_model_parallel_world_size()


def tp_rank() -> int:
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 0
    return parallel_state.get_tensor_model_parallel_rank()


@contextlib.contextmanager
def solo() -> Iterator[None]:
    """Megatron's parallel state with TP = 1 (this process alone) inside the block; unchanged at TP 1."""
    from megatron.core import parallel_state as ps

    if tp_size() <= 1:
        yield
        return
    if not _SOLO:
        raise RuntimeError("tp.make_solo_groups() was not called after initialize_model_parallel")
    names = (*_GROUPS, "_MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE", "_MPU_TENSOR_MODEL_PARALLEL_RANK")
    names += ("_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS",)
    names += ("_MPU_EXPERT_TENSOR_PARALLEL_WORLD_SIZE", "_MPU_EXPERT_TENSOR_PARALLEL_RANK")
    saved = {n: getattr(ps, n) for n in names}
    try:
        for n in _GROUPS:
            setattr(ps, n, _SOLO[0])
        ps._MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE = 1
        ps._MPU_TENSOR_MODEL_PARALLEL_RANK = 0
        ps._TENSOR_MODEL_PARALLEL_GLOBAL_RANKS = [dist.get_rank()]
        ps._MPU_EXPERT_TENSOR_PARALLEL_WORLD_SIZE = 1
        ps._MPU_EXPERT_TENSOR_PARALLEL_RANK = 0
        yield
    finally:
        for n, value in saved.items():
            setattr(ps, n, value)


def _is_sharded(param: torch.Tensor) -> bool:
    return bool(getattr(param, "tensor_model_parallel", False))


def _gated(name: str, config: Any) -> bool:
    return bool(getattr(config, "gated_linear_unit", False)) and ".linear_fc1." in name


def shard_tensor(whole: torch.Tensor, dim: int, rank: int, size: int, gated: bool = False) -> torch.Tensor:
    """Rank `rank`'s piece of `whole` (a gated fc1: its piece of the gate and of the up projection)."""
    if gated:
        halves = whole.chunk(2, dim)
        return torch.cat([h.chunk(size, dim)[rank] for h in halves], dim).contiguous()
    return whole.chunk(size, dim)[rank].contiguous()


def _partition_dim(whole: torch.Size, piece: torch.Size, size: int) -> int | None:
    """The one dimension `piece` is `whole` cut `size` ways along (None: not a piece of it)."""
    if len(whole) != len(piece):
        return None
    dims = [d for d, (w, p) in enumerate(zip(whole, piece, strict=True)) if w != p]
    if len(dims) == 1 and whole[dims[0]] == size * piece[dims[0]]:
        return dims[0]
    return None


def shard(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` (whole-model tensors under `model`'s names) cut to this TP rank's pieces for `model`.

    Megatron marks a parameter `tensor_model_parallel` (with its `partition_dim`) only when it initialises
    it; stages are built without initialisation, so the dimension is the one the shapes differ in, and
    the marks are set here (DDP, grad-norm and `gather` read them)."""
    size, rank = tp_size(), tp_rank()
    if size <= 1:
        return dict(state)
    config = getattr(model, "config", None)
    params = dict(model.named_parameters())
    out = {}
    for name, value in state.items():
        p = params.get(name)
        if p is not None and tuple(value.shape) != tuple(p.shape):
            dim = _partition_dim(value.shape, p.shape, size)
            if dim is None:
                raise RuntimeError(
                    f"{name}: {tuple(p.shape)} is not a {size}-way piece of {tuple(value.shape)}"
                )
            value = shard_tensor(value, dim, rank, size, _gated(name, config))
            p.tensor_model_parallel, p.partition_dim, p.partition_stride = True, dim, 1
        out[name] = value
    return out


def gather(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The whole-model tensors of this TP rank's `tensors` (named as `model`'s parameters: gradients or
    weights): the pieces of sharded parameters gathered over the TP group, the others as they are. A
    collective over the TP group."""
    from megatron.core import parallel_state

    size = tp_size()
    if size <= 1:
        return dict(tensors)
    group = parallel_state.get_tensor_model_parallel_group()
    config = getattr(model, "config", None)
    params = dict(model.named_parameters())
    out = {}
    for name, value in tensors.items():
        p = params[name]
        if not _is_sharded(p):
            out[name] = value
            continue
        pieces = [torch.empty_like(value) for _ in range(size)]
        dist.all_gather(pieces, value.contiguous(), group=group)
        dim = p.partition_dim
        if _gated(name, config):
            gates = [x.chunk(2, dim)[0] for x in pieces]
            ups = [x.chunk(2, dim)[1] for x in pieces]
            out[name] = torch.cat(gates + ups, dim)
        else:
            out[name] = torch.cat(pieces, dim)
    return out


class SequenceParallelNorm:
    """Megatron's `WrappedTorchNorm` (torch LayerNorm / RMSNorm: the norm of the local layer spec) for
    sequence parallelism, which Megatron's wrapper refuses: under SP a norm sees this rank's sequence
    piece, so its parameters' gradients are partial sums; marking them `sequence_parallel` makes
    Megatron's `finalize_model_grads` all-reduce them over the TP group (what Megatron's fused norms do)."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **_: Any) -> torch.nn.Module:
        norms = {"LayerNorm": torch.nn.LayerNorm, "RMSNorm": torch.nn.RMSNorm}
        if config.normalization not in norms:
            raise ConfigError(
                f"normalization {config.normalization}: sequence parallelism on the local layer spec runs "
                f"{' and '.join(norms)}",
                key="megatron",
            )
        norm = norms[config.normalization](hidden_size, eps=eps)
        for p in norm.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)
        return norm


def sequence_parallel_spec(layer_spec: Any, num_layers: int) -> Any:
    """The block spec for a stage of `num_layers` layers of `layer_spec` with every torch norm (the
    layers' and the final one) replaced by `SequenceParallelNorm`."""
    import copy
    import dataclasses

    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    spec = copy.deepcopy(layer_spec)
    subs = spec.submodules
    for f in dataclasses.fields(subs):
        if getattr(subs, f.name) is WrappedTorchNorm:
            setattr(subs, f.name, SequenceParallelNorm)
    return TransformerBlockSubmodules(layer_specs=[spec] * num_layers, layer_norm=SequenceParallelNorm)
