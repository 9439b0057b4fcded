"""The CLI turns numpy's huge-page advice off for its own process (see `primuspp/numpy_pages.py`),
leaves a user's explicit choice alone, and the library alone changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
