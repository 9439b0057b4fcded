from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PRIMUS_SAMPLES = SHARED / "primus-samples"


@pytest.fixture
def primus_samples() -> Path:
    if not PRIMUS_SAMPLES.is_dir():
        pytest.skip("../shared/primus-samples not present")
    return PRIMUS_SAMPLES


@pytest.fixture(autouse=True)
def _pp_data_in_tmp(tmp_path_factory, monkeypatch):
    """`primuspp train` writes pp_data to output/pp_data by default: tests send it to a temp directory
    (tests of the default itself run in a temp working directory and unset this)."""
    monkeypatch.setenv("DUMP_PP_DIR", str(tmp_path_factory.mktemp("pp_data") / "pp_data"))
