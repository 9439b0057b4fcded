"""The memory model's readable reference: the semantics table's effects, one by one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from primuspp.schedule.nodes import Node
from primuspp.schedule.semantics import SEMANTICS, _apply


def memory_events(
    nodes: Sequence[Node], amount: Sequence[float], b_free: Sequence[float]
) -> Iterator[tuple[int, int, float]]:
    """The one memory model: (node index, 0 at its start | 1 at its end, change) for each memory effect of a
    rank's nodes, in the order they happen. `amount[s]` is stage s's activation per microbatch (in any unit),
    `b_free[s]` the part of it B frees (W frees what is left; negative: B leaves more than F saved).

    A rank runs its nodes one after another, so the order of the list is the order in time: the level after
    each event is all a curve needs, and its maximum is the peak. Zero-length nodes keep this order too."""
    resident: dict[tuple[int, int], float] = {}
    offloaded: dict[tuple[int, int], float] = {}
    for i, node in enumerate(nodes):
        sem = SEMANTICS[node.kind]
        if sem.role == "comm":
            continue
        parts = node.parts if sem.parts else (node,)
        for phase in (0, 1):
            for part in parts:
                psem = SEMANTICS[part.kind]
                for effect in psem.at_start if phase == 0 else psem.at_end:
                    yield i, phase, _apply(effect, part, amount, b_free, resident, offloaded)
