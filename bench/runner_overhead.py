"""Runner overhead against torch.distributed.pipelining, where compute is negligible (and where it is not).

    python bench/runner_overhead.py [--pp 4] [--mb 16] [--steps 30] [--recv-ahead N] [--hidden 8]
        [--module auto|split|linear] [--no-meter]

4 ranks (gloo, one thread each), one Linear(H, H) per stage (H = --hidden, default 8: compute negligible,
the runners' own cost shows; 2048: compute dominates), 16 microbatches of 1 row. For 1f1b and zbv, the
same model runs under our runner and under torch's Schedule1F1B / ScheduleZBVZeroBubble, interleaved step by
step in the same processes. A step is timed from a barrier to the slowest rank's end; the median over the
steps is reported, and our/torch as a ratio (docs/runtime.md has the figures). Wall time at H = 8 is p2p
latency: a gloo message wakes two threads on the receiver, and on a busy machine a wake-up often waits for the
next scheduler tick (~4 ms instead of ~0.08 ms), whichever implementation sent it. So the CPU time of each
rank's main thread during the step (max over ranks, median over steps) is reported too: what each
implementation itself costs, independent of that lottery.
torch.distributed.pipelining needs numpy (its shape inference pickles objects through numpy).

zbv: the registry's `zbv` if this build has it; otherwise the exact order torch's ScheduleZBVZeroBubble
computes, converted into a table (F → F, I → B, W → W) and lowered by ours. Torch's stages use nn.Linear
(it splits B and W by graph surgery). Ours (--module auto, the default): SplitLinear (a real B/W split)
where the table has B nodes (zbv), nn.Linear where it has none (1f1b: both sides then run the very same
module, so the ratio is the runners'); --module split / linear forces one. Ours counts activation memory
as `TorchPipeline` does by default (saved-tensor hooks; torch's counts nothing); --no-meter switches that
off, which shows the meter's share of our cost.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist
from rich.console import Console
from rich.table import Table
from torch import nn

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.backends.torch.layers import SplitLinear
from primuspp.backends.torch.pipeline import TorchPipeline
from primuspp.runtime.executor import TensorSpec
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import v_shape
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate


def has_split(table: ScheduleTable) -> bool:
    """The table has B nodes (a B/W split), alone or as the backward part of an FB."""
    return any(p.kind is NodeKind.B for row in table.ranks for n in row for p in (n.parts or (n,)))


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def zbv_table(pp: int, m: int) -> tuple[ScheduleTable, str]:
    if "zbv" in ALGORITHMS:
        return build_schedule("zbv", pp, 2, m), "registry zbv"
    from torch.distributed.pipelining.schedules import ScheduleZBVZeroBubble

    fake = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
    kinds = {
        "FORWARD": NodeKind.F,
        "BACKWARD_INPUT": NodeKind.B,
        "BACKWARD_WEIGHT": NodeKind.W,
        "FULL_BACKWARD": NodeKind.BW,
    }
    order = []
    for rank in range(pp):
        actions = ScheduleZBVZeroBubble._calculate_single_rank_operations(fake, rank)
        order.append(
            [
                Node(kinds[a.computation_type.name], a.microbatch_index, a.stage_index)
                for a in actions
                if a is not None
            ]
        )
    pl = v_shape(pp)
    table = ScheduleTable(pl, m, lower_comms(pl, m, order), "zbv (torch's order)")
    validate(table)
    return table, "torch's ZBV order, lowered by primuspp"


def _torch_schedule(name: str, rank: int, pp: int, m: int, modules: dict[int, nn.Module], hidden: int):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import Schedule1F1B, ScheduleZBVZeroBubble

    n_stages = len(modules) * pp
    stages = [
        PipelineStage(mod, s, n_stages, torch.device("cpu"), input_args=torch.empty(1, hidden))
        for s, mod in sorted(modules.items())
    ]
    if name == "1f1b":
        return Schedule1F1B(stages[0], m, loss_fn=loss_fn)
    return ScheduleZBVZeroBubble(stages, m, loss_fn=loss_fn)


def _step_functions(
    name, table, rank, pp, m, ours_mods, theirs_mods, micro, x, y, recv_ahead, hidden, meter=True
):
    """One training step of each implementation, as argument-less callables."""
    pipe = TorchPipeline(
        table, rank, ours_mods, loss_fn, TensorSpec((1, hidden)), recv_ahead=recv_ahead, track_memory=meter
    )
    sched = _torch_schedule(name, rank, pp, m, theirs_mods, hidden)
    first = 0 in theirs_mods
    last = (2 * pp - 1 if name == "zbv" else pp - 1) in theirs_mods

    def ours() -> None:
        pipe.step(micro, sync_start=False)

    def theirs() -> None:
        kwargs = {"target": y, "losses": []} if last else {}
        if first:
            sched.step(x, **kwargs)
        else:
            sched.step(**kwargs)

    return ours, theirs


def worker(
    ctx: WorkerContext,
    pp: int,
    m: int,
    steps: int,
    tables: dict,
    recv_ahead: int | None,
    hidden: int = 8,
    module: str = "auto",
    meter: bool = True,
) -> dict:
    rank = ctx.rank
    torch.manual_seed(0)
    x, y = torch.randn(m, hidden), torch.randn(m, hidden)
    micro = [(x[i : i + 1], y[i : i + 1]) for i in range(m)]
    out = {}
    for name, table in tables.items():
        split = module == "split" or (module == "auto" and has_split(table))
        layer = SplitLinear if split else nn.Linear
        ours_mods = {s: layer(hidden, hidden) for s in table.placement.stages_of_rank(rank)}
        theirs_mods = {s: nn.Linear(hidden, hidden) for s in ours_mods}
        for s in ours_mods:
            theirs_mods[s].load_state_dict(ours_mods[s].state_dict())
        ours, theirs = _step_functions(
            name, table, rank, pp, m, ours_mods, theirs_mods, micro, x, y, recv_ahead, hidden, meter
        )
        times: dict[str, list[float]] = {"ours": [], "torch": [], "ours cpu": [], "torch cpu": []}
        pair = (("ours", ours), ("torch", theirs))
        for i in range(steps + 3):  # 3 warm-up steps
            for impl, fn in pair if i % 2 else pair[::-1]:
                for mod in (*ours_mods.values(), *theirs_mods.values()):
                    mod.zero_grad(set_to_none=True)
                dist.barrier()
                cpu = time.thread_time()
                start = time.perf_counter()
                fn()
                wall = time.perf_counter() - start
                took = torch.tensor([wall, time.thread_time() - cpu], dtype=torch.float64)
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                if i >= 3:
                    times[impl].append(float(took[0]))
                    times[f"{impl} cpu"].append(float(took[1]))
        out[name] = {k: statistics.median(v) for k, v in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--mb", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument(
        "--hidden", type=int, default=8, help="Linear(H, H) per stage (8: runner cost; 2048: compute)"
    )
    ap.add_argument(
        "--recv-ahead", type=int, default=None, help="receives posted ahead of their batch (default: all)"
    )
    ap.add_argument(
        "--module",
        choices=("auto", "split", "linear"),
        default="auto",
        help="our stages' layer: SplitLinear (split), nn.Linear (linear), or auto: SplitLinear only where "
        "the table splits B and W (zbv), so on 1f1b both sides run the same module",
    )
    ap.add_argument(
        "--no-meter",
        action="store_true",
        help="our pipeline without its activation meter (torch's has none): the meter's share of our cost",
    )
    args = ap.parse_args()
    zbv, zbv_source = zbv_table(args.pp, args.mb)
    tables = {"1f1b": build_schedule("1f1b", args.pp, 1, args.mb), "zbv": zbv}
    results = launch(
        worker,
        args.pp,
        args.pp,
        args.mb,
        args.steps,
        tables,
        args.recv_ahead,
        args.hidden,
        args.module,
        not args.no_meter,
        backend="gloo",
    )
    assert results is not None
    res = results[0]
    ahead = "all" if args.recv_ahead is None else args.recv_ahead
    table = Table(
        title=f"runner overhead: {args.pp} ranks (gloo), Linear({args.hidden}, {args.hidden}) per stage, "
        f"{args.mb} microbatches of 1 row, median of {args.steps} steps, receives ahead: {ahead}, "
        f"our layers: {args.module}{', no meter' if args.no_meter else ''}",
        title_justify="left",
    )
    cols = ("schedule", "ours ms", "torch ms", "ours / torch", "ours cpu ms", "torch cpu ms", "cpu ratio")
    for col in cols:
        table.add_column(col, justify="right")
    for name in tables:
        o, t = res[name]["ours"], res[name]["torch"]
        oc, tc = res[name]["ours cpu"], res[name]["torch cpu"]
        cells = (f"{o * 1e3:.2f}", f"{t * 1e3:.2f}", f"{o / t:.3f}", f"{oc * 1e3:.2f}", f"{tc * 1e3:.2f}")
        table.add_row(name, *cells, f"{oc / tc:.3f}")
    Console(width=140).print(table)
    Console().print(f"zbv table: {zbv_source}")


if __name__ == "__main__":
    main()
