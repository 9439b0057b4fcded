"""Start-up time of the CLI next to a bare `python -c pass` (target: within 0.3 s).

Usage: python bench/startup.py [--repeat 5] [--importtime]
Each round runs every command once, side by side (bare python first), so load from other work hits them
alike; prints the median and best wall seconds of each, its excess over bare python, and the load average
before and after. `--importtime` adds the slowest imports of each command (`python -X importtime`).
Commands run as `python -m primuspp ...` with stdout and stderr discarded, from a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 0.3
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "primuspp --version": ["-m", "primuspp", "--version"],
    "primuspp simulate --help": ["-m", "primuspp", "simulate", "--help"],
    "primuspp algorithms": ["-m", "primuspp", "algorithms"],
    "primuspp --help": ["-m", "primuspp", "--help"],
}


def _wall(args: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start


def _slowest_imports(args: list[str], cwd: str, n: int = 6) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the top-level imports that cost most."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, _, cumulative, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        if not name.startswith(" "):  # a top-level import (nested ones are indented)
            rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as cwd:
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.repeat):
            for name, argv in COMMANDS.items():
                times[name].append(_wall(argv, cwd))
        load_after = os.getloadavg()
        bare = statistics.median(times["python -c pass"])
        print(
            f"start-up, {args.repeat} rounds side by side (median / best wall s; "
            f"target: excess <= {TARGET_S})"
        )
        print(f" {'command':<28} {'median':>7} {'best':>7} {'excess':>7}")
        for name, samples in times.items():
            median = statistics.median(samples)
            excess = median - bare
            verdict = "" if name == "python -c pass" else ("  ok" if excess <= TARGET_S else "  OVER")
            print(f" {name:<28} {median:7.3f} {min(samples):7.3f} {excess:+7.3f}{verdict}")
        print(
            "load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
                *load_before, *load_after
            )
        )
        if args.importtime:
            for name, argv in COMMANDS.items():
                if name == "python -c pass":
                    continue
                top = ", ".join(f"{mod} {us / 1e3:.0f} ms" for us, mod in _slowest_imports(argv, cwd))
                print(f" {name}: {top}")


if __name__ == "__main__":
    main()
