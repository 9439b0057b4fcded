"""CPU support for megatron-core 0.16.1 (docs/megatron.md, section "CPU"): applied only on CPU.

megatron-core assumes CUDA in a few places that pipeline training reaches:

- `DotProductAttention` takes scratch memory from `parallel_state`'s global memory buffer, which allocates
  on `torch.cuda.current_device()`: replaced by a buffer that allocates on the CPU;
- `tensor_parallel.model_parallel_cuda_manual_seed` needs CUDA RNG state: the RNG tracker is created in its
  inference mode instead (no CUDA state; dropout-free models do not use it);
- Megatron DDP allocates its grad buffers on `torch.cuda.current_device()`, and Megatron's own schedules
  (used here only to compare against) allocate receive buffers there and make `total_num_tokens` with
  `device="cuda"`: those modules see a `torch` whose CUDA device is the CPU;
- the tensor-parallel mappings (all-gather, reduce-scatter, all-to-all of the MoE token dispatcher)
  allocate their outputs on `torch.cuda.current_device()`;
- MoE: the router moves its weight to `torch.cuda.current_device()` at every forward, the all-to-all token
  dispatcher copies its split sizes on a side CUDA stream (`torch.cuda.Stream`, `current_stream`,
  `stream(...)`, `record_event`) and the aux-loss tracker allocates on "cuda": those modules see the same
  CPU `torch`, whose streams and events are no-ops (the CPU runs in order).

`apply()` does all of this once per process, after `parallel_state.initialize_model_parallel`; the
primuspp schedule itself (schedule.py) needs none of it. Nothing here is used when the device is a GPU.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch

_CPU = torch.device("cpu")
# modules whose `torch` global is replaced on CPU (allocations on "cuda" land on the CPU)
_PATCHED_MODULES = (
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.pipeline_parallel.schedules",
    "megatron.core.pipeline_parallel.p2p_communication",
    "megatron.core.tensor_parallel.mappings",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.transformer.moe.moe_utils",
    # sequence parallelism's reduce-scatter / all-gather buffers (tensor parallelism, tp.py)
    "megatron.core.tensor_parallel.layers",
)


def _on_cpu(device: Any) -> Any:
    if device is None:
        return None
    if isinstance(device, int) or torch.device(device).type == "cuda":
        return _CPU
    return device


class _NoStream:
    """A CUDA stream / event on the CPU: work runs in program order, so waiting and syncing do nothing."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def wait_stream(self, *_: Any) -> None:
        return None

    def wait_event(self, *_: Any) -> None:
        return None

    def record_event(self, *_: Any) -> _NoStream:
        return self

    def synchronize(self) -> None:
        return None

    def __enter__(self) -> _NoStream:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


_NO_STREAM = _NoStream()


class _CudaOnCPU:
    """`torch.cuda` as seen by the patched modules: the current device is the CPU, streams, events and syncs
    are no-ops."""

    Stream = _NoStream
    Event = _NoStream

    @staticmethod
    def current_device() -> torch.device:
        return _CPU

    @staticmethod
    def current_stream(*_: Any) -> _NoStream:
        return _NO_STREAM

    @staticmethod
    def stream(*_: Any) -> _NoStream:
        return _NO_STREAM

    @staticmethod
    def synchronize(*_: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _TorchOnCPU:
    """`torch` as seen by the patched modules: tensors asked for on a CUDA device are made on the CPU."""

    cuda = _CudaOnCPU()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(*args, device=_on_cpu(device), **kwargs)

    @staticmethod
    def empty(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.empty(*args, device=_on_cpu(device), **kwargs)

    @staticmethod
    def ones(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.ones(*args, device=_on_cpu(device), **kwargs)

    @staticmethod
    def tensor(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        return torch.tensor(*args, device=_on_cpu(device), **kwargs)


_TORCH_ON_CPU = _TorchOnCPU()


@functools.cache
def _memory_buffer_class() -> type:
    from megatron.core.utils import GlobalMemoryBuffer

    class CPUGlobalMemoryBuffer(GlobalMemoryBuffer):
        """Megatron's global memory buffer, allocating on the CPU."""

        def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):  # type: ignore[override]
            required = functools.reduce(operator.mul, tensor_shape, 1)
            buf = self.buffer.get((name, dtype))
            if buf is None or buf.numel() < required:
                buf = self.buffer[(name, dtype)] = torch.empty(required, dtype=dtype, requires_grad=False)
            return buf[0:required].view(*tensor_shape)

    return CPUGlobalMemoryBuffer


def _to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """`moe_utils.maybe_move_tensor_to_cpu` for the token dispatcher: split sizes become numpy arrays on
    the CPU too (Megatron converts only CUDA tensors; `all_to_all_single` takes no tensor split sizes)."""
    if isinstance(tensor, torch.Tensor) and not tensor.is_cuda:
        return tensor.numpy() if as_numpy else tensor
    from megatron.core.transformer.moe import moe_utils

    return moe_utils.maybe_move_tensor_to_cpu(tensor, as_numpy=as_numpy, record_stream=record_stream)


def apply() -> None:
    """Make megatron-core run on the CPU in this process (idempotent). Call it after
    `parallel_state.initialize_model_parallel`, and only when the device is the CPU."""
    import importlib

    from megatron.core import parallel_state, tensor_parallel

    cls = _memory_buffer_class()
    if type(parallel_state._GLOBAL_MEMORY_BUFFER) is not cls:
        parallel_state._GLOBAL_MEMORY_BUFFER = cls()
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    for name in _PATCHED_MODULES:
        module = importlib.import_module(name)
        module.torch = _TORCH_ON_CPU  # type: ignore[attr-defined]
    from megatron.core.transformer.moe import token_dispatcher

    token_dispatcher.maybe_move_tensor_to_cpu = _to_host  # type: ignore[attr-defined]


def applied() -> bool:
    """True when `apply()` ran in this process."""
    import importlib

    return all(importlib.import_module(n).torch is _TORCH_ON_CPU for n in _PATCHED_MODULES)
