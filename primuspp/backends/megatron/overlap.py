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

MoE with expert parallelism: the all-to-all token dispatcher's backward (Megatron's `_AllToAll`, the
dispatch and combine all-to-alls reversed) goes to a twin of the EP group the same way (`make_twin_groups`
makes it and routes `_AllToAll.backward` through `backward_group`); the forward's other collectives (the
token-count all-gather on the TP x EP group, the router's aux-loss reduction) stay in the forward's thread.
MoE with tensor parallelism also puts the experts' TP gathers into Megatron's own autograd functions:
those FB nodes run F then B, as do MoE models whose EP group got no twin.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

_LOCAL = threading.local()
#: TP group -> its twin (same ranks), for the backward half of an overlapped FB node
_TWINS: dict[Any, Any] = {}
#: make_twin_groups ran in this process
_MADE: list[bool] = []


def make_twin_groups(tp: int) -> None:
    """A twin of every TP group (consecutive ranks, Megatron's order) and, with expert parallelism, of every
    EP group. A collective over the whole world: every rank calls it at the same point, after
    `initialize_model_parallel`. Idempotent."""
    from megatron.core import parallel_state

    if _MADE:
        return
    _MADE.append(True)
    if tp > 1:
        mine = parallel_state.get_tensor_model_parallel_group()
        world = dist.get_world_size()
        for start in range(0, world, tp):
            group = dist.new_group(list(range(start, start + tp)))
            if dist.get_rank() in range(start, start + tp):
                _TWINS[mine] = group
    if parallel_state.get_expert_model_parallel_world_size() > 1:
        _make_twin_ep_groups(parallel_state.get_expert_model_parallel_group())


def _make_twin_ep_groups(mine: Any) -> None:
    """Twins of the EP groups: every rank learns every EP group's ranks (their layout depends on TP, PP and
    the expert tensor parallelism: Megatron's rank generator), then all create them in one order."""
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, sorted(dist.get_process_group_ranks(mine)))
    for members in sorted({tuple(r) for r in ranks}):
        group = dist.new_group(list(members))
        if dist.get_rank() in members:
            _TWINS[mine] = group
    _route_all_to_all_backward()


def _route_all_to_all_backward() -> None:
    """Megatron's `_AllToAll` (the token dispatcher's all-to-all) runs its backward on `backward_group` of
    its forward's group: the twin in an overlapped FB node's backward, the group itself everywhere else.
    Patched once, process-wide; the arithmetic is Megatron's."""
    from megatron.core.tensor_parallel import mappings

    cls = mappings._AllToAll
    if getattr(cls, "primuspp_twin", False):
        return

    def backward(ctx: Any, *grad_output: Any) -> tuple[Any, ...]:
        group = backward_group(ctx.group)
        return (
            None,
            cls.apply(group, *grad_output, ctx.input_split_sizes, ctx.output_split_sizes),
            None,
            None,
        )

    cls.backward = staticmethod(backward)
    cls.primuspp_twin = True


def backward_group_of(group: Any) -> Any:
    """The twin of TP group `group`, or None when none was made."""
    return _TWINS.get(group)


def backward_group(group: Any) -> Any:
    """`group`, or its twin when called from the backward half of an overlapped FB node."""
    if getattr(_LOCAL, "backward", False):
        return _TWINS.get(group, group)
    return group


def overlappable(config: Any) -> bool:
    """Whether FB nodes of a model with this TransformerConfig can overlap (see the module doc): no sequence
    parallelism; with MoE, no tensor parallelism and, with expert parallelism, an EP twin group."""
    if getattr(config, "sequence_parallel", False):
        return False
    if not getattr(config, "num_moe_experts", None):
        return True
    if (
        getattr(config, "tensor_model_parallel_size", 1) > 1
        or (getattr(config, "expert_tensor_parallel_size", 1) or 1) > 1
    ):
        return False
    if getattr(config, "expert_model_parallel_size", 1) > 1:
        from megatron.core import parallel_state

        return backward_group_of(parallel_state.get_expert_model_parallel_group()) is not None
    return True


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
