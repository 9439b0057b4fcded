"""Load a simulation config (ours or Primus') and turn it into run specs, with command-line overrides."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primuspp.algorithms.registry import FILE_PREFIX, get_algorithm
from primuspp.config.packaged import DEFAULT, YAML_SHA256, PackagedConfig
from primuspp.errors import ConfigError
from primuspp.inputs import parse_yaml, read_text
from primuspp.schedule.costs import CostModel
from primuspp.schedule.limits import DEFAULT_MAX_NODES, check_nodes, estimate_nodes, finite_cost
from primuspp.sim.runs import RunSpec

if TYPE_CHECKING:  # the schema (pydantic) is imported when a config is parsed, not for the packaged one
    from primuspp.config.schema import SimulationConfig

DEFAULT_CONFIG = "pp_simulation.yaml"


@dataclass(frozen=True)
class Overrides:
    """Command-line values that replace the config's."""

    algorithms: tuple[str, ...] = ()
    pp: int | None = None
    vpp: int | None = None
    micro_batches: int | None = None
    costs: dict[str, Any] = field(default_factory=dict)
    mem_limit: float | None = None
    max_nodes: int = DEFAULT_MAX_NODES


def default_config_text() -> str:
    return resources.files("primuspp.configs").joinpath(DEFAULT_CONFIG).read_text()


def load_config(path: str | Path | None, flag: str = "--config") -> SimulationConfig:
    """The packaged default config, or the file at `path` (`flag` names the option that gave it).

    The file goes through primuspp.inputs: a regular file of at most MAX_INPUT_BYTES, UTF-8, YAML nested at
    most MAX_NESTING deep and expanding to at most MAX_YAML_VALUES through its aliases."""
    if path is None:
        return parse_config(default_config_text(), f"<packaged {DEFAULT_CONFIG}>")
    path = Path(path)
    return parse_config(read_text(path, flag), f"{flag} {path}")


def simulation_config(path: str | Path | None, flag: str = "--config") -> SimulationConfig | PackagedConfig:
    """`load_config(path)`, but without a path the packaged default as plain data
    (`primuspp.config.packaged.DEFAULT`, equal to the validated YAML): no YAML or pydantic at start-up. Only
    while the packaged YAML is the one `DEFAULT` mirrors (its SHA-256): an edited file is parsed and
    validated as any other."""
    if path is None:
        text = resources.files("primuspp.configs").joinpath(DEFAULT_CONFIG).read_bytes()
        if hashlib.sha256(text).hexdigest() == YAML_SHA256:
            return DEFAULT
    return load_config(path, flag)


def parse_config(text: str, source: str) -> SimulationConfig:
    from primuspp.config import primus
    from primuspp.config.schema import SimulationConfig, parse_model

    data = parse_yaml(text, source, "config")
    if primus.is_primus(data):
        native = primus.to_native(data, source)
        return parse_model(SimulationConfig, native, source, rename=primus.native_key_to_primus)
    return parse_model(SimulationConfig, data, source)


def run_specs(config: SimulationConfig | PackagedConfig, overrides: Overrides | None = None) -> list[RunSpec]:
    """One RunSpec per run, overrides applied; names made unique; each run's node count (and all runs'
    together: a command holds its results) estimated and refused over `max_nodes` before anything is built."""
    ov = overrides or Overrides()
    base_costs = {**config.costs.given(), **ov.costs}
    mem_limit = ov.mem_limit if ov.mem_limit is not None else config.mem_limit
    if ov.algorithms:
        entries = [
            {
                "algorithm": a,
                "name": None,
                "pp": None,
                "vpp": ov.vpp,
                "micro_batches": None,
                "costs": {},
                "params": {},
            }
            for a in ov.algorithms
        ]
    else:
        entries = [
            {
                "algorithm": r.algorithm,
                "name": r.name,
                "pp": r.pp,
                "vpp": r.vpp,
                "micro_batches": r.micro_batches,
                "costs": r.costs.given(),
                "params": dict(r.params),
            }
            for r in config.runs
        ]
    specs, used = [], set()
    for entry in entries:
        algo_name = entry["algorithm"]
        if algo_name.startswith(FILE_PREFIX):
            canonical, vpp = algo_name, entry["vpp"]
        else:
            algo = get_algorithm(algo_name)
            canonical = algo.name
            vpp = entry["vpp"]
            if ov.vpp is not None and not ov.algorithms and algo.vpp_ok(ov.vpp):
                vpp = ov.vpp
            if mem_limit is not None and algo.budget_param and algo.budget_param not in entry["params"]:
                entry["params"][algo.budget_param] = mem_limit
        if canonical.startswith(FILE_PREFIX):  # a file name may hold anything: keep it one safe component
            default_name = re.sub(r"[^A-Za-z0-9_.+-]", "_", Path(canonical[len(FILE_PREFIX) :]).stem)
            default_name = default_name.strip(".") or "table"
        else:
            default_name = canonical if vpp is None else f"{canonical}-v{vpp}"
        name = entry["name"] or default_name
        base = name
        k = 2
        while name in used:
            name = f"{base}-{k}"
            k += 1
        used.add(name)
        cost_model = CostModel(**{**base_costs, **entry["costs"], **ov.costs})
        if canonical.startswith(FILE_PREFIX):  # the table says; explicit values are checked against it
            pp, mb = ov.pp or entry["pp"], ov.micro_batches or entry["micro_batches"]
        else:
            pp = ov.pp if ov.pp is not None else (entry["pp"] or config.pp)
            mb = (
                ov.micro_batches
                if ov.micro_batches is not None
                else (entry["micro_batches"] or config.micro_batches)
            )
        specs.append(RunSpec(name, canonical, pp, mb, vpp, cost_model, entry["params"], ov.max_nodes))
    if ov.vpp is not None and not ov.algorithms and all(s.vpp != ov.vpp for s in specs):
        raise ConfigError(f"vpp={ov.vpp} is not allowed by any configured algorithm", key="vpp")
    _check_sizes(specs, ov.max_nodes)
    return specs


def _check_sizes(specs: list[RunSpec], max_nodes: int) -> None:
    total = 0
    for spec in specs:
        if spec.algorithm.startswith(FILE_PREFIX) or spec.pp is None or spec.micro_batches is None:
            continue  # a table file is bounded by the input size limit
        algo = get_algorithm(spec.algorithm)
        vpp = algo.vpp_default if spec.vpp is None else spec.vpp
        n = estimate_nodes(algo.placement, spec.pp, vpp, spec.micro_batches)
        described = (
            f"run {spec.name} ({algo.name}, pp={spec.pp}, vpp={vpp}, micro_batches={spec.micro_batches})"
        )
        check_nodes(described, n, max_nodes)
        total += n
    check_nodes(f"the {len(specs)} runs", total, max_nodes, total=True)


#: the emulated cluster's default cost model: 20 ms per F, B and W of a rank's share, one activation unit
EMULATION_DEFAULTS: dict[str, Any] = {"forward": 20.0, "backward": 20.0, "wgrad": 20.0}
#: longest wait (ms) an emulated compute node may be given: a rank really waits it
MAX_EMULATED_MS = 60_000.0
_EMULATION_FLAGS = {"forward": "--fwd", "backward": "--bwd", "wgrad": "--wgrad"}


@dataclass(frozen=True)
class EmulationCosts:
    """The cost model an emulated run waits by (ms), where it came from, and what one activation unit of
    it is in bytes (when the costs were measured in bytes: the measured run's microbatch)."""

    costs: CostModel
    source: str
    bytes_per_unit: int | None  # None: the emulator's default
    comm_ignored: float = 0.0


def emulation_costs(
    explicit: dict[str, Any],
    config: str | Path | None = None,
    costs_from: str | Path | None = None,
) -> EmulationCosts:
    """Costs for `train --emulate`: explicit values over a measured run (`costs_from`) over a config's
    costs over the defaults (F = B = W = 20 ms). A comm latency is not emulated (the p2p is real): it is
    dropped and reported."""
    from primuspp.sim.calibrate import costs_from_dir

    values: dict[str, Any] = dict(EMULATION_DEFAULTS)
    source = "defaults"
    per_byte = None
    if config is not None:
        values.update(load_config(config).costs.given())
        source = f"config {config}"
    if costs_from is not None:
        cal = costs_from_dir(str(costs_from))
        measured = cal.portable()
        keys = ("forward", "backward", "wgrad", "comm", "activation", "b_free_fraction")
        values.update({k: getattr(measured, k) for k in keys})
        source = f"measured from {costs_from}"
        if cal.memory_unit == "bytes" and cal.activation_per_microbatch > 0:
            per_byte = round(cal.activation_per_microbatch)  # activation comes in units of this
    given = {k: v for k, v in explicit.items() if v is not None}
    for k, v in given.items():
        finite_cost(v, _EMULATION_FLAGS.get(k, f"--{k}"), high=MAX_EMULATED_MS)
    values.update(given)
    origin = f"--costs-from {costs_from}: " if costs_from is not None else f"--config {config}: costs."
    for k in _EMULATION_FLAGS:  # from a config or a measured run: each value, named by where it came from
        for x in values[k] if isinstance(values[k], tuple | list) else (values[k],):
            if k not in given:
                finite_cost(x, f"{origin}{k}", high=MAX_EMULATED_MS)
    if given:
        source += " with " + ", ".join(f"{k}={v:g}" for k, v in given.items())
    comm = float(values.pop("comm", 0.0) or 0.0)
    for k in ("comm_bytes", "bandwidth"):
        values.pop(k, None)
    return EmulationCosts(CostModel(**values), source, per_byte, comm)
