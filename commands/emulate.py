"""`primuspp train --emulate`: a schedule on the emulated cluster (runtime/emulate.py), and its simulation."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from primuspp.commands.console import err, out
from primuspp.commands.launching import launched, run_table, step_bar
from primuspp.config.loader import emulation_costs
from primuspp.errors import ConfigError
from primuspp.outputs import replace_dir
from primuspp.sim.engine import simulate
from primuspp.sim.iterations import simulate_iterations


def train_emulated(
    algo: str,
    pp: int | None,
    vpp: int | None,
    mb: int | None,
    steps: int,
    fwd: float | None,
    bwd: float | None,
    wgrad: float | None,
    config: Path | None,
    costs_from: Path | None,
    dump_pp_data: Path | None,
    json_: bool,
    *,
    post_validation: bool = False,
    optimizer_ms: float | None = None,
) -> None:
    if steps < 1:
        raise ConfigError(f"--steps must be >= 1 (got {steps})", key="steps")
    if post_validation and steps < 2:
        raise ConfigError(
            f"--steps {steps}: --post-validation overlaps consecutive steps; give --steps 2 or more",
            key="steps",
        )
    chosen = emulation_costs({"forward": fwd, "backward": bwd, "wgrad": wgrad}, config, costs_from)
    costs = chosen.costs
    table = run_table(algo, pp, vpp, mb, costs)
    # torch is imported here, not at CLI start-up
    from primuspp.runtime.emulate import UNIT_BYTES, EmulationSpec, dump_emulation, run_emulation

    spec = EmulationSpec(
        table,
        costs,
        steps=steps,
        unit_bytes=chosen.bytes_per_unit or UNIT_BYTES,
        post_validation=post_validation,
        optimizer_ms=optimizer_ms or 0.0,
    )
    if chosen.comm_ignored:
        err.print(
            f"note: the costs carry a p2p latency of {chosen.comm_ignored:.3g} ms; the emulated cluster's "
            "p2p is real (gloo), so it is not added",
            highlight=False,
        )
    seen: dict[int, int] = {}
    with step_bar(f"emulating {table.describe()}", steps) as update:

        def on_report(rank: int, payload: object) -> None:
            _, step, _, ms = payload  # type: ignore[misc]
            seen[step] = seen.get(step, 0) + 1
            if seen[step] == table.pp:
                update(advance=1, status=f"step {ms:,.1f} ms")

        run = launched(lambda: run_emulation(spec, on_report=on_report))
    if run is None:  # a non-zero rank under torchrun
        return
    predicted = simulate(table, costs).metrics
    doc = run.summary()
    doc["costs_source"] = chosen.source
    doc["simulated"] = {
        "step_time_ms": predicted.step_time,
        "bubble_rate": predicted.bubble_rate,
        "peak_memory": predicted.peak_memory,
        "peak_activation_bytes": [r.peak_memory * spec.unit_bytes for r in predicted.per_rank],
        "iterations": simulate_iterations(
            table, costs, steps, post_validation=post_validation, optimizer_cost=spec.optimizer_ms
        ).record(),
    }
    if dump_pp_data is not None:
        key = "--dump-pp-data"
        replace_dir(dump_pp_data, "pp_data", lambda d: dump_emulation(run, d, chosen.source), key)
        doc["pp_data"] = str(dump_pp_data)
    if json_:
        print(json.dumps(doc))
        return
    _render(doc, table.describe())


def _render(doc: dict, describe: str) -> None:
    c = doc["costs"]
    out.print(
        f"emulated {describe} on {doc['pp']} processes: compute waits the cost model ({doc['costs_source']}: "
        f"F {_ms(c['forward'])}, B {_ms(c['backward'])}, W {_ms(c['wgrad'])} ms per rank share), p2p is real",
        highlight=False,
    )
    unit = doc["unit_bytes"]
    table = Table(title_justify="left")
    memory_col = "peak activations per rank (MiB)" if unit != 1 else "peak activations per rank (bytes)"
    for col in ("step", "step time ms", "bubble", memory_col):
        table.add_column(col, justify="right")
    for s in doc["steps"]:
        peaks = s["peak_activation_bytes"]
        table.add_row(
            str(s["step"] + 1),
            f"{s['step_time_ms']:,.1f}",
            f"{s['bubble_rate']:.1%}",
            " ".join(f"{b / 2**20:.2f}" if unit != 1 else f"{b:,}" for b in peaks),
        )
    out.print(table)
    sim = doc["simulated"]
    steady = doc["steady_step_time_ms"]
    error = steady / sim["step_time_ms"] - 1 if sim["step_time_ms"] else 0.0
    out.print(
        f"simulated: step {sim['step_time_ms']:,.1f} ms, bubble {sim['bubble_rate']:.1%}, peak "
        f"{sim['peak_memory']:.4g} activation units; emulated steady step {steady:,.1f} ms ({error:+.1%})",
        highlight=False,
    )
    laps = doc["iterations"]
    if laps["post_validation"] or any(laps["optimizer_cost"]):  # asked for by a flag
        print_iterations(laps, sim["iterations"])
    if doc.get("pp_data"):
        out.print(f"per-node timings (Primus pp_data) in {doc['pp_data']}/", highlight=False)


def _ms(value: object) -> str:
    if isinstance(value, list):
        return "/".join(f"{x:.4g}" for x in value)
    return f"{value:.4g}"


def print_iterations(measured: dict, simulated: dict) -> None:
    """One line: the steady step over the run's iterations (synchronous or post-validated), measured and
    simulated (primuspp/sim/iterations.py defines both)."""
    got, want = measured["steady_step_time"], simulated["steady_step_time"]
    error = got / want - 1 if want else 0.0
    opt = measured["optimizer_cost"]
    cost = f"{opt[0]:.4g}" if len(set(opt)) == 1 else "/".join(f"{x:.4g}" for x in opt)
    out.print(
        f"{measured['count']} steps, {measured['mode']}, optimizer step {cost} ms: steady step "
        f"{got:,.1f} ms (bubble {measured['steady_bubble_rate']:.1%}), simulated {want:,.1f} ms (bubble "
        f"{simulated['steady_bubble_rate']:.1%}) ({error:+.1%})",
        highlight=False,
    )
