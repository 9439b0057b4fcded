"""FB overlap, measured: an FB node's time against its F and B run back to back, on a TP=2 dense layer.

    python bench/fb_overlap.py [--layers 2] [--hidden 512] [--seq-len 512] [--micro-batch-size 2]
                               [--repeat 9] [--cpu] [--json]

Two ranks (NCCL where two GPUs are visible, else or with --cpu gloo on the CPU) each hold
their TP half of `--layers` megatron-core GPT layers (a middle pipeline stage: hidden states in, hidden
states out), with primuspp's B/W split installed. The communication is the layers' TP collectives: the
row-parallel output all-reduces in F and the column-parallel input-gradient all-reduces in B (an EP=2 MoE
layer's all-to-alls are the other case DualPipe overlaps; this bench uses the dense layer). Per repeat,
interleaved, on one microbatch's forward and another's backward (B: input gradients; W deferred):

- F alone, B alone, and F then B back to back (what an FB node costs without overlap);
- the FB node overlapped (overlap.run_fb: B on a helper thread while F runs, B's all-reduces on the twin TP
  group).

It prints the medians and `fb_overlap` = FB overlapped / (F + B): the simulator's factor for FB nodes
(`fb_overlap:` in a simulation config; schedule/costs.py), calibrated on this machine. Below 1 the overlap
pays; on a CPU whose cores are all busy it cannot (the two threads share the same cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from primuspp.runtime.launch import WorkerContext, launch


@dataclass(frozen=True)
class Bench:
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch_size: int
    repeat: int


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def worker(ctx: WorkerContext, bench: Bench) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state

    from primuspp.backends.megatron import overlap, split
    from primuspp.backends.megatron.model import GPTSpec, build_stage, causal_mask, whole_model
    from primuspp.backends.megatron.train import setup_parallel
    from primuspp.runtime.wgrad import WeightGradStore

    setup_parallel(1, 1, ctx.device, tp=2)
    overlap.make_twin_groups(2)
    spec = GPTSpec(layers=bench.layers, hidden=bench.hidden, heads=bench.heads, seq_len=bench.seq_len)
    whole = whole_model(spec).state_dict()
    stage = build_stage(spec, whole, range(bench.layers), False, False, tensor_model_parallel_size=2).to(
        ctx.device
    )
    split.install()
    mask = causal_mask(bench.seq_len, ctx.device)
    shape = (bench.seq_len, bench.micro_batch_size, bench.hidden)
    gen = torch.Generator().manual_seed(0)
    x_data = torch.randn(shape, generator=gen).to(ctx.device)
    g_data = torch.randn(shape, generator=gen).to(ctx.device)
    pending: list[tuple[torch.Tensor, torch.Tensor, WeightGradStore]] = []

    def forward() -> None:
        x = x_data.clone().requires_grad_()
        store = WeightGradStore()
        with store.recording():
            stage.set_input_tensor(x)
            y = stage(None, None, mask)
        pending.append((x, y, store))

    def backward(item: tuple[torch.Tensor, torch.Tensor, WeightGradStore]) -> None:
        _, y, store = item
        store.defer = True
        torch.autograd.backward(y, g_data)
        store.defer = False
        done.append(store)

    done: list[WeightGradStore] = []
    times: dict[str, list[float]] = {"F": [], "B": [], "F then B": [], "FB overlapped": []}

    def timed(key: str, fn: Any) -> None:
        dist_barrier()
        _sync(ctx.device)
        t0 = time.perf_counter()
        fn()
        _sync(ctx.device)
        times[key].append((time.perf_counter() - t0) * 1000)

    def dist_barrier() -> None:
        torch.distributed.barrier(group=parallel_state.get_tensor_model_parallel_group())

    forward()  # warm-up: one microbatch in flight, as in an FB node
    backward(pending.pop(0))
    for _ in range(bench.repeat):
        forward()  # the microbatch whose backward the FB node runs
        timed("F", forward)
        timed("B", lambda: backward(pending.pop(0)))
        timed("F then B", lambda: (forward(), backward(pending.pop(0))))
        item = pending.pop(0)
        timed("FB overlapped", lambda item=item: overlap.run_fb(forward, lambda: backward(item)))
        pending.clear()
        for store in done:
            store.run()  # W: the deferred weight grads, untimed
        done.clear()
    split.uninstall()
    return {k: v for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where GPUs are visible")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    gpu = not args.cpu and torch.cuda.is_available() and torch.cuda.device_count() >= 2
    bench = Bench(args.layers, args.hidden, args.heads, args.seq_len, args.micro_batch_size, args.repeat)
    per_rank = launch(worker, 2, bench, backend="nccl" if gpu else "gloo")
    assert per_rank is not None
    # per repeat: the slower rank (the collectives make them wait for each other)
    med = {
        k: statistics.median(max(r[k][i] for r in per_rank) for i in range(bench.repeat)) for k in per_rank[0]
    }
    factor = med["FB overlapped"] / (med["F"] + med["B"])
    doc = {
        "device": torch.cuda.get_device_name(0) if gpu else "cpu (gloo)",
        "layer": f"dense, TP=2, {bench.layers} layers, hidden {bench.hidden}, seq {bench.seq_len}, "
        f"micro-batch {bench.micro_batch_size}",
        "median_ms": med,
        "fb_overlap": factor,
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"FB overlap on {doc['device']}: {doc['layer']} (median of {bench.repeat}, slower rank)")
    for key, ms in med.items():
        print(f"  {key:<14} {ms:9.2f} ms")
    print(f"fb_overlap = FB overlapped / (F + B) = {factor:.3f} (simulation YAML: fb_overlap: {factor:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
