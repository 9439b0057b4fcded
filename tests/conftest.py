from __future__ import annotations

import gc
import os
import types
from collections.abc import Callable
from pathlib import Path

import pytest

# The runner's terminal is not the tests' business: pytest-xdist's workers get COLUMNS=80, which
# commands/console.py takes as a terminal's width; the tests see what a pipe gets (160 columns)
os.environ.pop("COLUMNS", None)

#: Fixtures shipped with the tests (tests/data/README.md; regenerate with tests/data/make_fixtures.py)
DATA = Path(__file__).resolve().parent / "data"
#: skip reasons allowed on CI: hardware this machine lacks (a GPU, ROCm/Primus-Turbo, CUDA/TE)
HARDWARE_REASON = "hardware:"


@pytest.fixture
def primus_data() -> Path:
    """Primus-format samples: pp_simulation.yaml, simulator_output_p8_m32/<name>/, pp_data_example/<run>/."""
    root = DATA / "primus"
    assert root.is_dir(), f"{root} missing: run python tests/data/make_fixtures.py"
    return root


def _ours(obj: object) -> bool:
    """Whether `obj` is of a primuspp type, or a method bound to such an object."""
    owner = obj.__self__ if isinstance(obj, types.MethodType) else obj
    return type(owner).__module__.startswith("primuspp")


@pytest.fixture
def our_cyclic_garbage() -> Callable[[], list]:
    """A function that runs the cyclic collector and returns the unreachable objects of primuspp types (or
    bound methods of them) it found: reference cycles of ours. Other garbage (of pytest, of another thread)
    is collected as usual and ignored."""

    def collect() -> list:
        flags = gc.get_debug()
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            return [type(obj).__name__ for obj in gc.garbage if _ours(obj)]
        finally:
            gc.garbage.clear()
            gc.set_debug(flags)

    return collect


@pytest.fixture(autouse=True)
def _pp_data_in_tmp(tmp_path_factory, monkeypatch):
    """`primuspp train` writes pp_data to output/pp_data by default: tests send it to a temp directory
    (tests of the default itself run in a temp working directory and unset this)."""
    monkeypatch.setenv("DUMP_PP_DIR", str(tmp_path_factory.mktemp("pp_data") / "pp_data"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On CI (CI=true) a skip is a failure unless its reason starts with "hardware:": everything the
    tests need is installed there (.ci/test.sh), so any other skip hides a test that did not run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if HARDWARE_REASON not in reason:
            report.outcome = "failed"
            report.longrepr = (
                f"skipped on CI (only '{HARDWARE_REASON} ...' skips are allowed there): {reason}"
            )
