"""FB overlap, measured: an FB node's time against its F and B run back to back, on a TP=2 dense layer and on
an EP=2 MoE layer.

    python bench/fb_overlap.py [--case dense moe] [--layers 2] [--hidden 512] [--seq-len 512]
                               [--micro-batch-size 2] [--moe-experts 8] [--moe-topk 2] [--moe-ffn H]
                               [--repeat 9] [--cpu] [--json]

Per case, two ranks (NCCL where two GPUs are visible, else or with --cpu gloo on the CPU) each hold
`--layers` megatron-core GPT layers (a middle pipeline stage: hidden states in, hidden states out), with
primuspp's B/W split installed:

- dense: each rank its TP half of dense layers (TP=2). The communication is the TP collectives: the
  row-parallel output all-reduces in F and the column-parallel input-gradient all-reduces in B.
- moe: megatron-core's MoELayer as the megatron backend builds it (`primuspp train --moe-experts 8
  --moe-topk 2 --ep 2`: top-k router with the aux loss, all-to-all token dispatcher, grouped-GEMM experts),
  each rank half the experts (EP=2) and its own microbatches (the data-parallel replicas EP spans). The
  communication is the dispatch and combine all-to-alls, in F and (reversed) in B.

Per repeat, interleaved, on one microbatch's forward and another's backward (B: input gradients; W
deferred):

- F alone, B alone, and F then B back to back (what an FB node costs without overlap);
- the FB node overlapped (overlap.run_fb: B on a helper thread while F runs, B's collectives on the twin
  TP or EP group).

It prints the medians and, per case, `fb_overlap` = FB overlapped / (F + B): the simulator's factor for FB
nodes (`fb_overlap:` in a simulation config; schedule/costs.py), calibrated on this machine, and the
overlapped node against F then B measured back to back (on a loaded machine the two differ: each timed
piece starts after a barrier). Below 1 the overlap pays; on a CPU whose cores are all busy it cannot (the
two threads share the same cores).
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

CASES = ("dense", "moe")


@dataclass(frozen=True)
class Bench:
    case: str  # "dense" (TP=2) or "moe" (EP=2)
    layers: int
    hidden: int
    heads: int
    seq_len: int
    micro_batch_size: int
    repeat: int
    moe_experts: int = 8
    moe_topk: int = 2
    moe_ffn: int | None = None

    def describe(self) -> str:
        size = f"{self.layers} layers, hidden {self.hidden}, seq {self.seq_len}"
        size += f", micro-batch {self.micro_batch_size}"
        if self.case == "dense":
            return f"dense, TP=2, {size}"
        ffn = f", expert ffn {self.moe_ffn}" if self.moe_ffn else ""
        return f"MoE {self.moe_experts} experts top-{self.moe_topk}{ffn}, EP=2, {size}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def worker(ctx: WorkerContext, bench: Bench) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state

    from primuspp.backends.megatron import moe, overlap, split
    from primuspp.backends.megatron.model import GPTSpec, build_stage, causal_mask, whole_model
    from primuspp.backends.megatron.train import setup_parallel
    from primuspp.runtime.wgrad import WeightGradStore

    size = {"dense": {"tp": 2}, "moe": {"ep": 2}}[bench.case]
    setup_parallel(1, 1, ctx.device, **size)
    overlap.make_twin_groups(size.get("tp", 1))
    settings = ()
    if bench.case == "moe":
        settings = moe.settings(bench.moe_experts, bench.moe_topk, bench.moe_ffn)
    spec = GPTSpec(
        layers=bench.layers, hidden=bench.hidden, heads=bench.heads, seq_len=bench.seq_len, settings=settings
    )
    whole = whole_model(spec).state_dict()
    if bench.case == "moe":
        config = {"expert_model_parallel_size": 2}
        experts = moe.local_experts(spec.settings)
        group = parallel_state.get_expert_model_parallel_group()
    else:
        config, experts = {"tensor_model_parallel_size": 2}, (0, 0)
        group = parallel_state.get_tensor_model_parallel_group()
    stage = build_stage(spec, whole, range(bench.layers), False, False, None, experts, **config)
    stage = stage.to(ctx.device)
    if not overlap.overlappable(stage.config):
        raise RuntimeError(f"FB nodes of the {bench.case} layer do not overlap (overlap.overlappable)")
    split.install()
    mask = causal_mask(bench.seq_len, ctx.device)
    shape = (bench.seq_len, bench.micro_batch_size, bench.hidden)
    # dense: the TP ranks share the input; moe: each EP rank its own microbatches (its data-parallel replica)
    gen = torch.Generator().manual_seed(ctx.rank if bench.case == "moe" else 0)
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
        torch.distributed.barrier(group=group)

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


def measure(bench: Bench, gpu: bool) -> dict[str, Any]:
    """One case on two ranks: the medians (per repeat, the slower rank: the collectives make them wait for
    each other) and the factor."""
    per_rank = launch(worker, 2, bench, backend="nccl" if gpu else "gloo")
    assert per_rank is not None
    med = {
        k: statistics.median(max(r[k][i] for r in per_rank) for i in range(bench.repeat)) for k in per_rank[0]
    }
    return {
        "case": bench.case,
        "layer": bench.describe(),
        "median_ms": med,
        "fb_overlap": med["FB overlapped"] / (med["F"] + med["B"]),
        "vs_back_to_back": med["FB overlapped"] / med["F then B"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", nargs="+", choices=CASES, default=list(CASES), help="default: both")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--moe-experts", type=int, default=8)
    ap.add_argument("--moe-topk", type=int, default=2)
    ap.add_argument(
        "--moe-ffn", type=int, default=None, help="expert FFN size (default: Megatron's, 4 x hidden)"
    )
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where GPUs are visible")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from primuspp.backends.megatron import moe
    from primuspp.errors import ConfigError

    try:
        moe.check(args.moe_experts, args.moe_topk, 1, args.moe_ffn)
        if args.moe_experts % 2:
            raise ConfigError(f"--moe-experts {args.moe_experts}: must be even (EP=2 halves the experts)")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    gpu = not args.cpu and torch.cuda.is_available() and torch.cuda.device_count() >= 2
    cases = [
        Bench(
            case,
            args.layers,
            args.hidden,
            args.heads,
            args.seq_len,
            args.micro_batch_size,
            args.repeat,
            args.moe_experts,
            args.moe_topk,
            args.moe_ffn,
        )
        for case in dict.fromkeys(args.case)
    ]
    doc = {
        "device": torch.cuda.get_device_name(0) if gpu else "cpu (gloo)",
        "cases": [measure(bench, gpu) for bench in cases],
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    for case in doc["cases"]:
        print(f"FB overlap on {doc['device']}: {case['layer']} (median of {args.repeat}, slower rank)")
        for key, ms in case["median_ms"].items():
            print(f"  {key:<14} {ms:9.2f} ms")
        factor = case["fb_overlap"]
        print(
            f"fb_overlap = FB overlapped / (F + B) = {factor:.3f} (simulation YAML: fb_overlap: {factor:.2f})"
        )
        print(f"FB overlapped / (F then B) = {case['vs_back_to_back']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
