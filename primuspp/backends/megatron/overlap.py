"""FB overlap: an FB node runs its forward (one microbatch) and its backward (another) at the same time, so
one's communication overlaps the other's compute (DualPipe's idea).

`run_fb(run_f, run_b)` runs the backward on a helper thread while the forward runs on the caller's: the
autograd engine runs a CPU backward in the thread that calls it, and both release the interpreter inside
their kernels and collectives, so on the CPU the two proceed on two cores, and the TP all-reduces and
all-to-alls of one (gloo work, in flight) overlap the GEMMs of the other. On a GPU both threads issue
onto the current CUDA stream, so their kernels still run one after the other; only the collectives, on
NCCL's own streams, can overlap the other part's kernels (per-part streams are not done; not measured on a
GPU yet).

Collectives must meet in the same order on every rank of a group, and two threads issuing on one group
would not. The backward's TP collectives (the input-gradient all-reduce of the split column-parallel
linears, split.py) therefore go to a twin of the TP group (`backward_group`: the same ranks, a group of
its own, made by `make_twin_groups`), so each group sees one thread's collectives in program order on every
TP rank. Sequence parallelism puts collectives into Megatron's own autograd functions (with the forward's
group), so FB nodes with sequence parallelism run F then B (`overlappable`). The result is the same
arithmetic as F then B: gradients are identical (tests/megatron/test_fb_overlap.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

_LOCAL = threading.local()
#: TP group -> its twin (same ranks), for the backward half of an overlapped FB node
_TWINS: dict[Any, Any] = {}


def make_twin_groups(tp: int) -> None:
    """A twin of every TP group (consecutive ranks, Megatron's order). A collective over the whole world:
    every rank calls it at the same point, after `initialize_model_parallel`. Idempotent."""
    from megatron.core import parallel_state

    if _TWINS or tp <= 1:
        return
    mine = parallel_state.get_tensor_model_parallel_group()
    world = dist.get_world_size()
    for start in range(0, world, tp):
        group = dist.new_group(list(range(start, start + tp)))
        if dist.get_rank() in range(start, start + tp):
            _TWINS[mine] = group


def backward_group_of(group: Any) -> Any:
    """The twin of TP group `group`, or None when none was made."""
    return _TWINS.get(group)


def backward_group(group: Any) -> Any:
    """`group`, or its twin when called from the backward half of an overlapped FB node."""
    if getattr(_LOCAL, "backward", False):
        return _TWINS.get(group, group)
    return group


def overlappable(config: Any) -> bool:
    """Whether FB nodes of a model with this TransformerConfig can overlap (see the module doc)."""
    return not getattr(config, "sequence_parallel", False)


def run_fb(run_f: Callable[[], None], run_b: Callable[[], None]) -> None:
    """Run `run_b` on a helper thread while `run_f` runs here; re-raise the first error (F's first)."""
    errors: list[BaseException] = []

    def backward() -> None:
        _LOCAL.backward = True
        try:
            run_b()
        except BaseException as err:
            errors.append(err)
        finally:
            _LOCAL.backward = False

    thread = threading.Thread(target=backward, name="primuspp-fb-backward", daemon=True)
    thread.start()
    try:
        run_f()
    finally:
        thread.join()
    if errors:
        raise errors[0]
