"""The packaged default config (`configs/pp_simulation.yaml`) as plain data, for `simulate` and the other
verbs when no `--config` is given: no YAML parser and no pydantic schema at start-up (about 0.1 s of a
one-second command).

The schema (`primuspp.config.schema.SimulationConfig`) stays the one place for the rules:
tests/config/test_packaged.py validates the YAML through it and holds `DEFAULT.dump()` equal to the
validated model's `model_dump()` (values and their types), so the two cannot drift apart. `YAML_SHA256` is
the hash of the YAML `DEFAULT` mirrors: where the installed file differs (edited in place),
`loader.simulation_config` parses and validates it like any other config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: SHA-256 of `configs/pp_simulation.yaml` as `DEFAULT` below mirrors it (the test says when to update both)
YAML_SHA256 = "e4a16499d1acf95089944a851d09e9222dbcc0e59f0f2ae7a17700da82509296"

#: `CostsConfig`'s fields, in its order (`dump` lists them all, as `model_dump` does)
COST_KEYS = (
    "forward",
    "backward",
    "wgrad",
    "comm",
    "comm_bytes",
    "bandwidth",
    "activation",
    "b_free_fraction",
    "fb_overlap",
    "offload",
)


@dataclass(frozen=True)
class Costs:
    """What `CostsConfig` offers `run_specs`: the given values (lists as tuples)."""

    values: dict[str, Any] = field(default_factory=dict)

    def given(self) -> dict[str, Any]:
        return {k: (tuple(v) if isinstance(v, list) else v) for k, v in self.values.items() if v is not None}

    def dump(self) -> dict[str, Any]:
        return {k: self.values.get(k) for k in COST_KEYS}


@dataclass(frozen=True)
class Run:
    """One entry of `runs` (the fields of `RunConfig`)."""

    algorithm: str
    name: str | None = None
    pp: int | None = None
    vpp: int | None = None
    micro_batches: int | None = None
    costs: Costs = field(default_factory=Costs)
    params: dict[str, Any] = field(default_factory=dict)

    def dump(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "name": self.name,
            "pp": self.pp,
            "vpp": self.vpp,
            "micro_batches": self.micro_batches,
            "costs": self.costs.dump(),
            "params": dict(self.params),
        }


@dataclass(frozen=True)
class PackagedConfig:
    """The fields of `SimulationConfig` that `run_specs` and the verbs read."""

    pp: int
    micro_batches: int
    costs: Costs
    mem_limit: float | int | None
    output_dir: str
    runs: tuple[Run, ...]

    def dump(self) -> dict[str, Any]:
        return {
            "pp": self.pp,
            "micro_batches": self.micro_batches,
            "costs": self.costs.dump(),
            "mem_limit": self.mem_limit,
            "output_dir": self.output_dir,
            "runs": [r.dump() for r in self.runs],
        }


DEFAULT = PackagedConfig(
    pp=8,
    micro_batches=32,
    costs=Costs(
        {"forward": 1000, "backward": 1000, "wgrad": 1000, "comm": 0, "activation": 1, "b_free_fraction": 0}
    ),
    mem_limit=None,
    output_dir="pp_simulation_result",
    runs=(
        Run("gpipe"),
        Run("1f1b"),
        Run("1f1b-interleaved", vpp=2),
        Run("zero-bubble"),
        Run("zb-h2"),
        Run("zero-bubble-heuristic"),
        Run("zbv"),
        Run("v-half"),
        Run("v-min"),
        Run("v-auto"),
        Run("dualpipe"),
        Run("dualpipe-v"),
    ),
)
