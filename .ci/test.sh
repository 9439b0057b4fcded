#!/usr/bin/env bash
# The test command named in README.md: installs what the tests need (idempotent), then lint + the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch: the CPU build pinned (a plain `torch` requirement pulls a multi-GB CUDA build)
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[test,optimal,train]'  # train: megatron-core (tests/megatron)
ruff check .
ruff format --check .
python -m pytest "$@"
