"""The shipped fixtures are exactly what tests/data/make_fixtures.py writes (so they can be regenerated)."""

import subprocess
import sys
from pathlib import Path

GENERATOR = Path(__file__).resolve().parent / "data" / "make_fixtures.py"


def test_fixtures_match_their_generator():
    proc = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "fixtures up to date\n"
