"""Megatron tests need torch and megatron-core (the `train` extra; .ci/test.sh installs both): skipped
without them. With them, megatron-core is imported here, at collection, so that the fork server the tests'
ranks start from (runtime/launch.py) imports it once for them all."""

from __future__ import annotations

import importlib.util

_HAVE = all(importlib.util.find_spec(m) for m in ("torch", "megatron"))
collect_ignore_glob = [] if _HAVE else ["test_*.py"]
if _HAVE:
    from primuspp.backends.megatron import require

    require()
