"""`primuspp train --emulate`: a schedule on the emulated cluster (runtime/emulate.py), and its simulation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primuspp.commands.console import err, out
from primuspp.commands.launching import run_table, step_bar
from primuspp.commands.train_checks import mib, render_footer, render_steps
from primuspp.config.loader import emulation_costs
from primuspp.errors import ConfigError
from primuspp.runtime.backend import RunSummary, TrainOptions
from primuspp.sim.engine import simulate
from primuspp.sim.iterations import MAX_ITERATIONS, simulate_iterations


class EmulateBackend:
    """`train --emulate` as a `TrainBackend`: the real runner, processes and p2p; compute waits its cost."""

    name = "emulate"

    def __init__(self) -> None:
        self.chosen: Any = None
        self.describe = ""

    def check(self, opts: TrainOptions) -> Any:
        from primuspp.commands.train_checks import check_outputs, refuse, refuse_megatron_only

        refuse_megatron_only(opts, "the emulated cluster")
        refuse(opts, ("verify", "inject_fault", "clip_grad"), "the emulated cluster computes nothing")
        steps = 3 if opts.steps is None else opts.steps
        check_outputs(opts.dump_pp_data)
        if steps > MAX_ITERATIONS:  # laid out by sim.iterations: refused before the table is built
            raise ConfigError(
                f"--steps {steps}: the emulated cluster runs at most {MAX_ITERATIONS:,}", key="steps"
            )
        if opts.post_validation and steps < 2:
            raise ConfigError(
                f"--steps {steps}: --post-validation overlaps consecutive steps; give --steps 2 or more",
                key="steps",
            )
        given = {"forward": opts.fwd, "backward": opts.bwd, "wgrad": opts.wgrad}
        self.chosen = chosen = emulation_costs(given, opts.config, opts.costs_from)
        table = run_table(opts.algo, opts.pp, opts.vpp, opts.mb, chosen.costs)
        # torch is imported here, not at CLI start-up
        from primuspp.runtime.emulate import UNIT_BYTES, EmulationSpec

        self.describe = table.describe()
        return EmulationSpec(
            table,
            chosen.costs,
            steps=steps,
            unit_bytes=chosen.bytes_per_unit or UNIT_BYTES,
            post_validation=opts.post_validation,
            optimizer_ms=opts.optimizer_cost or 0.0,
        )

    def launch(self, spec: Any) -> Any:
        from primuspp.runtime.emulate import run_emulation

        table, steps = spec.table, spec.steps
        if self.chosen.comm_ignored:
            err.print(
                f"note: the costs carry a p2p latency of {self.chosen.comm_ignored:.3g} ms; the emulated "
                "cluster's p2p is real (gloo), so it is not added",
                highlight=False,
            )
        seen: dict[int, int] = {}
        with step_bar(f"emulating {table.describe()}", steps) as update:

            def on_report(rank: int, payload: object) -> None:
                _, step, _, ms = payload  # type: ignore[misc]
                seen[step] = seen.get(step, 0) + 1
                if seen[step] == table.pp:
                    update(advance=1, status=f"step {ms:,.1f} ms")

            return run_emulation(spec, on_report=on_report)

    def summarize(self, run: Any) -> RunSummary:
        spec = run.spec
        predicted = simulate(spec.table, spec.costs).metrics
        summary = run.summary()
        summary.extra["costs_source"] = self.chosen.source
        summary.extra["simulated"] = {
            "step_time_ms": predicted.step_time,
            "pipeline_ms": predicted.step_time,
            "bubble_rate": predicted.bubble_rate,
            "peak_memory": predicted.peak_memory,
            "peak_activation_bytes": [r.peak_memory * spec.unit_bytes for r in predicted.per_rank],
            "iterations": simulate_iterations(
                spec.table,
                spec.costs,
                spec.steps,
                post_validation=spec.post_validation,
                optimizer_cost=spec.optimizer_ms,
            ).record(),
        }
        return summary

    def dump(self, run: Any, directory: Path) -> None:
        from primuspp.runtime.emulate import dump_emulation

        dump_emulation(run, directory, self.chosen.source)

    def render(self, summary: RunSummary) -> None:
        _render(summary.to_dict(), self.describe)


def _render(doc: dict, describe: str) -> None:
    c = doc["costs"]
    out.print(
        f"emulated {describe} on {doc['pp']} processes: compute waits the cost model ({doc['costs_source']}: "
        f"F {_ms(c['forward'])}, B {_ms(c['backward'])}, W {_ms(c['wgrad'])} ms per rank share), p2p is real",
        highlight=False,
    )
    unit = doc["unit_bytes"]
    memory_col = "peak activations per rank (MiB)" if unit != 1 else "peak activations per rank (bytes)"
    render_steps(
        ("step", "step time ms", "pipeline ms", "bubble", memory_col),
        [
            (
                str(s["step"] + 1),
                f"{s['step_time_ms']:,.1f}",
                f"{s['pipeline_ms']:,.1f}",
                f"{s['bubble_rate']:.1%}",
                " ".join(mib(b) if unit != 1 else f"{b:,}" for b in s["peak_activation_bytes"]),
            )
            for s in doc["steps"]
        ],
    )
    sim = doc["simulated"]
    steady = doc["steady_pipeline_ms"]  # the schedule's span: what the simulator predicts
    error = steady / sim["pipeline_ms"] - 1 if sim["pipeline_ms"] else 0.0
    out.print(
        f"simulated: step {sim['pipeline_ms']:,.1f} ms, bubble {sim['bubble_rate']:.1%}, peak "
        f"{sim['peak_memory']:.4g} activation units; emulated steady pipeline {steady:,.1f} ms "
        f"({error:+.1%})",
        highlight=False,
    )
    laps = doc["iterations"]
    if laps["post_validation"] or any(laps["optimizer_cost"]):  # asked for by a flag
        print_iterations(laps, sim["iterations"])
    render_footer(doc)


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
