"""The command's process-level settings (primuspp.commands.process): numpy's huge-page advice is off for
the command's process unless the user chose; the offline verbs keep freed memory for reuse. Process-wide
cases run in their own process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from primuspp.commands.app import VERBS, load

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

    keeps = {verb.name: load(verb).keeps_heap for verb in VERBS}
    assert keeps == {name: name not in ("train", "algorithms") for name in keeps}
