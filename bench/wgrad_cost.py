"""Cost of the B/W split: (B + W) / unsplit backward for tiny-GPT blocks and for an MoE expert layer, at
hidden 256 and 1024.

    python bench/wgrad_cost.py [--hidden 256 1024] [--tokens 512] [--blocks 2] [--repeat 7]
                               [--experts 8] [--topk 2]

For each size, on one thread, interleaved and repeated (median of each):
- unsplit: a plain backward of the same blocks built from `nn.Linear` (torch's own backward);
- BW:      our split layers with nothing deferred (what a BW node runs);
- B + W:   B (input grads; weight-grad work queued in a WeightGradStore) + W (the queue run);
- torch.distributed.pipelining's graph-surgery split (`stage_backward_input` + `stage_backward_weight`)
  on the nn.Linear blocks, for comparison.
The MoE case: `--experts` experts (fc1 [4h, h], GELU, fc2 [h, 4h]) over `--tokens` tokens routed to
`--topk` experts each (a fixed random routing, rows grouped by expert):
- unsplit: per-expert matmuls with the weights as autograd leaves (torch's own backward);
- B + W:   the grouped GEMM with the split (primuspp.backends.kernels.grouped): B the grouped dgrad of all
  experts, W the per-expert `dy_eᵀ·x_e` from the saved inputs.
The forward is not timed. Target: ours ≤ 1.2× unsplit.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from primuspp.backends.torch.gpt import Block, GPTConfig
from primuspp.backends.torch.layers import SplitLinear
from primuspp.runtime.wgrad import WeightGradStore


def _plain_copy(module: nn.Module) -> nn.Module:
    """The same blocks with every SplitLinear turned into an nn.Linear holding the same weights."""
    import copy

    plain = copy.deepcopy(module)
    for parent in plain.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, SplitLinear):
                lin = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                lin.load_state_dict(child.state_dict())
                setattr(parent, name, lin)
    return plain


def _time(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(hidden: int, tokens: int, blocks: int, repeat: int) -> dict[str, float]:
    cfg = GPTConfig(hidden=hidden, heads=max(1, hidden // 64), seq_len=128)
    torch.manual_seed(0)
    split_model = nn.Sequential(*(Block(cfg) for _ in range(blocks)))
    plain_model = _plain_copy(split_model)
    batch = max(1, tokens // cfg.seq_len)
    x = torch.randn(batch, cfg.seq_len, hidden)
    g = torch.randn(batch, cfg.seq_len, hidden)
    times: dict[str, list[float]] = {"unsplit": [], "BW": [], "B": [], "W": [], "torch B": [], "torch W": []}

    def unsplit() -> None:
        xi = x.clone().requires_grad_()
        y = plain_model(xi)
        times["unsplit"].append(_time(lambda: y.backward(g)))

    def ours_full() -> None:  # the BW node: split layers, nothing deferred
        store = WeightGradStore()
        xi = x.clone().requires_grad_()
        with store.recording():
            y = split_model(xi)
        times["BW"].append(_time(lambda: y.backward(g)))

    def ours() -> None:
        store = WeightGradStore()
        xi = x.clone().requires_grad_()
        with store.recording():
            y = split_model(xi)
        store.defer = True
        times["B"].append(_time(lambda: y.backward(g)))
        store.defer = False
        times["W"].append(_time(store.run))

    def graph_surgery() -> None:
        from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

        xi = x.clone().requires_grad_()
        y = plain_model(xi)
        out: dict = {}

        def b() -> None:
            out["groups"] = stage_backward_input([y], [g], [xi], plain_model.parameters())[1]

        times["torch B"].append(_time(b))
        times["torch W"].append(_time(lambda: stage_backward_weight(plain_model.parameters(), out["groups"])))

    for _ in range(repeat + 1):  # the first round warms up and is dropped
        for fn in (unsplit, ours_full, ours, graph_surgery):
            for m in (split_model, plain_model):
                m.zero_grad(set_to_none=True)
            fn()
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def measure_moe(hidden: int, tokens: int, experts: int, topk: int, repeat: int) -> dict[str, float]:
    from primuspp.backends.kernels.grouped import grouped_linear

    torch.manual_seed(0)
    ffn = 4 * hidden
    fc1 = [(torch.randn(ffn, hidden) / hidden**0.5).requires_grad_() for _ in range(experts)]
    fc2 = [(torch.randn(hidden, ffn) / ffn**0.5).requires_grad_() for _ in range(experts)]
    choice = torch.stack([torch.randperm(experts)[:topk] for _ in range(tokens)]).flatten()
    splits = torch.bincount(choice, minlength=experts).tolist()
    rows = tokens * topk
    x = torch.randn(rows, hidden)
    g = torch.randn(rows, hidden)
    times: dict[str, list[float]] = {"unsplit": [], "B": [], "W": []}

    def unsplit() -> None:
        xi = x.clone().requires_grad_()
        h = torch.cat([p @ w1.t() for p, w1 in zip(torch.split(xi, splits), fc1, strict=True)])
        h = torch.split(nn.functional.gelu(h), splits)  # the same layer shape as ours: one GELU
        y = torch.cat([hi @ w2.t() for hi, w2 in zip(h, fc2, strict=True)])
        times["unsplit"].append(_time(lambda: y.backward(g)))

    def ours() -> None:
        store = WeightGradStore()
        xi = x.clone().requires_grad_()
        h = nn.functional.gelu(grouped_linear(xi, fc1, splits, store))
        y = grouped_linear(h, fc2, splits, store)
        store.defer = True
        times["B"].append(_time(lambda: y.backward(g)))
        store.defer = False
        times["W"].append(_time(store.run))

    for _ in range(repeat + 1):
        for fn in (unsplit, ours):
            for w in (*fc1, *fc2):
                w.grad = None
            fn()
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--tokens", type=int, default=512, help="tokens per microbatch (batch × 128)")
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--experts", type=int, default=8, help="MoE case: experts")
    ap.add_argument("--topk", type=int, default=2, help="MoE case: experts per token")
    args = ap.parse_args()
    torch.set_num_threads(1)
    title = (
        f"B/W split cost: {args.blocks} GPT blocks, {args.tokens} tokens, 1 thread, median of {args.repeat}"
    )
    table = Table(title=title, title_justify="left")
    cols = ("hidden", "unsplit ms", "BW ms", "B ms", "W ms", "(B+W)/unsplit", "(B+W)/BW")
    for col in (*cols, "torch (B+W)/unsplit"):
        table.add_column(col, justify="right")
    for hidden in args.hidden:
        t = measure(hidden, args.tokens, args.blocks, args.repeat)
        ours = (t["B"] + t["W"]) / t["unsplit"]
        theirs = (t["torch B"] + t["torch W"]) / t["unsplit"]
        table.add_row(
            str(hidden),
            f"{t['unsplit'] * 1e3:.2f}",
            f"{t['BW'] * 1e3:.2f}",
            f"{t['B'] * 1e3:.2f}",
            f"{t['W'] * 1e3:.2f}",
            f"{ours:.3f}",
            f"{(t['B'] + t['W']) / t['BW']:.3f}",
            f"{theirs:.3f}",
        )
    Console(width=140).print(table)
    moe = Table(
        title=f"MoE expert layer: {args.experts} experts, top-{args.topk}, {args.tokens} tokens, 1 thread, "
        f"median of {args.repeat}",
        title_justify="left",
    )
    for col in ("hidden", "unsplit ms", "B ms", "W ms", "(B+W)/unsplit"):
        moe.add_column(col, justify="right")
    for hidden in args.hidden:
        t = measure_moe(hidden, args.tokens, args.experts, args.topk, args.repeat)
        moe.add_row(
            str(hidden),
            f"{t['unsplit'] * 1e3:.2f}",
            f"{t['B'] * 1e3:.2f}",
            f"{t['W'] * 1e3:.2f}",
            f"{(t['B'] + t['W']) / t['unsplit']:.3f}",
        )
    Console(width=140).print(moe)


if __name__ == "__main__":
    main()
