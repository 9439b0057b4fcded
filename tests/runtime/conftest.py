"""Runtime tests need torch (the `train` extra; .ci/test.sh installs the CPU build): skipped without it."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["test_*.py"]
