"""Headless Chromium for page tests: the status a page writes into #pp-status, and screenshots."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
_STATUS = re.compile(r'<pre id="pp-status">(.*?)</pre>', re.S)


def chromium() -> str:
    """The browser binary, or skip the test."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("chromium not installed (.ci/test.sh installs it when it can)")
    return found


def _run(url: str, *extra: str, budget_ms: int, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="pp-chromium-") as profile:
        proc = subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--virtual-time-budget={budget_ms}",
                *extra,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def page_status(
    page: Path,
    fragment: str = "",
    png: Path | None = None,
    size: tuple[int, int] = (1400, 1200),
    budget_ms: int = 3000,
    timeout: float = 600,  # a hang guard only; the page's speed is bench/viz_scale.py's figure
) -> dict:
    """Load `page` (with `#fragment`), return the JSON it wrote into #pp-status; with `png`, also take a
    screenshot in the same run (copied to $PRIMUSPP_TEST_ARTIFACTS when that is set)."""
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    extra = [f"--window-size={size[0]},{size[1]}", "--dump-dom"]
    if png is not None:
        extra.append(f"--screenshot={png}")
    dom = _run(url, *extra, budget_ms=budget_ms, timeout=timeout)
    match = _STATUS.search(dom)
    if match is None or not match.group(1).strip():
        raise AssertionError("the page wrote no status (its script did not run to the end)")
    if png is not None:
        assert png.stat().st_size > 10_000, "screenshot is (nearly) empty"
        artifacts = os.environ.get("PRIMUSPP_TEST_ARTIFACTS")
        if artifacts:
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            shutil.copy(png, Path(artifacts) / png.name)
    return json.loads(html.unescape(match.group(1)))
