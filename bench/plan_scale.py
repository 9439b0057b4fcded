"""Planner speed: configurations evaluated per second by `primuspp plan` (target: >= 1,000 in <= 60 s).

    python bench/plan_scale.py [--model llama3-70b] [--gpu h100] [--gpus 1024] [--seq-len 4096]
                               [--global-batch-size 1024] [--micro-batch-size 1 2 4]

The defaults are `primuspp plan --model llama3-70b --gpu h100 --gpus 1024`'s own (sequence 4096, global
batch 1024, micro-batch sizes 1, 2, 4; CP 1, 2, 4, 8).

Runs the same sweep as `primuspp plan` (every admissible TP x CP x PP x VPP x EP x micro-batch size x
default algorithm, balanced layouts) in this process and prints the number of configurations evaluated, how
many fit, the drop reasons, the wall time, the process' CPU time (the wall time it would take on a core of
its own: on a shared machine the two differ by the load) and the best configuration.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.plan import DEFAULT_ALGORITHMS, candidates, evaluate
from primuspp.models.presets import resolve_model


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the sweep's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--global-batch-size", type=int, default=1024)
    ap.add_argument("--micro-batch-size", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (plan's default)")
    args = ap.parse_args()
    spec, hw = resolve_model(args.model), load_hardware(args.gpu)
    base = Parallel(global_batch_size=args.global_batch_size, seq_len=args.seq_len)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    items = candidates(spec, hw, args.gpus, base, DEFAULT_ALGORITHMS, micro_batch_sizes=args.micro_batch_size)
    result = evaluate(spec, hw, items, jobs=args.jobs)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    print(
        f"{spec.name} on {args.gpus} x {hw.name}, seq {args.seq_len}, global batch {args.global_batch_size}"
    )
    print(
        f"configurations evaluated: {result.evaluated}  fit: {len(result.fits)}  "
        f"dropped: {dict(result.dropped)}"
    )
    rate = result.evaluated / wall
    verdict = "PASS" if result.evaluated >= 1000 and wall <= 60 else "below target"
    print(f"wall time: {wall:.1f} s  ({rate:.0f} configurations/s; target >= 1,000 in <= 60 s: {verdict})")
    print(
        f"CPU time: {cpu:.1f} s in {args.jobs} process(es) "
        f"({result.evaluated / cpu:.0f} configurations per CPU second)"
    )
    if result.fits:
        best = result.ranked()[0]
        p = best.par
        print(
            f"best: {best.algorithm} tp{p.tp} cp{p.cp} pp{p.pp} vpp{p.vpp} dp{p.dp} mbs{p.micro_batch_size}: "
            f"{best.tokens_per_s_per_gpu:.0f} tokens/s/GPU, MFU {best.mfu:.1%}, "
            f"peak {best.peak_memory_bytes / 1e9:.1f} GB"
        )


if __name__ == "__main__":
    main()
