"""megatron-core's own interleaved order beside primuspp's 1f1b-interleaved (and the padded order).

    python bench/megatron_interleaved.py [--fwd 1 --bwd 1 --wgrad 1 --comm 0]

For each (p, v, m) and every group size N megatron-core accepts (`microbatch_group_size_per_vp_stage`:
p <= N <= m, not 0 < m mod N < p), megatron-core 0.16.1's order is read from its own functions
(`get_schedule_table`, `get_pp_rank_microbatches`: warm-up forwards, then forward k + warm-up and backward
k, then the remaining backwards; backward k on the mirrored chunk), lowered, validated and simulated by
primuspp; primuspp's 1f1b-interleaved at the same N is built by the registry. `same` says the two compute
orders are equal on every rank; the step times and peaks follow, with 1f1b-interleaved-padded's (groups
of p, the extra microbatches of the next multiple of p dropped) and the default N's row marked `*`.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from primuspp.algorithms.classic.interleaved import default_group, group_refusal
from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate
from primuspp.sim import simulate

CASES = [(4, 2, 6), (4, 2, 10), (8, 2, 12), (4, 3, 9), (4, 2, 8), (8, 2, 32), (4, 4, 7), (2, 2, 5)]


def megatron_table(p: int, v: int, m: int, n: int) -> ScheduleTable:
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

    table = get_schedule_table(m, v, n)
    order = []
    for rank in range(p):
        group = SimpleNamespace(size=lambda: p, rank=lambda rank=rank: rank)
        comm = SimpleNamespace(pp_group=group, virtual_pipeline_model_parallel_size=v)
        total, _, warmup, remaining = get_pp_rank_microbatches(m, v, n, p2p_communicator=comm)
        fwd = [Node(NodeKind.F, mb, c * p + rank) for mb, c in table]
        bwd = [Node(NodeKind.BW, mb, (v - 1 - c) * p + rank) for mb, c in table]
        seq = fwd[:warmup]
        for k in range(remaining):
            seq += [fwd[k + warmup], bwd[k]]
        order.append(seq + bwd[remaining:total])
    placement = make_placement("loop", p, v)
    out = ScheduleTable(placement, m, lower_comms(placement, m, order), "megatron-core", {})
    validate(out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--fwd", "--bwd", "--wgrad"):
        ap.add_argument(flag, type=float, default=1.0)
    ap.add_argument("--comm", type=float, default=0.0)
    args = ap.parse_args()
    costs = CostModel(args.fwd, args.bwd, args.wgrad, comm=args.comm)

    def figures(table: ScheduleTable) -> tuple[float, float]:
        m = simulate(table, costs).metrics
        return m.step_time, m.peak_memory

    print(f"costs F={args.fwd:g} B={args.bwd:g} W={args.wgrad:g} comm={args.comm:g}")
    print(
        f"{'p':>2} {'v':>2} {'m':>3} {'N':>4}  same  {'megatron':>9} {'ours':>9} {'padded':>9}  peaks m/o/pad"
    )
    differ = 0
    for p, v, m in CASES:
        padded = figures(build_schedule("1f1b-interleaved-padded", p, v, m, costs))
        for n in range(p, m + 1):
            if group_refusal(p, m, n):
                continue
            theirs = megatron_table(p, v, m, n)
            ours = build_schedule("1f1b-interleaved", p, v, m, costs, group_size=n)
            same = theirs.compute_order() == ours.compute_order()
            differ += not same
            (ms, mp), (os_, op) = figures(theirs), figures(ours)
            mark = "*" if n == default_group(p, m) else " "
            print(
                f"{p:2} {v:2} {m:3} {n:3}{mark}  {'yes' if same else 'NO':4}  {ms:9g} {os_:9g} {padded[0]:9g}"
                f"  {mp:g}/{op:g}/{padded[1]:g}"
            )
    print(f"{differ} orders differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
