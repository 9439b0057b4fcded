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
