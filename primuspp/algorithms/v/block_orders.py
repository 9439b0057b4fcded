"""A block's squeezed V orders under a memory cap: the repeated block (`v_grid`) squeezed, for a long m
from a short one with the steady-state period inserted (`v_period`)."""

from __future__ import annotations

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.v import period as v_period
from primuspp.algorithms.v import rows as v_rows
from primuspp.algorithms.v.blocks import Block, estimated_peak, family, offsets
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.schedule.array_order import ArrayOrder

#: family blocks squeezed per search (`candidates`): the widest that fit, then the tighter spacings
LIMIT = 12


def squeezed_orders(
    p: int, m: int, block: Block, cap: int, both: bool = True, report: dict | None = None, period: bool = True
) -> tuple[int, list[tuple[str, ArrayOrder]]]:
    """(peak of the repeated block, orders): the block repeated m times and squeezed under `cap` live
    chunks — the derived-W squeeze alone, and the explicit squeeze followed by the derived one (`both=False`:
    only the block's preferred one). No orders if the block itself needs more than `cap`.

    For long m the orders come from those of a short m0 and a somewhat longer one, the steady-state period
    inserted m - m0 times (`v_period`: the same orders, checked on every run; where the check fails, the
    full squeeze runs; `period=False`: the full squeeze always). `report["squeeze"]`, if a report is given,
    says which ran."""
    offs = offsets(p, block)
    variants = ("derived", "explicit") if both else (block.squeeze,)
    how = "full"
    if period and v_period.applies(m, v_period.starts(cap)[0]):
        # the repeated block's memory is an order property: the untightened repetition's is the same
        peak = raw_peak(p, m, *offs)
        if peak > cap:
            _said(report, how)
            return peak, []
        # the first start skipped where it is known to fail (`v_period.late`, a measured rule)
        unit = block.f0 == block.f1 == block.b1 == block.b0 == 1
        skip = int(v_period.late(estimated_peak(p, block), peak, unit))
        if v_period.applies(m, v_period.starts(cap)[skip]):
            found = v_period.extended(
                lambda k: squeezed(p, k, block.name, offs, cap, variants)[1], m, cap, skip=skip
            )
            if found is not None:
                _said(report, f"period (from m = {found[0]})")
                return peak, found[1]
            how = "full (period check failed)"
        else:
            how = "full (the first start would fail, m is too short for the second)"
    _said(report, how)
    return squeezed(p, m, block.name, offs, cap, variants)


def raw_peak(p: int, m: int, fo: list[int], bo: list[int]) -> int:
    """The peak of the block repeated m times (untightened: the same order), m cut to
    `v_rows.steady_microbatches` (the same peak)."""
    return SlotSchedule(p, min(m, v_rows.steady_microbatches(fo, bo)), fo, bo, tighten=False).peak()


def _said(report: dict | None, how: str) -> None:
    if report is not None:
        report["squeeze"] = how


def squeezed(
    p: int, m: int, name: str, offs: tuple[list[int], list[int]], cap: int, variants: tuple[str, ...]
) -> tuple[int, list[tuple[str, ArrayOrder]]]:
    """`squeezed_orders` by the full squeezes (the reference of the period extension)."""
    base = SlotSchedule(p, m, *offs)
    peak = base.peak()
    if peak > cap:
        return peak, []
    out = []
    for variant in variants:
        sched = base.copy()
        if variant == "explicit":
            sched.squeeze_explicit(cap)
        sched.squeeze_derived(cap)
        out.append((f"{name}/{variant}", sched.order()))
    return peak, out


def candidates(p: int, m: int, chunks: int, limit: int = LIMIT) -> list[tuple[str, ComputeOrder]]:
    """Squeezed orders of up to `limit` of the family's blocks (`v_blocks.family`) that fit `chunks` live
    chunk activations per rank (the widest first), each with the derived squeeze."""
    out: list[tuple[str, ComputeOrder]] = []
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    ranked = sorted(((estimated_peak(p, b), i) for i, b in enumerate(family())), key=lambda x: (-x[0], x[1]))
    for estimate, i in ranked:
        if len(seen) == limit:
            break
        if estimate > chunks + 1:
            continue
        block = family()[i]
        offs = offsets(p, block)
        sig = (tuple(offs[0]), tuple(offs[1]))
        if sig in seen:  # different spacings, same slots (the shifts resolved them alike)
            continue
        seen.add(sig)
        _, orders = squeezed_orders(p, m, block, chunks, both=False)
        out.extend((f"family/{name}", order) for name, order in orders)
    return out
