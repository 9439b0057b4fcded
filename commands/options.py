"""Options shared by several verbs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from primuspp.commands.console import err

if TYPE_CHECKING:
    from primuspp.config.loader import Overrides

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Simulation YAML (ours or Primus' pp_simulation.yaml).")
]
AlgoOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--algo", "-a", help="Algorithm name or alias, or file:PATH (repeatable). See `primuspp algorithms`."
    ),
]
PpOpt = Annotated[int | None, typer.Option("--pp", help="Pipeline ranks p.")]
VppOpt = Annotated[int | None, typer.Option("--vpp", help="Chunks per rank v (algorithms that allow it).")]
MbOpt = Annotated[int | None, typer.Option("--mb", "--micro-batches", help="Microbatches per iteration m.")]
FwdOpt = Annotated[
    float | None, typer.Option("--fwd", help="Forward time of one rank's share per microbatch.")
]
BwdOpt = Annotated[float | None, typer.Option("--bwd", help="Input-grad (B) time; a full backward is B + W.")]
WgradOpt = Annotated[float | None, typer.Option("--wgrad", help="Weight-grad (W) time.")]
CommOpt = Annotated[float | None, typer.Option("--comm", help="Latency of one p2p transfer.")]
MemLimitOpt = Annotated[
    float | None,
    typer.Option(
        "--mem-limit", help="Per-rank activation cap in microbatch units (1 = one microbatch, whole rank)."
    ),
]
CostsFromOpt = Annotated[
    Path | None,
    typer.Option("--costs-from", help="Measure the cost model from a pp_data dump or result directory."),
]
ShowOpt = Annotated[
    bool,
    typer.Option("--show", help="Draw each run's timeline in the terminal (a row per rank, coloured cells)."),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else there.")
]


def overrides(
    algo: list[str] | None = None,
    pp: int | None = None,
    vpp: int | None = None,
    mb: int | None = None,
    fwd: float | None = None,
    bwd: float | None = None,
    wgrad: float | None = None,
    comm: float | None = None,
    mem_limit: float | None = None,
    costs_from: Path | None = None,
) -> Overrides:
    # imported here, not above: a verb's --help needs only the option types (start-up time)
    from primuspp.config.loader import Overrides
    from primuspp.sim.calibrate import costs_from_dir

    costs: dict[str, Any] = {}
    if costs_from is not None:
        cal = costs_from_dir(str(costs_from))
        measured = cal.portable()  # one value per rank: any placement over the same p
        keys = ("forward", "backward", "wgrad", "comm", "activation", "b_free_fraction")
        costs.update({k: getattr(measured, k) for k in keys})
        note = " (no W in the run: full backward split evenly into B and W)" if cal.bw_split_assumed else ""
        unit = ""
        if cal.memory_unit != "microbatches" and cal.activation_per_microbatch > 0:
            unit = f"; 1 activation unit = {cal.activation_per_microbatch:,.0f} {cal.memory_unit}"
        err.print(
            f"costs measured from {costs_from}: {cal.samples} intervals{note}; p2p latency "
            f"{cal.costs.comm:.3g} ms ({cal.comm_samples} waiting hand-offs){unit}",
            highlight=False,
        )
    explicit = (("forward", fwd), ("backward", bwd), ("wgrad", wgrad), ("comm", comm))
    costs.update({k: v for k, v in explicit if v is not None})
    return Overrides(tuple(algo or ()), pp, vpp, mb, costs, mem_limit)
