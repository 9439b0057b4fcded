"""Predicted vs measured: a simulated run next to a real (or emulated) one, with the error of each figure.

`load_runs(path)` reads a simulate output (root or one run) or a pp_data dump into `RunRecord`s;
`pair_runs(records)` pairs every measured run with the simulated one of the same algorithm, p, v and m (or,
when exactly one of each is given at the same p and m, those two); `predicted_vs_measured(sim, real)`
compares them:

- step time and bubble: the measured side is the median over its iterations, leaving out the first
  (warm-up) when there are more than two; the simulated side has one iteration;
- peak memory per rank, only when the measured run has a memory curve (Primus' older dumps hold only
  torch's peak reserved memory, not what the simulator predicts: then `has_memory` is false, the memory
  figures are left out and the note says so). Units differ (a simulation counts microbatch units unless its
  costs were measured in bytes; a real run counts bytes), so the prediction is converted with what one
  microbatch's activations of each rank weigh on each side: from the measured run, the calibration's
  per-stage rise at F summed over the rank's stages (or the median rise of the curve); from the simulation,
  its cost model's activation summed the same way.
  predicted bytes = predicted units x measured / simulated per microbatch.

error = predicted / measured - 1 (a positive error: the simulator predicted more than was measured).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primuspp.errors import ConfigError, PrimusppError
from primuspp.inputs import load_json, read_text
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import from_json
from primuspp.sim.calibrate import calibrate, rank_sums
from primuspp.sim.compare import ms as _fmt
from primuspp.sim.sources import run_dirs
from primuspp.trace.metrics import Metrics, has_memory_curve, steady, timeline_metrics
from primuspp.trace.reconstruct import read_labelled
from primuspp.trace.timeline import Timeline


@dataclass
class RunRecord:
    path: Path
    timelines: list[Timeline]
    config: dict[str, Any]

    @property
    def first(self) -> Timeline:
        return self.timelines[0]

    @property
    def simulated(self) -> bool:
        return self.first.source == "simulated"

    @property
    def name(self) -> str:
        return self.first.name or self.path.name

    @property
    def key(self) -> tuple[str, int, int, int]:
        tl = self.first
        return (tl.algorithm, tl.pp, tl.vpp, tl.micro_batches)

    def steady(self) -> list[Timeline]:
        return steady(self.timelines)


def describe_key(key: tuple[str, int, int, int]) -> str:
    algo, p, v, m = key
    return f"{algo or 'unknown schedule'} p={p} v={v} m={m}"


def load_runs(path: str | Path) -> list[RunRecord]:
    """A simulate output root (every run in it), one run directory, or a pp_data dump. A dump without
    microbatch labels (Primus' older format) is labelled from the schedule that produced it, as `viz` does;
    it then names that schedule (so that it pairs with a simulation of it)."""
    records = []
    for d in run_dirs(path):
        config: dict[str, Any] = {}
        if (d / "config.json").is_file():
            config = load_json(d / "config.json")
        timelines, _ = read_labelled(d)
        records.append(RunRecord(d, timelines, config if isinstance(config, dict) else {}))
    return records


def pair_runs(records: list[RunRecord]) -> tuple[list[tuple[RunRecord, RunRecord]], list[RunRecord]]:
    """(simulated, measured) pairs and the measured runs left without a simulated partner. The only two
    given pair when their p and m agree (a prediction of another schedule of the same pipeline)."""
    sims = [r for r in records if r.simulated]
    real = [r for r in records if not r.simulated]
    if len(sims) == 1 and len(real) == 1 and sims[0].key[1::2] == real[0].key[1::2]:
        return [(sims[0], real[0])], []
    pairs, alone = [], []
    for r in real:
        match = next((s for s in sims if s.key == r.key), None)
        if match is None:
            alone.append(r)
        else:
            pairs.append((match, r))
    return pairs, alone


def _median_metrics(timelines: list[Timeline]) -> tuple[float, float, list[float]]:
    ms: list[Metrics] = [timeline_metrics(tl) for tl in timelines]
    peaks = [statistics.median(m.per_rank[r].peak_memory for m in ms) for r in range(len(ms[0].per_rank))]
    return (
        statistics.median(m.step_time for m in ms),
        statistics.median(m.bubble_rate for m in ms),
        peaks,
    )


def _per_rank_activation(record: RunRecord) -> tuple[list[float], str]:
    """What one microbatch's activations weigh on each rank of `record`, in its memory unit; and how it
    was found."""
    pp = record.first.pp
    if record.simulated:
        try:
            costs = CostModel(**record.config["costs"])
            table = from_json(read_text(record.path / "schedule.json"), str(record.path))
            act = costs.for_placement(table.placement).activation
            return rank_sums(act, table.placement.stage_rank, pp), "its cost model"
        except (KeyError, TypeError, OSError, ValueError, PrimusppError):
            pass
    try:
        cal = calibrate(record.steady())
    except PrimusppError:
        return [1.0] * pp, "assumed 1"
    if cal.memory_per_stage and cal.stage_rank:
        return rank_sums(cal.costs.activation, cal.stage_rank, pp), "rise at F per stage"
    return [cal.activation_per_microbatch or 1.0] * pp, "median rise of the memory curve"


def _error(predicted: float, measured: float) -> float | None:
    return predicted / measured - 1 if measured else None


def predicted_vs_measured(sim: RunRecord, real: RunRecord) -> dict[str, Any]:
    """The figures side by side (see the module doc)."""
    p_step, p_bubble, p_peaks = _median_metrics(sim.timelines[-1:])
    m_step, m_bubble, m_peaks = _median_metrics(real.steady())
    unit = real.first.memory_unit
    note = ""
    if len(p_peaks) != len(m_peaks):
        raise ConfigError(
            f"{sim.path} has {len(p_peaks)} ranks but {real.path} has {len(m_peaks)}: not the same pipeline",
            key="path",
        )
    has_memory = has_memory_curve(real.first)
    if not has_memory:
        note = (
            f"not in the dump: {real.path} records no activation-memory curve (its `memory` figure, "
            f"{_fmt(max(m_peaks))} {unit} at most, is the framework's peak reserved memory), so the "
            f"predicted peak is not converted to {unit}"
        )
    elif sim.first.memory_unit == unit:
        factors = [1.0] * len(p_peaks)
        note = f"both in {unit}"
        if unit == "bytes":  # a model-aware projection against a real run: saved activations per rank
            note += (
                " (each rank's peak of saved activations; weights and optimizer state are not in the dump)"
            )
    else:
        sim_act, sim_how = _per_rank_activation(sim)
        real_act, real_how = _per_rank_activation(real)
        factors = [r / s if s else 0.0 for r, s in zip(real_act, sim_act, strict=True)]
        note = (
            f"simulated {sim.first.memory_unit} converted to {unit}: one microbatch per rank = "
            + " ".join(_fmt(x) for x in real_act)
            + f" {unit} (measured: {real_how}) / "
            + " ".join(_fmt(x) for x in sim_act)
            + f" {sim.first.memory_unit} (simulated: {sim_how})"
        )
        if unit not in ("bytes", "microbatches"):
            note += f"; {unit} in a real-run dump may include more than activations"
    metrics = [
        {"metric": "step_time", "unit": "ms", "predicted": p_step, "measured": m_step},
        {"metric": "bubble_rate", "unit": "", "predicted": p_bubble, "measured": m_bubble},
    ]
    per_rank = []
    if has_memory:
        p_bytes = [p * f for p, f in zip(p_peaks, factors, strict=True)]
        per_rank = [
            {"rank": r, "predicted": p, "measured": m, "error": _error(p, m)}
            for r, (p, m) in enumerate(zip(p_bytes, m_peaks, strict=True))
        ]
        metrics.append(
            {"metric": "peak_memory", "unit": unit, "predicted": max(p_bytes), "measured": max(m_peaks)}
        )
    for m in metrics:
        m["error"] = _error(m["predicted"], m["measured"])
    return {
        "simulated": {"name": sim.name, "path": str(sim.path)},
        "measured": {
            "name": real.name,
            "path": str(real.path),
            "source": real.first.source,
            "iterations": len(real.steady()),
            "emulated_costs": real.config.get("costs") if real.first.source == "emulated" else None,
            "emulated_costs_source": real.config.get("costs_source")
            if real.first.source == "emulated"
            else None,
        },
        "algorithm": real.first.algorithm or sim.first.algorithm,
        "pp": real.first.pp,
        "vpp": real.first.vpp,
        "micro_batches": real.first.micro_batches,
        "same_schedule": sim.key == real.key,
        "metrics": metrics,
        "per_rank_peak_memory": per_rank,
        "has_memory": has_memory,
        "memory_note": note,
    }
