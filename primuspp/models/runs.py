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
from primuspp.models.parallel import RECOMPUTE, Parallel, check_parallel
from primuspp.models.project import Projection, project
from primuspp.models.spec import ModelSpec
from primuspp.schedule.limits import check_nodes, estimate_nodes
from primuspp.sim.engine import SimResult

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
