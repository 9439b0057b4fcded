"""The pydantic-free coercion of plain command-line values (primuspp.commands.fast_coercion) answers what
typer's own coercion answers, value and type, for every parameter of every verb; and leaves to typer what
it cannot be sure of."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer._click import Context
from typer._coercion import build_runtime_param

from primuspp.commands.app import VERBS, load
from primuspp.commands.fast_coercion import SLOW, fast_coerce

INTS = ["0", "1", "7", "64", "512", "100000", "999999999999999999"]
NOT_INTS = ["", " 4", "4 ", "+4", "-4", "04", "4.0", "1_000", "٣", "0x10", "1e3", "abc"]
FLOATS = ["0", "2", "1000", "0.5", "1.25", "123456.000001", "3.141592653589793"]
NOT_FLOATS = ["", "-1", "+1", ".5", "5.", "1e3", "nan", "inf", "1_0", " 1", "01"]


def _paths(tmp: Path) -> list[str]:
    (tmp / "file.yaml").write_text("x")
    (tmp / "dir").mkdir()
    os.symlink(tmp / "missing", tmp / "dangling")
    return [str(tmp / n) for n in ("file.yaml", "dir", "dangling", "missing", "dir/missing/deeper")] + [
        "out",
        "./rel/out",
        "-",
        "/dev/null",
        "a b",
    ]


def _params():
    for verb in VERBS:
        command = load(verb)
        for param in command.params:
            if getattr(param, "type_descriptor", None) is not None:
                yield pytest.param(command, param, id=f"{verb.name}-{param.name}")


def _samples(annotation, tmp: Path) -> list:
    if annotation is int:
        return INTS + NOT_INTS + [0, 5, 10_000_000, True, 2.0]
    if annotation is float:
        return FLOATS + NOT_FLOATS + INTS + [0.5, 3.0, 4, True]
    if annotation is str:
        return ["x", "", "zbv", "é", 5]
    if annotation is bool:
        return [True, False, "true", 1]
    if annotation is Path:
        return _paths(tmp)
    if annotation == list[str]:
        return [["zbv"], ("1f1b", "zbv"), []]
    return ["1", "x"]


@pytest.mark.parametrize(("command", "param"), list(_params()))
def test_fast_coercion_is_typers(command, param, tmp_path):
    descriptor = param.type_descriptor
    ctx = Context(command)
    answered = 0
    for value in _samples(descriptor.annotation, tmp_path):
        fast = fast_coerce(descriptor, value, param, ctx)
        if fast is SLOW:
            continue
        answered += 1
        real = build_runtime_param(descriptor).coerce(value, param=param, ctx=ctx)
        assert (type(fast), fast) == (type(real), real), value
    plain = (int, float, str, Path, list[str])
    info = descriptor.parameter_info
    if descriptor.annotation in plain and not info.parser:
        assert answered or info.min is not None or info.max is not None


@pytest.mark.parametrize("value", NOT_INTS)
def test_unsure_ints_are_left_to_typer(value):
    from typer._coercion import resolve_type_descriptor
    from typer.models import OptionInfo

    assert fast_coerce(resolve_type_descriptor(int, OptionInfo()), value, None, None) is SLOW


def test_refused_paths_are_left_to_typer(tmp_path):
    from typer._coercion import resolve_type_descriptor
    from typer.models import OptionInfo

    descriptor = resolve_type_descriptor(Path, OptionInfo(exists=True))
    assert fast_coerce(descriptor, str(tmp_path / "missing"), None, None) is SLOW
    assert fast_coerce(resolve_type_descriptor(Path, OptionInfo()), "", None, None) is SLOW
