"""The simulation config schema (pydantic), and one-line messages for its errors."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from primuspp.errors import ConfigError

Number = float | int
PerStageValue = Number | list[Number]


class CostsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    forward: PerStageValue | None = None
    backward: PerStageValue | None = None
    wgrad: PerStageValue | None = None
    comm: Number | None = None
    comm_bytes: Number | None = None
    bandwidth: Number | None = None
    activation: PerStageValue | None = None
    b_free_fraction: PerStageValue | None = None
    fb_overlap: Number | None = None

    def given(self) -> dict[str, Any]:
        return {k: (tuple(v) if isinstance(v, list) else v) for k, v in self if v is not None}


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    algorithm: str
    name: str | None = None
    pp: int | None = None
    vpp: int | None = None
    micro_batches: int | None = None
    costs: CostsConfig = Field(default_factory=CostsConfig)
    params: dict[str, Any] = Field(default_factory=dict)


class SimulationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pp: int = 8
    micro_batches: int = 32
    costs: CostsConfig = Field(default_factory=CostsConfig)
    mem_limit: Number | None = None
    output_dir: str = "pp_simulation_result"
    runs: list[RunConfig] = Field(min_length=1)


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the field at `loc` (for listing allowed keys)."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        current = next(
            (a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
        if current is None:
            return None
    return current


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_model(model: type[BaseModel], data: Any, source: str) -> Any:
    """Validate `data` against `model`, raising ConfigError with one line for the first problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first["loc"])
        key = _dotted(loc)
        owner = _model_at(model, loc)
        allowed = ", ".join(owner.model_fields) if owner is not None else ""
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{source}: unknown key '{key}' (allowed: {allowed})", key=key) from None
        if first["type"] == "missing":
            raise ConfigError(f"{source}: missing key '{key}'", key=key) from None
        value = first.get("input")
        raise ConfigError(f"{source}: {key}={value!r}: {first['msg']}", key=key) from None
