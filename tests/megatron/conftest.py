"""Megatron tests need torch and megatron-core (the `train` extra; .ci/test.sh installs both): skipped
without them."""

from __future__ import annotations

import importlib.util

_HAVE = all(importlib.util.find_spec(m) for m in ("torch", "megatron"))
collect_ignore_glob = [] if _HAVE else ["test_*.py"]
