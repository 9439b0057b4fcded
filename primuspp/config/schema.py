"""The simulation config schema (pydantic), and one-line messages for its errors."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from primuspp.errors import ConfigError
from primuspp.schedule.limits import MAX_COST, MAX_MB, MAX_MEM_LIMIT, MAX_PP, MAX_VPP

#: what a run name may be: one path component (it names the run's result directory)
NAME_RULE = "one path component of letters, digits and -_.+ (not '.' or '..', at most 128 characters)"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")


def run_name_problem(name: object) -> str | None:
    """Why `name` cannot name a run's result directory, or None when it can."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
        return f"a run name must be {NAME_RULE}"
    return None


def _safe_name(name: str) -> str:
    problem = run_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def _finite(value: float | int) -> float | int:
    if not math.isfinite(value) or abs(value) > MAX_COST:
        raise ValueError(f"expected a finite number of magnitude at most {MAX_COST:g}")
    return value


def _mem_limit(value: float | int) -> float | int:
    if not math.isfinite(value) or not 0 < value <= MAX_MEM_LIMIT:
        raise ValueError(f"expected a finite number > 0 and at most {MAX_MEM_LIMIT:g} (microbatch units)")
    return value


Number = Annotated[float | int, AfterValidator(_finite)]
PerStageValue = Number | list[Number]
RunName = Annotated[str, AfterValidator(_safe_name)]


def _int_from_1_to(high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not integral or not 1 <= value <= high:
            raise ValueError(f"expected an integer from 1 to {high:,}")
        return int(value)

    return check


Pp = Annotated[int, BeforeValidator(_int_from_1_to(MAX_PP))]
Vpp = Annotated[int, BeforeValidator(_int_from_1_to(MAX_VPP))]
Microbatches = Annotated[int, BeforeValidator(_int_from_1_to(MAX_MB))]


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
    offload: PerStageValue | None = None

    def given(self) -> dict[str, Any]:
        return {k: (tuple(v) if isinstance(v, list) else v) for k, v in self if v is not None}


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    algorithm: str
    name: RunName | None = None
    pp: Pp | None = None
    vpp: Vpp | None = None
    micro_batches: Microbatches | None = None
    costs: CostsConfig = Field(default_factory=CostsConfig)
    params: dict[str, Any] = Field(default_factory=dict)


class SimulationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pp: Pp = 8
    micro_batches: Microbatches = 32
    costs: CostsConfig = Field(default_factory=CostsConfig)
    mem_limit: Annotated[float | int, AfterValidator(_mem_limit)] | None = None
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


def _is_validator_step(part: object) -> bool:
    """pydantic's names for union members and validator steps in an error location (`function-after[...]`,
    `list[...]`, `float`), which are not keys the user wrote."""
    return isinstance(part, str) and (part in ("float", "int", "str") or part.endswith("]"))


def _dotted(loc: tuple) -> str:
    text = ""
    for part in loc:
        if text and _is_validator_step(part):
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_model(
    model: type[BaseModel], data: Any, source: str, rename: Callable[[str], str] | None = None
) -> Any:
    """Validate `data` against `model`, raising ConfigError with one line for the first problem.

    `rename` maps a key of the model (`runs[0].pp`) to the one the user wrote (Primus'
    `schedulers[0].pp_size`).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first["loc"])
        key = _dotted(loc)
        if rename is not None:
            key = rename(key)
        owner = _model_at(model, loc)
        allowed = ", ".join(owner.model_fields) if owner is not None else ""
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{source}: unknown key '{key}' (allowed: {allowed})", key=key) from None
        if first["type"] == "missing":
            raise ConfigError(f"{source}: missing key '{key}'", key=key) from None
        value = first.get("input")
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{source}: {key}={value!r}: {message}", key=key) from None
