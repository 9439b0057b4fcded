"""GPU check: a short megatron-core pipeline per algorithm on real ranks, gradients against one process.

    python bench/gpu_check.py                  # NCCL, one GPU per rank, dense and MoE, a few minutes
    python bench/gpu_check.py --cpu            # gloo on the CPU: a smoke test of the same path
    python bench/gpu_check.py --models dense --algos zbv dualpipe-v 1f1b --p 2 --tp 2 --sequence-parallel
    python bench/gpu_check.py --models moe --moe-experts 8 --moe-topk 2 --ep 2
    python bench/gpu_check.py --kernels te     # first: TE's delay_wgrad_compute driven by B/W (CUDA + TE)

For each model (default: dense, then MoE) and each algorithm (default: zbv and dualpipe-v, the V-shape
split schedules, and 1f1b, the unsplit baseline) every rank trains the megatron-core GPT for `--steps` steps
(SGD on Megatron DDP's grad buffers) with primuspp's installed schedule; rank 0 then runs the one-process
reference (Megatron's `forward_backward_no_pipelining` on the whole model, the same data and SGD) and the
check compares every step's loss and every gradient (TP pieces gathered; MoE experts under their global
numbers). The dense model runs on p x tp ranks; the MoE model (`--moe-experts` experts, top-`--moe-topk`
router with the aux loss, all-to-all dispatcher, grouped-GEMM experts: what `primuspp train --moe-experts N
--moe-topk K --ep E` builds) on p x ep ranks, EP spanning the data-parallel replicas as Megatron does (each
replica its own microbatches; the reference runs all of them), at TP 1. It prints per algorithm: the
largest relative loss and
gradient differences, the mean B, W, BW and FB node times, the B/W split cost ((B + W) / the unsplit
backward BW of the baseline algorithm, per layer: stages hold different numbers of layers, when it ran)
and the step time (median of the steps after the first).
Exit status 1 when a difference exceeds `--tol` (default 1e-6 on the CPU; 1e-4 on GPUs, whose kernels
may sum in another order between a stage and the whole model).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from primuspp.runtime.launch import WorkerContext, launch

BASELINE = "1f1b"


MODELS = ("dense", "moe")


@dataclass(frozen=True)
class Check:
    model: str  # "dense" or "moe"
    algorithms: tuple[str, ...]
    p: int
    tp: int
    sequence_parallel: bool
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    micro_batch_size: int
    m: int
    steps: int
    lr: float = 0.05
    ep: int = 1
    moe: tuple[tuple[str, Any], ...] = ()  # the MoE TransformerConfig fields (moe.settings); () = dense

    @property
    def world(self) -> int:
        return self.p * self.tp * self.ep


def _data(check: Check, step: int, shard: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Step `step`'s microbatches of data-parallel replica `shard`."""
    gen = torch.Generator().manual_seed(1000 * step + 100 * shard + check.m)
    out = []
    for _ in range(check.m):
        t = torch.randint(0, check.vocab, (check.micro_batch_size, check.seq_len + 1), generator=gen)
        out.append((t[:, :-1].contiguous(), t[:, 1:].contiguous()))
    return out


def _spec(check: Check) -> Any:
    from primuspp.backends.megatron.model import GPTSpec

    return GPTSpec(
        layers=check.layers,
        hidden=check.hidden,
        heads=check.heads,
        seq_len=check.seq_len,
        vocab=check.vocab,
        settings=check.moe,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_algorithm(ctx: WorkerContext, check: Check, algorithm: str) -> dict[str, Any]:
    """One algorithm on this rank: losses, gathered gradients (TP rank 0), node times, step times."""
    from megatron.core import parallel_state
    from megatron.core.pipeline_parallel import schedules

    from primuspp.algorithms.registry import get_algorithm
    from primuspp.backends.megatron import schedule as S
    from primuspp.backends.megatron import tp
    from primuspp.backends.megatron.model import forward_step, rank_chunks, stage_name
    from primuspp.backends.megatron.moe import EXPERTS_ATTR
    from primuspp.backends.megatron.train import wrap_ddp
    from primuspp.schedule.placement import make_placement

    algo = get_algorithm(algorithm)
    v = algo.vpp_default
    parallel_state.set_virtual_pipeline_model_parallel_world_size(v if v > 1 else None)
    placement = make_placement(algo.placement, check.p, v)
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    extra = {"tensor_model_parallel_size": check.tp, "sequence_parallel": check.sequence_parallel}
    chunks, ranges = rank_chunks(_spec(check), placement, pp_rank, **(extra if check.tp > 1 else {}))
    for c in chunks:
        c.to(ctx.device)
    ddps = wrap_ddp(chunks)
    schedule = S.install(algorithm, track_memory=False)
    fb = schedules.get_forward_backward_func()
    out: dict[str, Any] = {"losses": [], "grads": [], "step_ms": [], "nodes": {}}
    try:
        for step in range(check.steps):
            for d in ddps:
                d.zero_grad_buffer()
            data = _data(check, step, parallel_state.get_data_parallel_rank())
            iters = [iter(data) for _ in ddps]
            _sync(ctx.device)
            t0 = time.perf_counter()
            store = fb(
                forward_step_func=forward_step,
                data_iterator=iters if len(ddps) > 1 else iters[0],
                model=ddps,
                num_microbatches=check.m,
                seq_length=check.seq_len,
                micro_batch_size=check.micro_batch_size,
            )
            _sync(ctx.device)
            out["step_ms"].append((time.perf_counter() - t0) * 1000)
            # this replica's share of the mean over all replicas' microbatches (EP folds in data parallelism)
            out["losses"].append(sum(float(x["lm loss"]) for x in store) / check.m / check.ep)
            grads: dict[str, torch.Tensor] = {}
            for d, r in zip(ddps, ranges, strict=True):
                mine = {n: p.main_grad.detach().clone() for n, p in d.module.named_parameters()}
                experts = getattr(d.module, EXPERTS_ATTR, (0, 0))
                grads.update(
                    {stage_name(n, r, experts): g.cpu() for n, g in tp.gather(d.module, mine).items()}
                )
            out["grads"].append(grads)
            if step > 0 or check.steps == 1:
                for iv in schedule.last_step.intervals:  # type: ignore[union-attr]
                    out["nodes"].setdefault(iv.kind, []).append(iv.end - iv.start)
            with torch.no_grad():
                for d in ddps:
                    for p in d.module.parameters():
                        p.add_(p.main_grad, alpha=-check.lr)
    finally:
        S.uninstall()
    if parallel_state.get_tensor_model_parallel_rank() != 0:
        out["losses"], out["grads"] = [], []
    return out


def reference(check: Check, device: torch.device) -> dict[str, Any]:
    """One process, the whole model, Megatron's no-pipelining schedule, the same data and SGD."""
    from megatron.core.pipeline_parallel import schedules

    from primuspp.backends.megatron import tp
    from primuspp.backends.megatron.model import forward_step, whole_model

    with tp.solo():
        model = whole_model(_spec(check)).to(device)
        out: dict[str, Any] = {"losses": [], "grads": []}
        for step in range(check.steps):
            model.zero_grad()
            data = [mb for shard in range(check.ep) for mb in _data(check, step, shard)]
            store = schedules.forward_backward_no_pipelining(
                forward_step_func=forward_step,
                data_iterator=iter(data),
                model=[model],
                num_microbatches=check.m * check.ep,
                seq_length=check.seq_len,
                micro_batch_size=check.micro_batch_size,
            )
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            out["losses"].append(sum(float(x["lm loss"]) for x in store) / (check.m * check.ep))
            out["grads"].append({n: g.cpu() for n, g in grads.items()})
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.add_(grads[n], alpha=-check.lr)
    return out


def worker(ctx: WorkerContext, check: Check) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    from primuspp.backends.megatron.train import setup_parallel

    setup_parallel(check.p, 1, ctx.device, tp=check.tp, ep=check.ep)
    results = {a: run_algorithm(ctx, check, a) for a in check.algorithms}
    return {"results": results, "reference": reference(check, ctx.device) if ctx.rank == 0 else None}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(b.abs().max())
    diff = float((a.double() - b.double()).abs().max())
    return diff / scale if scale > 0 else diff


def compare(per_rank: list[dict[str, Any]], want: dict[str, Any]) -> tuple[float, float, int]:
    """Largest relative loss and gradient differences against the reference, and tensors compared."""
    steps = len(want["losses"])
    loss = max(
        abs(sum(r["losses"][i] for r in per_rank if r["losses"]) - want["losses"][i]) / abs(want["losses"][i])
        for i in range(steps)
    )
    grad, tensors = 0.0, 0
    for i in range(steps):
        got: dict[str, torch.Tensor] = {}
        for r in per_rank:
            if r["grads"]:
                got.update(r["grads"][i])
        missing = set(want["grads"][i]) - set(got)
        if missing:
            return loss, float("inf"), tensors
        for name, g in want["grads"][i].items():
            grad = max(grad, _rel(got[name], g))
            tensors += 1
    return loss, grad, tensors


def summarise(check: Check, gathered: list[dict[str, Any]], tol: float) -> tuple[list[dict[str, Any]], bool]:
    from primuspp.algorithms.registry import get_algorithm

    want = gathered[0]["reference"]
    rows, ok = [], True
    baseline_bw = None
    for algorithm in check.algorithms:
        per_rank = [g["results"][algorithm] for g in gathered]
        loss, grad, tensors = compare(per_rank, want)
        nodes: dict[str, list[float]] = {}
        for r in per_rank:
            for kind, times in r["nodes"].items():
                nodes.setdefault(kind, []).extend(times)
        mean = {k: statistics.fmean(v) for k, v in nodes.items() if v}
        steps = [max(r["step_ms"][i] for r in per_rank) for i in range(check.steps)]
        per_layer = check.p * get_algorithm(algorithm).vpp_default / check.layers  # 1 / layers per stage
        if algorithm == BASELINE and "BW" in mean:
            baseline_bw = mean["BW"] * check.p / check.layers
        passed = loss <= tol and grad <= tol
        ok &= passed
        rows.append(
            {
                "model": check.model,
                "algorithm": algorithm,
                "loss_diff": loss,
                "grad_diff": grad,
                "tensors": tensors,
                "B_ms": mean.get("B"),
                "W_ms": mean.get("W"),
                "BW_ms": mean.get("BW"),
                "FB_ms": mean.get("FB"),
                "step_ms": statistics.median(steps[1:] or steps),
                "passed": passed,
                "per_layer": per_layer,
            }
        )
    for row in rows:
        b, w = row["B_ms"], row["W_ms"]
        per_layer = row.pop("per_layer")
        split = b is not None and w is not None and baseline_bw
        row["split_cost"] = (b + w) * per_layer / baseline_bw if split else None
    return rows, ok


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (smoke test) instead of NCCL")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="default: both")
    ap.add_argument("--algos", nargs="+", default=["zbv", "dualpipe-v", BASELINE])
    ap.add_argument("--p", type=int, default=2, help="pipeline ranks")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per pipeline rank (dense model)")
    ap.add_argument("--sequence-parallel", action="store_true")
    ap.add_argument("--moe-experts", type=int, default=8, help="MoE model: experts per layer")
    ap.add_argument("--moe-topk", type=int, default=2, help="MoE model: experts per token")
    ap.add_argument(
        "--moe-ffn", type=int, default=None, help="MoE model: expert FFN size (default 4 x hidden)"
    )
    ap.add_argument(
        "--ep", type=int, default=None, help="MoE model: expert-parallel ranks (default 2 GPU, 1 CPU)"
    )
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=None, help="default 1024 (GPU), 64 (CPU)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=None, help="default 1024 (GPU), 32 (CPU)")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--mb", type=int, default=8, help="microbatches per step")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tol", type=float, default=None, help="default 1e-6 (CPU), 1e-4 (GPU)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument(
        "--kernels",
        choices=("torch", "te"),
        default="torch",
        help="te: first check Transformer Engine's Linear and GroupedLinear with delay_wgrad_compute driven "
        "by primuspp's B/W nodes (te_wgrad.py) against TE without the deferral",
    )
    return ap.parse_args(argv)


def _te_check(tol: float) -> list[dict[str, Any]]:
    """`--kernels te`: TE's own deferral through primuspp's weight-grad store, one row per case."""
    return [{"case": name, "grad_diff": diff, "passed": diff <= tol} for name, diff in _te_module_check()]


def _te_module_check(device: str = "cuda") -> list[tuple[str, float]]:
    """Transformer Engine's `Linear` and `GroupedLinear` with `delay_wgrad_compute`, driven through a
    weight-grad store as B then W and as BW, against the same modules without the deferral: per case, the
    largest relative difference of any parameter gradient (`--kernels te`). Needs TE."""
    import torch
    import transformer_engine.pytorch as te

    from primuspp.backends.megatron.te_wgrad import attach
    from primuspp.runtime.wgrad import WeightGradStore

    rows = []
    for kind in ("Linear", "GroupedLinear"):
        for defer in (True, False):
            torch.manual_seed(0)
            kwargs: dict[str, Any] = {"params_dtype": torch.float32, "device": device}
            if kind == "Linear":
                delayed = te.Linear(256, 512, delay_wgrad_compute=True, **kwargs)
                reference = te.Linear(256, 512, delay_wgrad_compute=False, **kwargs)
                extra: tuple[Any, ...] = ()
            else:
                delayed = te.GroupedLinear(2, 256, 512, delay_wgrad_compute=True, **kwargs)
                reference = te.GroupedLinear(2, 256, 512, delay_wgrad_compute=False, **kwargs)
                extra = ([96, 32],)
            reference.load_state_dict(delayed.state_dict())
            attach([delayed])
            x = torch.randn(128, 256, device=device)
            store = WeightGradStore()
            with store.recording():
                y = delayed(x, *extra)
            store.defer = defer
            y.square().sum().backward()
            store.defer = False
            queued = len(store)
            store.run()
            reference(x, *extra).square().sum().backward()
            diff = 0.0
            for p, q in zip(delayed.parameters(), reference.parameters(), strict=True):
                if q.grad is None:
                    continue
                if p.grad is None:
                    diff = float("inf")
                    continue
                diff = max(diff, float((p.grad - q.grad).norm() / q.grad.norm().clamp_min(1e-30)))
            node = f"B then W ({queued} queued)" if defer else "BW"
            rows.append((f"te.{kind} {node}", diff))
    return rows


def _checks(args: argparse.Namespace) -> list[Check]:
    """One Check per model; ConfigError (one line) for flags that cannot run."""
    from primuspp.backends.megatron import moe
    from primuspp.errors import ConfigError

    models = list(dict.fromkeys(args.models))
    ep = args.ep if args.ep is not None else (1 if args.cpu else 2)
    if args.sequence_parallel and args.tp <= 1:
        raise ConfigError("--sequence-parallel needs --tp > 1", key="sequence-parallel")
    if "moe" in models:
        moe.check(args.moe_experts, args.moe_topk, ep, args.moe_ffn)
        if args.tp > 1:
            raise ConfigError(
                f"--tp {args.tp}: the check's MoE model runs at TP 1; with --tp pass --models dense", key="tp"
            )
    checks = []
    for model in models:
        checks.append(
            Check(
                model=model,
                algorithms=tuple(args.algos),
                p=args.p,
                tp=args.tp,
                sequence_parallel=args.sequence_parallel,
                layers=args.layers,
                hidden=args.hidden or (64 if args.cpu else 1024),
                heads=args.heads,
                seq_len=args.seq_len or (32 if args.cpu else 1024),
                vocab=args.vocab,
                micro_batch_size=args.micro_batch_size,
                m=args.mb,
                steps=args.steps,
                ep=ep if model == "moe" else 1,
                moe=moe.settings(args.moe_experts, args.moe_topk, args.moe_ffn) if model == "moe" else (),
            )
        )
    if not args.cpu:
        world = max(c.world for c in checks)
        if torch.cuda.device_count() < world:
            raise ConfigError(
                f"{world} ranks (--p {args.p} x --tp {args.tp}, or x --ep {ep} for the MoE model) need "
                f"{world} GPUs; {torch.cuda.device_count()} visible",
                key="p",
            )
    return checks


def main(argv: list[str] | None = None) -> int:
    from primuspp.errors import ConfigError

    args = _args(argv)
    if not args.cpu and not torch.cuda.is_available():
        print("error: --cpu not given and no CUDA device is available", file=sys.stderr)
        return 2
    try:
        checks = _checks(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tol = args.tol if args.tol is not None else (1e-6 if args.cpu else 1e-4)
    rows, ok = [], True
    if args.kernels == "te":
        from primuspp.backends.megatron import te_wgrad

        why = te_wgrad.unsupported()
        if why is None and args.cpu:
            why = "it runs on CUDA only (drop --cpu)"
        if why is not None:
            print(f"error: --kernels te: {why}", file=sys.stderr)
            return 2
        te_rows = _te_check(tol)
        ok &= all(r["passed"] for r in te_rows)
        if not args.json:
            for r in te_rows:
                verdict = "ok" if r["passed"] else f"FAILED (tol {tol:g})"
                print(f"{r['case']:<40} grad diff {r['grad_diff']:.1e}  {verdict}")
    else:
        te_rows = []
    for check in checks:
        gathered = launch(worker, check.world, check, backend="gloo" if args.cpu else "nccl")
        assert gathered is not None
        got, passed = summarise(check, gathered, tol)
        rows += got
        ok &= passed
    if args.json:
        import json

        device = "cpu" if args.cpu else torch.cuda.get_device_name(0)
        print(json.dumps({"device": device, "rows": rows, **({"te": te_rows} if te_rows else {})}))
        return 0 if ok else 1
    device = "CPU (gloo)" if args.cpu else f"{torch.cuda.get_device_name(0)} (NCCL)"

    def f(x: float | None, spec: str = "8.3f") -> str:
        return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))

    for check in checks:
        if check.model == "moe":
            fields = dict(check.moe)
            model = f"MoE {fields['num_moe_experts']} experts top-{fields['moe_router_topk']} ep={check.ep}"
        else:
            model = f"dense tp={check.tp}{' sp' if check.sequence_parallel else ''}"
        print(
            f"gpu_check on {device}: {model}, p={check.p}, {check.layers} layers, hidden {check.hidden}, "
            f"seq {check.seq_len}, m={check.m}, {check.steps} steps"
        )
        print(
            f"{'algorithm':<12} {'loss diff':>10} {'grad diff':>10} {'B ms':>8} {'W ms':>8} {'BW ms':>8} "
            f"{'FB ms':>8} {'(B+W)/BW':>9} {'step ms':>9}  check"
        )
        for r in rows:
            if r["model"] != check.model:
                continue
            print(
                f"{r['algorithm']:<12} {r['loss_diff']:>10.1e} {r['grad_diff']:>10.1e} {f(r['B_ms'])} "
                f"{f(r['W_ms'])} {f(r['BW_ms'])} {f(r['FB_ms'])} {f(r['split_cost'], '9.2f')} "
                f"{r['step_ms']:>9.1f}  {'ok' if r['passed'] else f'FAILED (tol {tol:g})'}"
            )
    print(f"(B+W)/BW: a split backward against {BASELINE}'s unsplit one, per layer; tolerance {tol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
