from __future__ import annotations

from pathlib import Path

import pytest

#: Fixtures shipped with the tests (tests/data/README.md; regenerate with tests/data/make_fixtures.py)
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def primus_data() -> Path:
    """Primus-format samples: pp_simulation.yaml, simulator_output_p8_m32/<name>/, pp_data_example/<run>/."""
    root = DATA / "primus"
    assert root.is_dir(), f"{root} missing: run python tests/data/make_fixtures.py"
    return root
