"""Fit a GPU profile's efficiencies to a measured run (`--costs-from DIR` with `--model`).

The projection's time of a rank's F, B and W per microbatch is a sum of three parts, each linear in one
factor of the profile: GEMMs (G, over the `gemm` efficiency), the other compute (O: the attention core over
the `attention` efficiency plus the memory-bound norms and activations over the HBM bandwidth) and
collectives (C, left as they are). Each part is found by projecting with the other two switched off. The
measured run gives each rank's median F, B and W (sim.calibrate; a run without a separate W gives B + W),
and a least-squares fit on the relative errors of

    measured ≈ a·G + b·O + C + n·o     (per rank and per kind: F, B, W — or F and B + W)

gives a and b: the GEMM efficiencies are divided by a, the attention efficiency and the HBM bandwidth by b
(when the fit is degenerate, one common factor); o, the profile's per-node overhead (`overhead.compute`;
n: the rank's nodes of that kind per microbatch), when the run tells it apart (else the profile's stays).
An efficiency that would pass 1 raises the peak instead
(the times stay the same; MFU is then against the fitted peak). The p2p latency of the link between
pipeline neighbours is set so that one activation's transfer takes the measured hand-off delay.

The measured run must be of the same model and sizes as the flags say (micro-batch size, sequence length,
layout); its algorithm, p, v and m are read from it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from primuspp.errors import ConfigError
from primuspp.models.costs import p2p_ms
from primuspp.models.hardware import Hardware, Overhead
from primuspp.models.parallel import Parallel
from primuspp.models.project import stage_plan
from primuspp.models.spec import ModelSpec
from primuspp.sim.calibrate import calibrate, rank_sums

#: "switched off": a factor so large that the part it divides vanishes from the projection
_OFF = 1e30


@dataclass(frozen=True)
class Fit:
    hardware: Hardware
    gemm_factor: float  # a: measured GEMM time / projected
    other_factor: float  # b: measured other compute / projected
    p2p_ms: float  # the measured hand-off delay the latency was set from
    rms_error: float  # of the fitted per-rank F/B/W against the measured ones (relative)
    source: str
    schedule: str

    def describe(self) -> str:
        hw = self.hardware
        e = hw.efficiency
        gemm = "/".join(f"{f:.3g}" for _, f in e.gemm)
        peak = hw.peak_flops.get("fp32", hw.peak_flops["bf16"])
        return (
            f"{hw.name} calibrated on {self.source} ({self.schedule}): GEMM efficiency {gemm}, attention "
            f"{e.attention:.3g}, memory bandwidth {hw.hbm_bandwidth / 1e9:.3g} GB/s, peak "
            f"{peak / 1e9:.4g} GFLOP/s; overhead {hw.overhead.compute * 1e3:.3g} ms per compute node; "
            f"p2p {self.p2p_ms:.3g} ms; "
            f"fit error {self.rms_error:.1%} rms over the ranks' F, B, W"
        )


def _variant(hw: Hardware, gemm: bool, other: bool, comm: bool) -> Hardware:
    """`hw` with the parts not wanted switched off, and no per-node overhead (model_copy: no validation,
    the values are internal)."""
    eff = hw.efficiency
    new_eff = eff.model_copy(
        update={
            "gemm": eff.gemm if gemm else tuple((s, _OFF) for s, _ in eff.gemm),
            "attention": eff.attention if other else _OFF,
            "comm": eff.comm if comm else _OFF,
        }
    )
    links = {}
    if not comm:
        for name in ("intra_node", "inter_node"):
            links[name] = getattr(hw, name).model_copy(update={"latency": 0.0})
    return hw.model_copy(
        update={
            "overhead": Overhead(),  # the fit's own unknown: never inside G, O or C
            "efficiency": new_eff,
            "hbm_bandwidth": hw.hbm_bandwidth if other else hw.hbm_bandwidth * _OFF,
            **links,
        }
    )


def _kinds(spec, hw, par, algorithm, layout) -> list[list[float]]:
    """Per rank [F, B, W, stages] (ms; the rank's stage count) projected on `hw`."""
    plan = stage_plan(spec, hw, par, algorithm, layout)
    c, pl = plan.costs, plan.placement
    ranks = [pl.stage_rank[s] for s in range(pl.num_stages)]
    f = rank_sums(c.forward, ranks, par.pp)
    b = rank_sums(c.backward, ranks, par.pp)
    w = rank_sums(c.wgrad, ranks, par.pp)
    return [[f[r], b[r], w[r], float(ranks.count(r))] for r in range(par.pp)]


def _fit(g, o, n, rest, y) -> tuple[float, float, float]:
    """(a, b, o) minimising sum(((a g + b o + n o + rest - y) / y)^2): the per-node overhead o too when the
    run tells it apart and all three come out positive, else o = 0 (and one common factor for a and b
    when their fit is degenerate)."""
    import numpy as np

    y = np.asarray(y, dtype=float)
    keep = y > 0
    cols = np.array([g, o, n], dtype=float)[:, keep] / y[keep]
    t = (y - np.asarray(rest, dtype=float))[keep] / y[keep]

    def positive(m):
        if np.linalg.matrix_rank(m, tol=1e-9 * float(np.abs(m).max(initial=0.0))) < m.shape[1]:
            return None
        x = np.linalg.lstsq(m, t, rcond=None)[0]
        return tuple(float(v) for v in x) if (x > 0).all() else None

    ab = positive(cols[:2].T)
    if ab is None:  # one factor k for both: min sum((k (g + o) - t)^2)
        s = cols[0] + cols[1]
        if float(s @ s) <= 0:
            raise ConfigError("--costs-from: the projection has no compute time to fit", key="--costs-from")
        k = float(s @ t) / float(s @ s)
        if k <= 0:
            raise ConfigError(
                "--costs-from: the measured run is faster than the collectives alone", key="--costs-from"
            )
        ab = (k, k)
    abo = positive(cols.T) if len(t) >= 4 else None
    return abo or (*ab, 0.0)


def fit_hardware(
    spec: ModelSpec,
    hw: Hardware,
    par: Parallel,
    algorithm: str,
    measured: list[list[float | None]],
    comm_ms: float | None,
    layout: str = "balanced",
    source: str = "a measured run",
) -> Fit:
    """Fit `hw` so that `par` under `algorithm` projects the `measured` per-rank [F, B, W] ms (W None: the
    run has no separate W; then F and B + W are fitted). `comm_ms`: the measured p2p hand-off delay."""
    full = _kinds(spec, _variant(hw, True, True, True), par, algorithm, layout)
    gemm = _kinds(spec, _variant(hw, True, False, False), par, algorithm, layout)
    other = _kinds(spec, _variant(hw, False, True, False), par, algorithm, layout)
    g, o, n, rest, y = [], [], [], [], []
    for r in range(par.pp):
        m = measured[r]
        groups = [(0,), (1,), (2,)] if m[2] is not None else [(0,), (1, 2)]
        for idx in groups:
            meas = sum(float(m[i] or 0.0) for i in idx)
            if meas <= 0:
                continue
            gg = sum(gemm[r][i] for i in idx)
            oo = sum(other[r][i] for i in idx)
            g.append(gg)
            o.append(oo)
            n.append(full[r][3])  # one node per stage of the rank: F, B, W or the fused BW
            rest.append(max(sum(full[r][i] for i in idx) - gg - oo, 0.0))
            y.append(meas)
    if not y:
        raise ConfigError(f"--costs-from {source}: no F/B/W time measured", key="--costs-from")
    a, b, per_node = _fit(g, o, n, rest, y)
    fitted = [a * gi + b * oi + ri + ni * per_node for gi, oi, ri, ni in zip(g, o, rest, n, strict=True)]
    rms = (sum((f / yi - 1) ** 2 for f, yi in zip(fitted, y, strict=True)) / len(y)) ** 0.5
    new = _scaled(hw, a, b)
    if per_node > 0:
        new = new.model_copy(update={"overhead": new.overhead.model_copy(update={"compute": per_node / 1e3})})
    if comm_ms is not None and comm_ms > 0:
        new = _with_p2p(spec, new, par, comm_ms)
    schedule = f"{algorithm} p={par.pp} v={par.vpp} m={par.micro_batches}"
    return Fit(new, a, b, comm_ms or 0.0, rms, source, schedule)


def _scaled(hw: Hardware, a: float, b: float) -> Hardware:
    eff = hw.efficiency
    gemm = tuple((s, f / a) for s, f in eff.gemm)
    attention = eff.attention / b
    top = max([f for _, f in gemm] + [attention, 1.0])  # > 1: raise the peak, keep the times
    peaks = {k: v * top for k, v in hw.peak_flops.items()}
    new_eff = eff.model_copy(
        update={"gemm": tuple((s, f / top) for s, f in gemm), "attention": attention / top}
    )
    data = hw.model_dump()
    data.update(
        peak_flops=peaks,
        hbm_bandwidth=hw.hbm_bandwidth / b,
        efficiency=new_eff.model_dump(),
    )
    return Hardware.model_validate(data)  # validated: the fit stays a profile a user could write


def _with_p2p(spec: ModelSpec, hw: Hardware, par: Parallel, comm_ms: float) -> Hardware:
    """The link between pipeline neighbours (`p2p_ms`'s) with the latency that makes one transfer take
    `comm_ms`."""
    link = hw.link(2, spread=par.gpus // par.pp)
    name = "intra_node" if link is hw.intra_node else "inter_node"
    latency = max((comm_ms - p2p_ms(spec, par, hw)) / 1e3 + link.latency, 0.0)
    return hw.model_copy(update={name: link.model_copy(update={"latency": latency})})


def calibrate_hardware(
    spec: ModelSpec, hw: Hardware, par: Parallel, path: Path, layout: str = "balanced"
) -> Fit:
    """Fit `hw` on the measured run in `path` (a pp_data dump): its schedule with `par`'s sizes."""
    from primuspp.sim.fidelity import load_runs

    records = load_runs(path)
    real = records[0]
    algorithm, pp, vpp, m = real.key
    if not algorithm:
        raise ConfigError(f"--costs-from {path}: the run does not name its algorithm", key="--costs-from")
    cal = calibrate(real.steady())  # the run as read once (load_runs labels it where it has no labels)
    costs = cal.portable()
    run_par = replace(par, pp=pp, vpp=vpp, global_batch_size=par.micro_batch_size * par.dp * m)
    f = rank_sums(costs.forward, list(range(pp)), pp)
    b = rank_sums(costs.backward, list(range(pp)), pp)
    w = rank_sums(costs.wgrad, list(range(pp)), pp)
    measured: list[list[float | None]] = [
        [f[r], b[r] + w[r] if cal.bw_split_assumed else b[r], None if cal.bw_split_assumed else w[r]]
        for r in range(pp)
    ]
    return fit_hardware(spec, hw, run_par, algorithm, measured, cal.costs.comm, layout, str(real.path))
