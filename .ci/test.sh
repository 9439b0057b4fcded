#!/usr/bin/env bash
# The test command named in README.md: installs what the tests need (idempotent), then lint + the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
# headless Chromium for the page tests (tests/viz/test_browser.py skip without it); best effort: as root or
# with password-less sudo, else a note
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  apt_get=(apt-get)
  [ "$(id -u)" = 0 ] || apt_get=(sudo -n apt-get)
  { "${apt_get[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "note: could not install chromium (needs root or password-less sudo); the browser tests will be skipped" >&2
fi
# torch 2.13.0 as the package index serves it (an already installed 2.13.0, e.g. the CPU build from PyTorch's
# CPU wheel index, is kept); megatron-core for tests/megatron
python -m pip install -q torch==2.13.0
python -m pip install -q -e '.[test,optimal,train]'
ruff check .
ruff format --check .
# two workers (the machine's two cores; PRIMUSPP_TEST_WORKERS=0 runs in this process), each test file whole
# on one worker so a module's fixture is built once
python -m pytest -n "${PRIMUSPP_TEST_WORKERS:-2}" --dist loadfile "$@"
