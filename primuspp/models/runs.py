"""Model-aware runs of `primuspp simulate` and `compare`: one parallel configuration of a real model on a
GPU profile, projected for one or several algorithms (time in ms, memory in bytes).

`model_parallel` turns the command-line sizes into a checked `Parallel`; `model_runs` projects every
algorithm (a sweep lists what an algorithm refuses, a named algorithm's refusal is an error) and names each
run as `simulate` does (the algorithm, `-v<vpp>` when `--vpp` was given).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from primuspp.algorithms.registry import get_algorithm
from primuspp.errors import ConfigError, PrimusppError
from primuspp.models.hardware import Hardware
from primuspp.models.memory import optimizer_bytes_per_param
from primuspp.models.parallel import RECOMPUTE, Parallel, check_parallel
from primuspp.models.project import Projection, project
from primuspp.models.spec import ModelSpec
from primuspp.schedule.limits import check_nodes, estimate_nodes
from primuspp.sim.engine import SimResult

#: the `--overlap` names and the `Parallel` switches they set
OVERLAP_FIELDS = {
    "grad-reduce": "overlap_grad_reduce",
    "param-gather": "overlap_param_gather",
    "tp": "tp_comm_overlap",
    "ep": "ep_comm_overlap",
}
#: bytes per activation element by `--dtype` (fp32: `primuspp train` on CPU)
DTYPE_BYTES = {"bf16": 2, "fp8": 2, "fp32": 4}


@dataclass(frozen=True)
class ModelRun:
    name: str
    projection: Projection

    @property
    def result(self) -> SimResult:
        """The simulated run, named, its timeline in ms and bytes (what `write_result` writes)."""
        res = self.projection.result
        assert res is not None
        tl = replace(res.timeline, name=self.name, memory_unit="bytes")
        return replace(res, name=self.name, timeline=tl)

    @property
    def key(self) -> tuple[str, int, int, int]:
        p = self.projection.par
        return (self.projection.algorithm, p.pp, p.vpp, p.micro_batches)

    def record(self) -> dict[str, Any]:
        """The `--json` record: the planner's result record with the run's name, the simulator's steady
        bubble and peak (bytes)."""
        res = self.projection.result
        assert res is not None
        return {
            "name": self.name,
            **self.projection.record(),
            "steady_bubble_rate": res.metrics.steady_bubble_rate,
        }


def model_parallel(
    spec: ModelSpec,
    hw: Hardware,
    *,
    tp: int | None,
    pp: int,
    ep: int | None,
    gpus: int | None,
    cp: int | None = None,
    micro_batch_size: int | None,
    global_batch_size: int | None,
    micro_batches: int | None,
    default_micro_batches: int,
    seq_len: int,
    recompute: str,
    sequence_parallel: bool = True,
    dtype: str = "bf16",
    sp_wgrad: str = "regather",
    training: dict[str, Any] | None = None,
) -> Parallel:
    """The configuration the flags describe. DP = --gpus / (TP x PP) (1 without --gpus); the global batch
    is --global-batch-size, else micro-batch size x DP x m (m: --mb, else `default_micro_batches`); both
    given must agree. Raises ConfigError naming the flag."""
    tp, ep, cp, mbs = tp or 1, ep or 1, cp or 1, micro_batch_size or 1
    checks = (("--tp", tp), ("--ep", ep), ("--cp", cp), ("--micro-batch-size", mbs), ("--seq-len", seq_len))
    for key, value in checks:
        if value < 1:
            raise ConfigError(f"{key} {value}: must be >= 1", key=key)
    if recompute not in RECOMPUTE:
        allowed = ", ".join(RECOMPUTE)
        raise ConfigError(f"--recompute {recompute}: expected one of {allowed}", key="--recompute")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"--dtype {dtype}: expected one of {', '.join(DTYPE_BYTES)}", key="--dtype")
    hw.peak(dtype)
    dp = 1
    if gpus is not None:
        if gpus < 1 or gpus % (tp * cp * pp):
            what = f"TP x CP x PP ({tp} x {cp} x {pp})" if cp > 1 else f"TP x PP ({tp} x {pp})"
            raise ConfigError(f"--gpus {gpus}: not divisible by {what}", key="--gpus")
        dp = gpus // (tp * cp * pp)
    if global_batch_size is None:
        global_batch_size = mbs * dp * (micro_batches or default_micro_batches)
    par = Parallel(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        cp=cp,
        micro_batch_size=mbs,
        global_batch_size=global_batch_size,
        seq_len=seq_len,
        recompute=recompute,  # type: ignore[arg-type]
        sequence_parallel=sequence_parallel,
        sp_wgrad=sp_wgrad,  # type: ignore[arg-type]
        dtype=dtype,
        dtype_bytes=DTYPE_BYTES[dtype],
        **hw.kernels(),
        **(training or {}),
    )
    if par.ep_comm_overlap and par.ep <= 1:
        raise ConfigError(
            f"--overlap ep: needs --ep > 1 (got {par.ep}: no all-to-all to hide)", key="--overlap"
        )
    check_parallel(spec, par, pp)  # what does not depend on the algorithm: TP, EP, the batch
    if micro_batches is not None and micro_batches != par.micro_batches:
        raise ConfigError(
            f"--mb {micro_batches}: the global batch {global_batch_size} / (micro-batch size {mbs} x DP "
            f"{dp}) gives {par.micro_batches} microbatches; give one of --mb, --global-batch-size",
            key="--mb",
        )
    return par


def model_runs(
    spec: ModelSpec,
    hw: Hardware,
    par: Parallel,
    algorithms: list[str],
    vpp: int | None,
    named: bool,
    layout: str = "balanced",
    first_last: tuple[int | None, int | None] | None = None,
    max_nodes: int | None = None,
) -> tuple[list[ModelRun], list[dict[str, str]]]:
    """Project `par` under each algorithm. `named`: the user named the algorithms (a refusal is an error);
    otherwise refused ones are returned as `{"name", "algorithm", "reason"}` (an error if all are)."""
    runs, refused, used = [], [], set()
    for name in algorithms:
        algo = get_algorithm(name)
        v = algo.vpp_default if vpp is None else vpp
        run_name = algo.name if vpp is None else f"{algo.name}-v{v}"
        base, k = run_name, 2
        while run_name in used:
            run_name, k = f"{base}-{k}", k + 1
        used.add(run_name)
        this = replace(par, vpp=v)
        try:
            if not algo.vpp_ok(v):
                raise ConfigError(
                    f"--vpp {v}: not allowed for {algo.name} (allowed: {algo.vpp_rule})", key="--vpp"
                )
            if max_nodes is not None:
                n = estimate_nodes(algo.placement, this.pp, v, this.micro_batches)
                what = f"run {run_name} ({algo.name}, pp={this.pp}, vpp={v}, m={this.micro_batches})"
                check_nodes(what, n, max_nodes)
            proj = project(spec, hw, this, algo.name, layout, first_last=first_last)
        except PrimusppError as e:
            if named:
                raise
            refused.append({"name": run_name, "algorithm": algo.name, "reason": str(e)})
            continue
        runs.append(ModelRun(run_name, proj))
    if refused and not runs:
        more = f" (and {len(refused) - 1} more runs refused)" if len(refused) > 1 else ""
        raise ConfigError(f"{refused[0]['name']}: {refused[0]['reason']}{more}", key="--algo")
    return runs, refused


def ranked(runs: list[ModelRun]) -> list[ModelRun]:
    """Those that fit in HBM first, then by step time."""
    return sorted(runs, key=lambda r: (not r.projection.fits, r.projection.step_time_ms, r.name))


def model_header(spec: ModelSpec, hw: Hardware, par: Parallel) -> dict[str, Any]:
    return {
        "model": spec.identity(),
        "gpu": hw.name,
        "assumptions": assumptions(hw, par),
        "gpus": par.gpus,
        "tp": par.tp,
        "pp": par.pp,
        "dp": par.dp,
        "ep": par.ep,
        "cp": par.cp,
        "micro_batch_size": par.micro_batch_size,
        "global_batch_size": par.global_batch_size,
        "micro_batches": par.micro_batches,
        "seq_len": par.seq_len,
        "recompute": par.recompute,
        "dtype": par.dtype,
    }


def assumptions(hw: Hardware, par: Parallel, swept: dict[str, list] | None = None) -> dict[str, Any]:
    """What a projection assumes: the batch, precision, recompute, optimizer state, overlap switches and
    the GPU profile's efficiencies with their source. `swept`: fields a sweep varies (shown as lists)."""
    e, o = hw.efficiency, hw.overhead
    doc = {
        "seq_len": par.seq_len,
        "micro_batch_size": par.micro_batch_size,
        "global_batch_size": par.global_batch_size,
        "dtype": par.dtype,
        "recompute": par.recompute,
        "recompute_num_layers": par.recompute_layers,
        "optimizer": {
            "bytes_per_param": 2 + par.main_grad_bytes + optimizer_bytes_per_param(par),
            "main_grads": "bf16" if par.main_grad_bytes == 2 else "fp32",
            "moments": "bf16" if par.moment_bytes == 2 else "fp32",
            "distributed": par.distributed_optimizer,
        },
        "overlap": {name: getattr(par, field) for name, field in OVERLAP_FIELDS.items()},
        "gpu_profile": {
            "name": hw.name,
            "source": hw.source,
            "gemm": [list(x) for x in e.gemm],
            "attention": e.attention,
            "comm": e.comm,
            "grouped_gemm": e.grouped_gemm,
            "wgrad": e.wgrad,
            "overhead_compute_s": o.compute,
            "overhead_p2p_s": o.p2p,
        },
    }
    return {**doc, **(swept or {})}


def assumption_lines(doc: dict[str, Any]) -> list[str]:
    """The `assumptions` document as two console lines (`plan` and `simulate --model` print the same)."""

    def show(v: Any) -> str:
        return "/".join(map(str, v)) if isinstance(v, list) else str(v)

    opt, g = doc["optimizer"], doc["gpu_profile"]
    recompute = show(doc["recompute"])
    if doc["recompute_num_layers"] is not None:
        recompute += f" ({doc['recompute_num_layers']} layers per part)"
    overlap = ", ".join(k for k, v in doc["overlap"].items() if v) or "none"
    where = "sharded over DP" if opt["distributed"] else "on every DP rank"
    fractions = [f for _, f in g["gemm"]]
    return [
        f"assumes: seq {doc['seq_len']}, micro-batch {show(doc['micro_batch_size'])}, global batch "
        f"{doc['global_batch_size']}, {doc['dtype']}, recompute {recompute}; optimizer "
        f"{opt['bytes_per_param']} B/param ({opt['main_grads']} main grads, {opt['moments']} moments, "
        f"{where}); overlapped: {overlap}",
        f"{g['name']} profile, {g['source']}: GEMM {min(fractions):.0%}-{max(fractions):.0%} of peak, "
        f"attention {g['attention']:.0%}, comm {g['comm']:.0%}, grouped GEMM x{g['grouped_gemm']:g}, "
        f"split W x{g['wgrad']:g}; overhead {g['overhead_compute_s'] * 1e3:g} ms per compute node, "
        f"{g['overhead_p2p_s'] * 1e3:g} ms per p2p",
    ]


def schedule_notes(records: list[dict[str, Any]]) -> list[str]:
    """One line per run that projects slower than 1f1b (by 0.5 % or more) on the same configuration, and
    each run's own notes (a budget its honest bytes pass)."""
    keys = ("tp", "cp", "pp", "ep", "dp", "micro_batch_size", "recompute")
    base = {tuple(r[k] for k in keys): r for r in records if r["algorithm"] == "1f1b"}
    lines = []
    for r in records:
        ref = base.get(tuple(r[k] for k in keys))
        # below 1f1b by more than rounding (a tie within 0.5 % is not "slower")
        if (
            ref is not None
            and r is not ref
            and r["tokens_per_s_per_gpu"] < 0.995 * ref["tokens_per_s_per_gpu"]
        ):
            ratio = r["tokens_per_s_per_gpu"] / ref["tokens_per_s_per_gpu"]
            lines.append(
                f"{r.get('name', r['algorithm'])}: projects slower than 1f1b on the same configuration "
                f"({ratio:.2f}x, {r['tokens_per_s_per_gpu']:,.0f} vs {ref['tokens_per_s_per_gpu']:,.0f} "
                "tokens/s/GPU)"
            )
        lines.extend(r.get("notes", ()))
    return list(dict.fromkeys(lines))


def comm_line(record: dict[str, Any]) -> str:
    """A result's communication per step, exposed (on the critical path) and hidden behind compute."""
    return (
        f"communication per step, ms exposed / hidden: TP+EP {record['comm_exposed_ms']:,.0f} / "
        f"{record['comm_hidden_ms']:,.0f} (its most loaded rank), DP {record['dp_sync_ms']:,.0f} / "
        f"{record['dp_hidden_ms']:,.0f}"
    )
