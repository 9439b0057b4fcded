"""Start-up time of the CLI next to a bare `python -c pass` (target: within 0.3 s), and with --simulate the
wall time of `primuspp simulate --algo X --pp 64 --mb 512 --json` for every registered algorithm (target:
1 s each; issue 14's acceptance).

Usage: python bench/startup.py [--repeat 5] [--importtime] [--simulate [ALGO ...]] [--pp 64] [--mb 512]
                               [--against PYTHON]
Each round runs every command once, side by side (bare python first), so load from other work hits them
alike; prints the median and best wall seconds of each, its excess over bare python, and the load average
before and after. `--importtime` adds the slowest imports of each command (`python -X importtime`).
Commands run as `python -m primuspp ...` with stdout and stderr discarded, from a temporary directory
(`simulate` writes its result directory there). With --simulate the CPU seconds of each run (user + system
of the child) are printed beside its wall time: on a loaded machine the wall time includes waiting.
`--against PYTHON` (with --simulate) runs each command also with another interpreter (say the virtual
environment of an earlier checkout: `--against ../old/.venv/bin/python`), alternating with this one in
every round, and prints both side by side.
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
SIMULATE_TARGET_S = 1.0
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "primuspp --version": ["-m", "primuspp", "--version"],
    "primuspp simulate --help": ["-m", "primuspp", "simulate", "--help"],
    "primuspp algorithms": ["-m", "primuspp", "algorithms"],
    "primuspp --help": ["-m", "primuspp", "--help"],
}


def _wall(args: list[str], cwd: str) -> float:
    return _timed(args, cwd)[0]


def _timed(args: list[str], cwd: str, python: str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `python ARGS` (CPU: the child's user + system time). `python`:
    another interpreter, run without this one's PYTHONPATH (so that it imports its own primuspp)."""
    env = None
    if python is not None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    before = os.times()
    start = time.perf_counter()
    subprocess.run(
        [python or sys.executable, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu


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
    parser.add_argument(
        "--simulate",
        nargs="*",
        metavar="ALGO",
        help="time `primuspp simulate --algo ALGO --pp P --mb M --json` instead (default: every algorithm)",
    )
    parser.add_argument("--pp", type=int, default=64)
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument(
        "--against", metavar="PYTHON", help="with --simulate: also run with this interpreter, alternating"
    )
    args = parser.parse_args()
    if args.simulate is not None:
        _simulate(args)
        return
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


def _simulate(args: argparse.Namespace) -> None:
    from primuspp.algorithms.registry import ALGORITHMS, refusal

    algos = args.simulate or [a for a in ALGORITHMS if refusal(a, args.pp, None, args.mb, {}) is None]
    pythons: dict[str, str | None] = {"this": None, **({"against": args.against} if args.against else {})}
    load_before = os.getloadavg()
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.repeat):
            for algo in algos:
                argv = [
                    "-m",
                    "primuspp",
                    "simulate",
                    "--algo",
                    algo,
                    "--pp",
                    str(args.pp),
                    "--mb",
                    str(args.mb),
                ]
                for label, python in pythons.items():  # each into its own result directory
                    run = _timed([*argv, "--json", "--out", f"res-{label}"], cwd, python)
                    samples.setdefault((algo, label), []).append(run)
    load_after = os.getloadavg()
    print(
        f"primuspp simulate --algo X --pp {args.pp} --mb {args.mb} --json, {args.repeat} rounds side by side "
        f"(median / best wall s, median CPU s; target: wall <= {SIMULATE_TARGET_S})"
    )
    if args.against:
        print(f" this: {sys.executable}; against: {args.against}")
    print(f" {'algorithm':<24} {'python':<8} {'median':>7} {'best':>7} {'cpu':>7}")
    for (algo, label), runs in samples.items():
        median = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        verdict = "  ok" if median <= SIMULATE_TARGET_S else "  OVER"
        print(f" {algo:<24} {label:<8} {median:7.3f} {min(w for w, _ in runs):7.3f} {cpu:7.3f}{verdict}")
    print(
        "load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
            *load_before, *load_after
        )
    )


if __name__ == "__main__":
    main()
