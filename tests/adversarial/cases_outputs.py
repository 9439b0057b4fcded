"""Where the CLI writes: single-file outputs over devices, FIFOs, symlinks and directories (item 2), result
directories holding user files (item 3), two runs into one --out (item 5), an immutable --out (item 9)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.build import SIM_OUT, SMALL, config, yaml_runs
from tests.adversarial.harness import EITHER, ERR, OK, Case, Ctx, Outcome, fifo_reader, finish, start

cases: list[Case] = []

# -- item 2: single-file outputs -------------------------------------------------------------------
#: verb -> (argv before the output flag, the flag)
WRITERS: dict[str, tuple[Callable[[Ctx], list[str]], str]] = {
    "dump-out": (lambda ctx: ["dump", "--algo", "1f1b", *SMALL], "--out"),
    "dump-chrome-out": (lambda ctx: ["dump", "--algo", "1f1b", *SMALL, "--format", "chrome"], "--out"),
    "viz-out": (lambda ctx: ["viz", str(ctx.golden / "all" / "1f1b")], "--out"),
    "viz-chrome": (
        lambda ctx: ["viz", str(ctx.golden / "all" / "1f1b"), "--out", str(ctx.cwd / "v.html")],
        "--chrome",
    ),
    "compare-html": (lambda ctx: ["compare", "--algo", "1f1b", *SMALL], "--html"),
}


def _written_through(rel_target: str) -> Callable[[Ctx, list[Outcome]], str | None]:
    """On success the symlink's target holds the output (it was written through the link)."""

    def check(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
        if outcomes[0].rc != 0:
            return None
        target = ctx.root / rel_target
        if not target.is_file() or target.stat().st_size == 0:
            return f"exit 0 but {rel_target} (the symlink's target) holds no output"
        return None

    return check


for verb, (prefix, flag) in WRITERS.items():
    base = verb.split("-")[0]
    cases += [
        Case(
            f"{verb}-onto-char-device",
            "2",
            base,
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: [*prefix(ctx), flag, str(ctx.null_device("out.dev"))],
            EITHER(flag, "out.dev"),
            outputs=("out.dev", "cwd/v.html"),
        ),
        Case(
            f"{verb}-onto-fifo",
            "2",
            base,
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: [*prefix(ctx), flag, str(ctx.fifo("out.fifo"))],
            EITHER(flag, "out.fifo"),
            outputs=("out.fifo", "cwd/v.html"),
            during=lambda ctx: fifo_reader(ctx.root / "out.fifo"),
            timeout=60,
        ),
        Case(
            f"{verb}-through-symlink",
            "2",
            base,
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: [
                *prefix(ctx),
                flag,
                str(ctx.symlink("cwd/link.out", ctx.write("in/target.out", "old\n"))),
            ],
            EITHER(flag, "link.out"),
            outputs=("in/target.out", "cwd/v.html"),
            check=_written_through("in/target.out"),
        ),
        Case(
            f"{verb}-dangling-symlink",
            "2",
            base,
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: [
                *prefix(ctx),
                flag,
                str(ctx.symlink("cwd/link.out", ctx.root / "in" / "new.out")),
            ],
            EITHER(flag, "link.out"),
            outputs=("in/new.out", "cwd/v.html"),
        ),
        Case(
            f"{verb}-symlink-loop",
            "2",
            base,
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: (
                ctx.symlink("cwd/a.out", ctx.cwd / "b.out"),
                ctx.symlink("cwd/b.out", ctx.cwd / "a.out"),
                [*prefix(ctx), flag, str(ctx.cwd / "a.out")],
            )[2],
            ERR(flag, "a.out"),
        ),
    ]
for verb in ("viz-out", "compare-html", "viz-chrome"):
    prefix, flag = WRITERS[verb]
    cases.append(
        Case(
            f"{verb}-onto-user-directory",
            "2",
            verb.split("-")[0],
            "output-file",
            lambda ctx, prefix=prefix, flag=flag: [*prefix(ctx), flag, str(ctx.victim)],
            ERR(flag, "victim"),
        )
    )
cases.append(
    Case(
        "dump-out-symlink-to-victim-replaced-not",
        "2",
        "dump",
        "output-file",
        lambda ctx: [
            "dump",
            "--algo",
            "1f1b",
            *SMALL,
            "--out",
            str(ctx.symlink("cwd/t.txt", ctx.victim / "thesis.txt")),
        ],
        EITHER("--out", "t.txt"),
        outputs=("victim/thesis.txt",),
        check=lambda ctx, o: None if os.path.islink(ctx.cwd / "t.txt") else "the symlink was replaced",
    )
)

# -- item 3: result directories with user files ----------------------------------------------------


def _sim(ctx: Ctx, *more: str) -> list[str]:
    return ["simulate", "--algo", "1f1b", *SMALL, "--out", str(ctx.out), *more]


def _user_dir(ctx: Ctx) -> list[str]:
    ctx.write("out/1f1b/NOTES.txt", "mine\n")
    return _sim(ctx)


def _plain_file(ctx: Ctx) -> list[str]:
    ctx.write("out/1f1b", "a file named like a run\n")
    return _sim(ctx)


def _ours_plus_notes(ctx: Ctx) -> list[str]:
    ctx.copy_golden("all/1f1b", "out/1f1b")
    ctx.write("out/1f1b/NOTES.txt", "mine\n")
    return _sim(ctx, "--fwd", "3")


def _ours_stale(ctx: Ctx) -> list[str]:
    ctx.copy_golden("pp8/1f1b", "out/1f1b")
    return _sim(ctx)


def _exact_ranks(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    ranks = sorted(p.name for p in (ctx.out / "1f1b").glob("pp_rank_*.json"))
    want = [f"pp_rank_{r}.json" for r in range(4)]
    if ranks != want:
        return f"out/1f1b holds {ranks} after a p=4 run over a p=8 one"
    if json.loads((ctx.out / "1f1b" / "summary.json").read_text())["pp"] != 4:
        return "summary.json not replaced"
    return None


RESULT = ("out/1f1b", "--out", "1f1b")
cases += [
    Case("simulate-result-dir-user-files", "3", "simulate", "result-dir", _user_dir, ERR(*RESULT)),
    Case("simulate-result-dir-is-plain-file", "3", "simulate", "result-dir", _plain_file, ERR(*RESULT)),
    Case(
        "simulate-result-dir-is-fifo",
        "3",
        "simulate",
        "result-dir",
        lambda ctx: (ctx.fifo("out/1f1b"), _sim(ctx))[1],
        ERR(*RESULT),
        timeout=30,
    ),
    Case(
        "simulate-result-dir-is-symlink-to-victim",
        "3",
        "simulate",
        "result-dir",
        lambda ctx: (ctx.symlink("out/1f1b", ctx.victim), _sim(ctx))[1],
        ERR(*RESULT),
    ),
    Case(
        "simulate-result-dir-user-subdir",
        "3",
        "simulate",
        "result-dir",
        lambda ctx: (ctx.write("out/1f1b/data/raw.bin", b"\0\1"), _sim(ctx))[1],
        ERR(*RESULT),
    ),
    Case(
        "simulate-result-dir-ours-plus-notes",
        "3",
        "simulate",
        "result-dir",
        _ours_plus_notes,
        EITHER(*RESULT),
        outputs=SIM_OUT,
    ),
    Case(
        "simulate-result-dir-ours-replaced",
        "3",
        "simulate",
        "result-dir",
        _ours_stale,
        OK(),
        outputs=SIM_OUT,
        check=_exact_ranks,
    ),
    Case(
        "simulate-out-holds-a-user-dir-named-like-a-temporary",
        "own",
        "simulate",
        "result-dir",
        lambda ctx: (ctx.write("out/.primuspp-tmp-keep/sub/data.txt", "mine\n"), _sim(ctx))[1],
        OK(),
        outputs=SIM_OUT,
    ),
    Case(
        "simulate-lock-path-is-fifo",
        "own",
        "simulate",
        "result-dir",
        lambda ctx: (ctx.fifo("out/.primuspp.lock"), _sim(ctx))[1],
        ERR("--out", ".primuspp.lock"),
        timeout=30,
    ),
    Case(
        "simulate-out-is-plain-file",
        "3",
        "simulate",
        "result-dir",
        lambda ctx: ["simulate", "--algo", "1f1b", *SMALL, "--out", str(ctx.write("in/out.txt", "x"))],
        ERR("--out", "out.txt"),
    ),
    Case(
        "simulate-config-output-dir-user-files",
        "3",
        "simulate",
        "result-dir",
        lambda ctx: (
            ctx.write("cwd/res/gpipe/thesis.md", "mine\n"),
            ["simulate", "--config", config(ctx, yaml_runs("{algorithm: gpipe}", head="output_dir: res\n"))],
        )[1],
        ERR("gpipe", "res", "output_dir"),
    ),
    Case(
        "dump-out-dir-fifo-named-like-a-table",
        "2",
        "dump",
        "output-dir",
        lambda ctx: (
            ctx.fifo("out/1f1b.txt"),
            ["dump", "--algo", "1f1b", "--algo", "gpipe", *SMALL, "--out", str(ctx.out)],
        )[1],
        EITHER("1f1b.txt", "--out"),
        outputs=("out", "out/gpipe.txt", "out/1f1b.txt"),
        during=lambda ctx: fifo_reader(ctx.out / "1f1b.txt"),
    ),
    Case(
        "dump-out-dir-symlink-named-like-a-table",
        "2",
        "dump",
        "output-dir",
        lambda ctx: (
            ctx.symlink("out/1f1b.txt", ctx.victim / "thesis.txt"),
            ["dump", "--algo", "1f1b", "--algo", "gpipe", *SMALL, "--out", str(ctx.out)],
        )[1],
        EITHER("1f1b.txt", "--out"),
        outputs=("out", "out/gpipe.txt", "victim/thesis.txt"),
    ),
]

# -- item 5: two runs into one --out ------------------------------------------------------------------------


def _two_runs(ctx: Ctx) -> list[list[str]]:
    """A slow run (every algorithm, p=32 m=512: seconds of simulating, then ~70 MB of results) and a quick one
    (the same names at p=4 m=8) into the same --out."""
    return [
        ["simulate", "--pp", "32", "--mb", "512", "--fwd", "1000", "--out", str(ctx.out)],
        ["simulate", *SMALL, "--fwd", "2000", "--out", str(ctx.out)],
    ]


def _second_while_first_writes(ctx: Ctx, argvs: list[list[str]], logs: Path, timeout: float) -> list[Outcome]:
    """Start the slow run; once anything appears in --out (its lock, or its first result being written), start
    the quick one. Each outcome's `ended` is when that process exited."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    first = start(argvs[0], ctx.cwd, logs, heavy=False)
    while time.monotonic() < deadline and first[0].poll() is None:
        if ctx.out.is_dir() and any(ctx.out.iterdir()):
            break
        time.sleep(0.01)
    second = start(argvs[1], ctx.cwd, logs, heavy=False)
    ends: dict[int, float] = {}
    while time.monotonic() < deadline and len(ends) < 2:
        for i, (proc, _, _) in enumerate((first, second)):
            if i not in ends and proc.poll() is not None:
                ends[i] = time.monotonic() - t0
        time.sleep(0.01)
    outcomes = [finish(*first, deadline, t0), finish(*second, deadline, t0)]
    for i, o in enumerate(outcomes):
        o.ended = ends.get(i, o.ended)
    return outcomes


def _serialised(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    slow, quick = outcomes
    if slow.rc != 0:
        return "the first run did not succeed"
    if quick.rc == 0 and quick.ended < slow.ended:
        return (
            f"the second run wrote into the --out the first was writing and finished first "
            f"({quick.ended:.1f} s vs {slow.ended:.1f} s): no lock, neither refused nor waited"
        )
    forwards = {json.loads(p.read_text())["costs"]["forward"] for p in ctx.out.glob("*/config.json")}
    pps = {json.loads(p.read_text())["pp_size"] for p in ctx.out.glob("*/config.json")}
    if len(forwards) != 1 or len(pps) != 1:
        return f"the result dirs mix both runs (forward {sorted(forwards)}, pp {sorted(pps)})"
    return None


cases.append(
    Case(
        "simulate-concurrent-same-out",
        "5",
        "simulate",
        "result-dir",
        _two_runs,
        EITHER("--out", "lock", "out"),
        outputs=(*SIM_OUT, "out/*lock*", "out/.*", "out/.*/*"),
        check=_serialised,
        runner=_second_while_first_writes,
        timeout=300,
    )
)


def _two_same_runs(ctx: Ctx) -> list[list[str]]:
    every = ["--pp", "16", "--mb", "64"]
    return [
        ["simulate", *every, "--fwd", "1000", "--out", str(ctx.out)],
        ["simulate", *every, "--fwd", "2000", "--out", str(ctx.out)],
    ]


def _one_run_wins(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    if not any(o.rc == 0 for o in outcomes):
        return "neither run succeeded"
    forwards = {json.loads(p.read_text())["costs"]["forward"] for p in ctx.out.glob("*/config.json")}
    if len(forwards) != 1:
        return f"the result dirs mix both runs (forward costs {sorted(forwards)})"
    return None


cases.append(
    Case(
        "simulate-concurrent-same-names",
        "5",
        "simulate",
        "result-dir",
        _two_same_runs,
        EITHER("--out", "lock", "out"),
        outputs=(*SIM_OUT, "out/*lock*", "out/.*", "out/.*/*"),
        check=_one_run_wins,
        timeout=240,
    )
)

# -- item 9: immutable outputs ---------------------------------------------------------------------


def _immutable(ctx: Ctx, rel: str) -> Path:
    import subprocess

    path = ctx.root / rel
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chattr", "+i", str(path)], check=True)
    return path


cases += [
    Case(
        "simulate-out-immutable",
        "9",
        "simulate",
        "output-dir",
        lambda ctx: ["simulate", "--algo", "1f1b", *SMALL, "--out", str(_immutable(ctx, "out"))],
        ERR("--out", "out"),
        needs="chattr",
    ),
    Case(
        "simulate-out-under-immutable",
        "9",
        "simulate",
        "output-dir",
        lambda ctx: ["simulate", "--algo", "1f1b", *SMALL, "--out", str(_immutable(ctx, "ro") / "res")],
        ERR("--out", "ro"),
        needs="chattr",
    ),
    Case(
        "dump-out-immutable-dir",
        "9",
        "dump",
        "output-dir",
        lambda ctx: [
            "dump",
            "--algo",
            "1f1b",
            "--algo",
            "gpipe",
            *SMALL,
            "--out",
            str(_immutable(ctx, "out")),
        ],
        ERR("--out", "out"),
        needs="chattr",
    ),
    Case(
        "viz-out-in-immutable-dir",
        "9",
        "viz",
        "output-file",
        lambda ctx: ["viz", str(ctx.golden / "all" / "1f1b"), "--out", str(_immutable(ctx, "ro") / "v.html")],
        ERR("--out", "v.html"),
        needs="chattr",
    ),
    Case(
        "compare-html-in-immutable-dir",
        "9",
        "compare",
        "output-file",
        lambda ctx: ["compare", "--algo", "1f1b", *SMALL, "--html", str(_immutable(ctx, "ro") / "c.html")],
        ERR("--html", "c.html"),
        needs="chattr",
    ),
    Case(
        "simulate-out-under-plain-file",
        "9",
        "simulate",
        "output-dir",
        lambda ctx: ["simulate", "--algo", "1f1b", *SMALL, "--out", str(ctx.victim / "thesis.txt" / "res")],
        ERR("--out", "thesis.txt"),
    ),
]

# -- own: outputs that should just work ------------------------------------------------------------


def _is_html(rel: str) -> Callable[[Ctx, list[Outcome]], str | None]:
    def check(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
        p = ctx.root / rel
        if not p.is_file() or not p.read_text(errors="replace").startswith("<!DOCTYPE html>"):
            return f"{rel} is not an HTML page"
        return None

    return check


cases += [
    Case(
        "viz-default-output-in-cwd",
        "own",
        "viz",
        "output-file",
        lambda ctx: ["viz", str(ctx.golden / "all" / "zbv")],
        OK(),
        outputs=("cwd/pp_viz.html",),
        check=_is_html("cwd/pp_viz.html"),
    ),
    Case(
        "viz-out-new-nested-dir",
        "own",
        "viz",
        "output-file",
        lambda ctx: ["viz", str(ctx.golden / "all" / "zbv"), "--out", str(ctx.out / "a" / "b.html")],
        OK(),
        outputs=("out", "out/a", "out/a/b.html"),
        check=_is_html("out/a/b.html"),
    ),
    Case(
        "compare-html-replaces-own-file",
        "own",
        "compare",
        "output-file",
        lambda ctx: (
            ctx.write("cwd/c.html", "old"),
            ["compare", "--algo", "1f1b", *SMALL, "--html", "c.html"],
        )[1],
        OK(),
        outputs=("cwd/c.html",),
        check=_is_html("cwd/c.html"),
    ),
    Case(
        "dump-out-stdout-default",
        "own",
        "dump",
        "output-file",
        lambda ctx: ["dump", "--algo", "1f1b", *SMALL],
        OK(),
        check=lambda ctx, o: None if o[0].stdout.startswith("# primuspp schedule") else "no table on stdout",
    ),
    Case(
        "simulate-default-out-in-cwd",
        "own",
        "simulate",
        "output-dir",
        lambda ctx: ["simulate", "--algo", "gpipe", *SMALL],
        OK(),
        outputs=tuple(p.replace("out", "cwd/pp_simulation_result", 1) for p in SIM_OUT),
    ),
]
