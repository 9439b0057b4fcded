"""Whole-command cost: CPU seconds (user + system of the child process) and peak RSS of `primuspp` commands
as a user runs them, the median of `--repeat` runs, next to a bare `python -c pass`.

Usage: python bench/command_cost.py [--repeat 5] [--large] [--every-algorithm] [--phases] [--against DIR]

Targets (issue 34): `simulate --algo zbv --pp 16 --mb 128 --json` within 0.25 CPU s, every algorithm's at
p = 16 within 0.3 (`--every-algorithm`), the default `simulate` (12 runs at p = 8, m = 32) within 1; with
`--large`, `simulate --algo zbv --pp 256 --mb 2048 --json` within 4 CPU s and 1 GB peak RSS.
`--phases` adds the start-up of `zbv p16` in cumulative steps (each `python -c "import ..."` of what the
step before imported and more: typer; the CLI and the verb's module; numpy; the modules the run uses): the
differences between consecutive rows, and the whole command's excess over the last, are each phase's cost.
`--against DIR` runs every command also from another source checkout (`git archive REV | tar -x -C DIR`;
run through this interpreter with `PYTHONPATH=DIR`, DIR/primuspp/commands and DIR/primuspp/configs linked to
its commands/ and configs/), alternating with this one in each round, and prints both and their ratio.
Every command runs once before timing (so its byte code is compiled and cached even where the environment
sets PYTHONDONTWRITEBYTECODE, as an installed package's is). The load average is printed before and after:
the machine may be shared, so compare the ratios of one run, not figures of different runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

TARGETS = {"zbv p16": 0.25, "default": 1.0, "zbv p256": 4.0}
ALGOS = ("gpipe", "1f1b", "1f1b-interleaved", "zero-bubble", "zb-h2", "zero-bubble-heuristic", "zbv",
         "v-half", "v-min", "v-auto", "dualpipe", "dualpipe-v")  # fmt: skip


#: `--phases`: each step imports what the one before did and more (the last: what `zbv p16` imports)
PHASES = {
    "+ typer": "import typer",
    "+ cli, simulate verb": "import primuspp.commands.app, primuspp.commands.simulate",
    "+ numpy": "import primuspp.commands.app, primuspp.commands.simulate, numpy",
    "+ run's modules": "import primuspp.commands.app, primuspp.commands.simulate, numpy, "
    "primuspp.sim.output, primuspp.config.loader, primuspp.algorithms.v.family",
}


def commands(large: bool, every: bool, phases: bool = False) -> dict[str, list[str]]:
    cmds = {
        "python -c pass": ["-c", "pass"],
        **({name: ["-c", code] for name, code in PHASES.items()} if phases else {}),
        "zbv p16": ["-m", "primuspp", "simulate", "--algo", "zbv", "--pp", "16", "--mb", "128", "--json"],
        "default": ["-m", "primuspp", "simulate"],
    }
    if every:
        for algo in ALGOS:
            cmds[f"{algo} p16"] = ["-m", "primuspp", "simulate", "--algo", algo, "--pp", "16", "--mb", "128"]
            cmds[f"{algo} p16"].append("--json")
    if large:
        cmds["zbv p256"] = ["-m", "primuspp", "simulate", "--algo", "zbv", "--pp", "256", "--mb", "2048"]
        cmds["zbv p256"].append("--json")
    return cmds


def run(args: list[str], cwd: str, source: str | None) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MB) of one `python ARGS` run; `source`: a checkout put first on the path."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if source is not None:
        env["PYTHONPATH"] = source
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(args)}: exit status {status}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--large", action="store_true", help="add zbv at p = 256, m = 2048")
    parser.add_argument("--every-algorithm", action="store_true", help="every algorithm at p = 16, m = 128")
    parser.add_argument("--phases", action="store_true", help="zbv p16's start-up in cumulative steps")
    parser.add_argument("--against", metavar="DIR", help="another source checkout, run side by side")
    a = parser.parse_args()
    sides = {"this": None} | ({"against": os.path.abspath(a.against)} if a.against else {})
    cmds = commands(a.large, a.every_algorithm, a.phases)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for rnd in range(a.repeat + 1):  # round 0 warms (byte code, page cache)
            for name, args in cmds.items():
                for side, source in list(sides.items())[:: 1 if rnd % 2 else -1]:  # who runs first alternates
                    sample = run(args, cwd, source)
                    if rnd:
                        samples.setdefault((name, side), []).append(sample)
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    head = f"{'command':28} " + " ".join(f"{s + ' CPU s':>12} {s + ' MB':>10}" for s in sides)
    print(head + ("   ratio" if a.against else "") + "   target")
    for name in cmds:
        cells, cpus = [], []
        for side in sides:
            cpu = statistics.median(s[0] for s in samples[name, side])
            rss = statistics.median(s[1] for s in samples[name, side])
            cells.append(f"{cpu:12.3f} {rss:10.0f}")
            cpus.append(cpu)
        ratio = f"   {cpus[0] / cpus[1]:5.2f}" if a.against else ""
        target = TARGETS.get(name, 0.3 if name.endswith("p16") else None)
        print(f"{name:28} " + " ".join(cells) + ratio + (f"   {target:g}" if target else ""))


if __name__ == "__main__":
    main()
