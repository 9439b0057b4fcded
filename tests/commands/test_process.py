"""The command's process-level settings (primuspp.commands.process): the pydantic-free coercion of plain
command-line values answers what typer's own coercion answers, value and type, for every parameter of every
verb, leaves to typer what it cannot be sure of, and is not applied on another typer version (typer's own
path then runs the same commands); numpy's huge-page advice is off for the command's process unless the
user chose; the offline verbs keep freed memory for reuse. Process-wide cases run in their own process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from typer._click import Context
from typer._coercion import build_runtime_param

from primuspp.commands import process
from primuspp.commands.app import VERBS, load
from primuspp.commands.process import SLOW, fast_coerce

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


# -- typer's private API only on the version it was written for -----------------------------------------

ARGV = ["simulate", "--algo", "zbv", "--algo", "1f1b", "--pp", "2", "--mb", "4", "--fwd", "1.5", "--json"]


def test_the_same_commands_with_and_without_the_private_hook(tmp_path, monkeypatch, capsys):
    """As on typer 0.29 (hooked) and as on any other version (typer's own coercion, the public path): the
    same output, the same one-line refusals."""
    from primuspp.commands.app import main

    assert process.TYPER_HOOKED  # the pinned minimum (typer>=0.29) is what runs here
    monkeypatch.chdir(tmp_path)
    seen = []
    for hooked in (True, False):
        monkeypatch.setattr(process, "TYPER_HOOKED", hooked)
        assert main([*ARGV, "--out", f"res{hooked}"]) == 0
        results = json.loads(capsys.readouterr().out)["results"]
        assert main(["simulate", "--pp", "x"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "'--pp'" in err, err
        seen.append((results, err))
    assert seen[0] == seen[1]
    assert [(r["name"], r["pp"], r["micro_batches"]) for r in seen[0][0]] == [("zbv", 2, 4), ("1f1b", 2, 4)]


def test_other_typer_versions_take_the_public_path(monkeypatch):
    from primuspp.commands.app import VERBS, load

    monkeypatch.setattr(process, "TYPER_HOOKED", False)
    params = list(load(VERBS[0]).params)
    assert process.defer_coercion(params) == params
    assert not any(isinstance(getattr(p, "_runtime_param", None), process._DeferredCoercion) for p in params)


# -- numpy's huge-page advice -------------------------------------------------------------------------------

PROBE = "import numpy; print(numpy._core.multiarray._get_madvise_hugepage())"


def _advice(prelude: str, env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if env_value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = env_value
    code = f"{prelude}\n{PROBE}"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_cli_turns_the_advice_off() -> None:
    assert _advice("import primuspp.commands.app", None) == "False"


@pytest.mark.parametrize("choice", ["0", "1"])
def test_a_users_choice_stands(choice: str) -> None:
    assert _advice("import primuspp.commands.app", choice) == _advice("", choice)


def test_the_library_leaves_numpy_as_it_is() -> None:
    assert _advice("import primuspp.sim, primuspp.algorithms.registry", None) == _advice("", None)


# -- freed memory kept ---------------------------------------------------------------------------------

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

FAULTS = """
import json, resource
from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
costs = CostModel(1000.0, 1000.0, 1000.0)
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    simulate(build_schedule("1f1b", 16, None, 128, costs), costs)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def _run(code: str, cwd: str | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=cwd)
    return out.stdout.strip().splitlines()[-1]


@glibc
def test_kept_memory_is_reused_without_page_faults() -> None:
    """From the third build on, a build + simulation touches no page it has not touched before (glibc's
    defaults: about 50 faults a build here)."""
    code = "import primuspp.commands.process as p\nassert p.keep_freed_memory() and p.keep_freed_memory()\n"
    code += FAULTS
    faults = json.loads(_run(code))
    assert max(faults[2:]) <= 4, faults


@pytest.mark.parametrize(
    ("verb", "kept"),
    [
        (["simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", "res"], True),
        (["algorithms"], None),
        (["simulate", "--help"], None),
    ],
)
@glibc
def test_the_offline_verbs_keep_memory(tmp_path, verb: list[str], kept: bool | None) -> None:
    code = (
        "import contextlib, io\nfrom primuspp.commands.app import main\n"
        "import primuspp.commands.process as p\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    code = main({verb!r})\n"
        "print(code, p._kept)"
    )
    assert _run(code, cwd=str(tmp_path)) == f"0 {kept}"


def test_every_verb_but_train_and_algorithms_keeps_memory() -> None:
    from primuspp.commands.app import VERBS, load

    keeps = {verb.name: load(verb).keeps_heap for verb in VERBS}
    assert keeps == {name: name not in ("train", "algorithms") for name in keeps}
