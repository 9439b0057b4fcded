"""The common command-line values coerced without pydantic: typer (0.29) coerces every given value through a
pydantic TypeAdapter, and importing pydantic and building the adapters is a tenth of a second of
`primuspp simulate --algo X --pp 64 --mb 512 --json --out DIR`.

Only values whose result is certain are answered here (plain digits for an int, a plain decimal for a
float, a default of the parameter's own type, strings, a list of strings, a path typer would accept);
anything else, and every value that would be refused, goes to typer's own coercion, so results and error
messages are typer's.
tests/commands/test_fast_coercion.py holds both equal, value and type, over every verb's parameters."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: returned when the value is left to typer's coercion
SLOW = object()

_INT = re.compile(r"(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_PATH_FLAGS = ("exists", "resolve_path", "allow_dash", "path_type", "parser", "writable", "executable")


def fast_coerce(descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    """Typer's coercion of `value` (not None) for a parameter of `descriptor`'s type, or SLOW."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return SLOW
    annotation = descriptor.annotation
    if annotation in (str, int, float, bool) and type(value) is annotation:  # a default, or a string
        return value if annotation in (str, bool) or _plain_number(info) else SLOW
    if annotation is int and type(value) is str and _plain_number(info) and _INT.fullmatch(value):
        return int(value)
    if annotation is float and type(value) is str and _plain_number(info) and _FLOAT.fullmatch(value):
        return float(value)
    if annotation == list[str] and type(value) in (list, tuple) and all(type(v) is str for v in value):
        return list(value)
    if annotation is Path and type(value) is str and value and "\0" not in value:
        return _path(info, value, param, ctx)
    return SLOW


def _plain_number(info: Any) -> bool:
    return info.min is None and info.max is None and not info.clamp


def _path(info: Any, value: str, param: Any, ctx: Any) -> Any:
    """typer's own path checks on `Path(value)` (what pydantic makes of a non-empty string); a value they
    refuse goes to typer's coercion, which refuses it in its own words."""
    if any(getattr(info, flag, None) for flag in _PATH_FLAGS):
        return SLOW
    from typer._click.exceptions import BadParameter
    from typer._param_types import coerce_cli_path

    try:
        return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
    except BadParameter:
        return SLOW
