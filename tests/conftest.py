from __future__ import annotations

import os
from pathlib import Path

import pytest

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
