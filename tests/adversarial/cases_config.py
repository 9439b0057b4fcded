"""`--config` YAML inputs (ours and Primus' `schedulers:`), for every verb that reads one: run names that
escape the output (item 1), FIFOs and huge files (item 8), bad encodings and nesting (item 9), non-finite
costs (item 10), and the usual hostile values (own)."""

from __future__ import annotations

from tests.adversarial.build import SIM_OUT, alias_bomb, config, deep_yaml, primus_yaml, yaml_runs
from tests.adversarial.harness import EITHER, ERR, OK, Case, Ctx

NAME_KEYS = ("name",)
cases: list[Case] = []


def _sim(cfg: str, ctx: Ctx) -> list[str]:
    return ["simulate", "--config", cfg, "--out", str(ctx.out)]


# -- item 1: run names must be one safe path component ---------------------------------------------

BAD_NAMES = {
    "dotdot-victim": '"../victim"',
    "dotdot": '".."',
    "dot": '"."',
    "nested": '"a/b"',
    "back-and-forth": '"x/../../victim"',
    "newline": '"bad\\nname"',
    "too-long": '"' + "n" * 300 + '"',
    "nul": '"a\\0b"',
}
for tag, name in BAD_NAMES.items():
    cases.append(
        Case(
            f"simulate-config-name-{tag}",
            "1",
            "simulate",
            "config",
            lambda ctx, name=name: _sim(config(ctx, yaml_runs(f"{{algorithm: 1f1b, name: {name}}}")), ctx),
            ERR(*NAME_KEYS),
        )
    )

cases.append(
    Case(
        "simulate-config-name-empty",
        "1",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, yaml_runs('{algorithm: 1f1b, name: ""}')), ctx),
        EITHER(*NAME_KEYS),  # an empty name may mean "the default name"
        outputs=SIM_OUT,
        check=lambda ctx, o: (
            None
            if o[0].rc != 0 or (ctx.out / "1f1b" / "summary.json").is_file()
            else "an empty name wrote somewhere else than the default out/1f1b"
        ),
    )
)
cases.append(
    Case(
        "simulate-config-name-absolute",
        "1",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, yaml_runs("{algorithm: 1f1b, name: %s}" % (ctx.victim / "sub"))), ctx),
        ERR(*NAME_KEYS),
    )
)
cases.append(
    Case(
        "simulate-config-name-second-run-escapes",
        "1",
        "simulate",
        "config",
        lambda ctx: _sim(
            config(ctx, yaml_runs("{algorithm: 1f1b, name: ok}", "{algorithm: gpipe, name: ../victim}")), ctx
        ),
        ERR(*NAME_KEYS),
    )
)
for tag, name in {"dotdot-victim": "../victim", "dotdot": "..", "dot": ".", "abs": None}.items():
    cases.append(
        Case(
            f"simulate-primus-name-{tag}",
            "1",
            "simulate",
            "config-primus",
            lambda ctx, name=name: _sim(
                config(
                    ctx,
                    primus_yaml(
                        "{class: primus.ScheduleZeroBubble, name: '%s', pp_size: 4, micro_batches: 8}"
                        % (name or ctx.victim)
                    ),
                ),
                ctx,
            ),
            ERR(*NAME_KEYS),
        )
    )
# dump writes `<out>/<name>.<ext>` for several runs: `../victim/thesis` would overwrite victim/thesis.txt
cases.append(
    Case(
        "dump-config-name-overwrites-victim",
        "1",
        "dump",
        "config",
        lambda ctx: [
            "dump",
            "--config",
            config(ctx, yaml_runs("{algorithm: 1f1b, name: ../victim/thesis}", "{algorithm: gpipe}")),
            "--out",
            str(ctx.out),
        ],
        ERR(*NAME_KEYS),
    )
)
cases.append(
    Case(
        "dump-primus-name-abs",
        "1",
        "dump",
        "config-primus",
        lambda ctx: [
            "dump",
            "--config",
            config(
                ctx,
                primus_yaml(
                    "{class: a.Schedule1F1B, name: '%s', pp_size: 4, micro_batches: 8}" % (ctx.victim / "x"),
                    "{class: a.ScheduleZeroBubble, pp_size: 4, micro_batches: 8}",
                ),
            ),
            "--out",
            str(ctx.out),
        ],
        ERR(*NAME_KEYS),
    )
)
for verb in ("compare", "viz"):
    cases.append(
        Case(
            f"{verb}-config-name-dotdot",
            "1",
            verb,
            "config",
            lambda ctx, verb=verb: (
                [verb, "--config", config(ctx, yaml_runs("{algorithm: 1f1b, name: ../victim}"))]
                if verb == "compare"
                else [verb, config(ctx, yaml_runs("{algorithm: 1f1b, name: ../victim}")), "--out", "x.html"]
            ),
            ERR(*NAME_KEYS),
        )
    )
cases.append(
    Case(
        "simulate-config-name-safe-chars",
        "1",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, yaml_runs("{algorithm: 1f1b, name: run-1_a.b+c}")), ctx),
        OK(),
        outputs=SIM_OUT,
        check=lambda ctx, _: (
            None if (ctx.out / "run-1_a.b+c" / "summary.json").is_file() else "no result dir"
        ),
    )
)

# -- item 8: special and huge config files ---------------------------------------------------------

FIFO_KEYS = ("c.fifo", "--config", "config")
for verb in ("simulate", "dump", "compare"):
    cases.append(
        Case(
            f"{verb}-config-fifo",
            "8",
            verb,
            "config",
            lambda ctx, verb=verb: (
                [verb, "--config", str(ctx.fifo("in/c.fifo"))]
                + (["--out", str(ctx.out)] if verb != "compare" else [])
            ),
            ERR(*FIFO_KEYS),
            timeout=20,
        )
    )
cases.append(
    Case(
        "viz-config-fifo-yaml",
        "8",
        "viz",
        "config",
        lambda ctx: ["viz", str(ctx.fifo("in/c.yaml")), "--out", "x.html"],
        ERR("c.yaml"),
        timeout=20,
    )
)
cases.append(
    Case(
        "train-emulate-config-fifo",
        "8",
        "train",
        "config",
        lambda ctx: ["train", "--emulate", "--config", str(ctx.fifo("in/c.fifo")), "--steps", "10000"],
        ERR(*FIFO_KEYS),
        timeout=30,
        heavy=True,
    )
)
HUGE = 100 * 2**20


def _huge_config(ctx: Ctx) -> str:
    head = yaml_runs("{algorithm: 1f1b}").encode() + b"# "
    path = ctx.inp / "huge.yaml"
    with open(path, "wb") as f:
        f.write(head + b"x" * (HUGE - len(head)) + b"\n")
    return str(path)


for verb in ("simulate", "viz"):
    cases.append(
        Case(
            f"{verb}-config-100mb",
            "8",
            verb,
            "config",
            lambda ctx, verb=verb: (
                _sim(_huge_config(ctx), ctx)
                if verb == "simulate"
                else ["viz", _huge_config(ctx), "-o", "x.html"]
            ),
            ERR("huge.yaml"),
            timeout=30,
        )
    )

# -- item 9: encodings, nesting --------------------------------------------------------------------

ENC = {
    "latin1": "pp: 4\nmicro_batches: 8\n# caf\xe9\nruns:\n  - {algorithm: 1f1b}\n".encode("latin-1"),
    "utf16": yaml_runs("{algorithm: 1f1b}").encode("utf-16"),
    "binary": bytes(range(256)) * 8,
}
for verb in ("simulate", "dump", "compare", "viz"):
    for tag, data in ENC.items():
        if verb in ("dump", "compare", "viz") and tag != "latin1":
            continue
        cases.append(
            Case(
                f"{verb}-config-{tag}",
                "9",
                verb,
                "config",
                lambda ctx, verb=verb, data=data: (
                    [verb, "--config", config(ctx, data)]
                    + (["--out", str(ctx.out)] if verb != "compare" else [])
                    if verb != "viz"
                    else ["viz", config(ctx, data), "-o", "x.html"]
                ),
                ERR("c.yaml"),
            )
        )
cases.append(
    Case(
        "train-emulate-config-latin1",
        "9",
        "train",
        "config",
        lambda ctx: ["train", "--emulate", "--config", config(ctx, ENC["latin1"]), "--steps", "10000"],
        ERR("c.yaml"),
        timeout=30,
        heavy=True,
    )
)
cases.append(
    Case(
        "simulate-config-bom",
        "9",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, b"\xef\xbb\xbf" + yaml_runs("{algorithm: 1f1b}").encode()), ctx),
        OK(),
        outputs=SIM_OUT,
    )
)
cases.append(
    Case(
        "simulate-config-nested-100k",
        "9",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, deep_yaml(100_000)), ctx),
        ERR("c.yaml", "runs", "nest"),
    )
)
cases.append(
    Case(
        "viz-config-nested-100k",
        "9",
        "viz",
        "config",
        lambda ctx: ["viz", config(ctx, deep_yaml(100_000)), "-o", "x.html"],
        ERR("c.yaml", "runs", "nest"),
    )
)
cases.append(
    Case(
        "simulate-config-alias-bomb",
        "9",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, alias_bomb()), ctx),
        ERR("c.yaml", "costs", "a0", "alias"),
        timeout=30,
    )
)

# -- item 10: non-finite costs in YAML -------------------------------------------------------------

NONFINITE = {
    "forward-inf": ("costs: {forward: .inf}\n", ("forward",)),
    "backward-list-inf": ("costs: {backward: [1, .inf, 1, 1]}\n", ("backward",)),
    "wgrad-neg-inf": ("costs: {wgrad: -.inf}\n", ("wgrad",)),
    "comm-inf": ("costs: {comm: .inf}\n", ("comm",)),
    "activation-inf": ("costs: {activation: .inf}\n", ("activation",)),
    "mem-limit-inf": ("mem_limit: .inf\n", ("mem_limit",)),
    "forward-1e400": ("costs: {forward: 1e400}\n", ("forward",)),
    "forward-negative": ("costs: {forward: -5}\n", ("forward",)),
}
for tag, (extra, keys) in NONFINITE.items():
    cases.append(
        Case(
            f"simulate-config-{tag}",
            "10",
            "simulate",
            "config",
            lambda ctx, extra=extra: _sim(
                config(ctx, yaml_runs("{algorithm: 1f1b}", head="pp: 4\nmicro_batches: 8\n" + extra)), ctx
            ),
            ERR(*keys),
        )
    )
cases.append(
    Case(
        "simulate-config-run-cost-inf",
        "10",
        "simulate",
        "config",
        lambda ctx: _sim(config(ctx, yaml_runs("{algorithm: 1f1b, costs: {forward: .inf}}")), ctx),
        ERR("forward"),
    )
)
cases.append(
    Case(
        "simulate-primus-fwd-time-inf",
        "10",
        "simulate",
        "config-primus",
        lambda ctx: _sim(
            config(
                ctx,
                primus_yaml("{class: a.Schedule1F1B, pp_size: 4, micro_batches: 8}", head="fwd_time: .inf\n"),
            ),
            ctx,
        ),
        ERR("fwd_time", "forward"),
    )
)
cases.append(
    Case(
        "simulate-primus-cost-f-nan",
        "10",
        "simulate",
        "config-primus",
        lambda ctx: _sim(
            config(
                ctx,
                primus_yaml(
                    "{class: a.ScheduleZeroBubbleHeuristic, pp_size: 4, micro_batches: 8, cost_f: .nan}"
                ),
            ),
            ctx,
        ),
        ERR("cost_f", "forward"),
    )
)
cases.append(
    Case(
        "train-emulate-config-forward-inf",
        "10",
        "train",
        "config",
        lambda ctx: [
            "train",
            "--emulate",
            "--config",
            config(ctx, yaml_runs("{algorithm: 1f1b}", head="costs: {forward: .inf}\n")),
            "--steps",
            "10000",
        ],
        ERR("forward"),
        timeout=30,
        heavy=True,
    )
)

# -- own: shapes, types, missing keys --------------------------------------------------------------

OWN = {
    "empty-file": ("", ("c.yaml",)),
    "only-comment": ("# nothing\n", ("c.yaml",)),
    "list-top": ("- algorithm: 1f1b\n", ("c.yaml",)),
    "scalar-top": ("42\n", ("c.yaml",)),
    "missing-runs": ("pp: 4\n", ("runs",)),
    "runs-empty": ("runs: []\n", ("runs",)),
    "runs-mapping": ("runs: {algorithm: 1f1b}\n", ("runs",)),
    "runs-entry-string": ("runs: [1f1b]\n", ("runs",)),
    "unknown-key": ("pipeline: 4\nruns: [{algorithm: 1f1b}]\n", ("pipeline",)),
    "pp-string": ("pp: eight\nruns: [{algorithm: 1f1b}]\n", ("pp",)),
    "pp-zero": ("pp: 0\nruns: [{algorithm: 1f1b}]\n", ("pp",)),
    "pp-negative": ("pp: -4\nruns: [{algorithm: 1f1b}]\n", ("pp",)),
    "pp-float": ("pp: 4.5\nruns: [{algorithm: 1f1b}]\n", ("pp",)),
    "pp-huge": ("pp: 99999999999999999999\nruns: [{algorithm: 1f1b}]\n", ("pp",)),
    "mb-zero": ("micro_batches: 0\nruns: [{algorithm: 1f1b}]\n", ("micro_batches",)),
    "vpp-zero": ("runs: [{algorithm: 1f1b-interleaved, vpp: 0}]\n", ("vpp",)),
    "algorithm-unknown": ("runs: [{algorithm: quantum-bubble}]\n", ("quantum-bubble", "algorithm")),
    "algorithm-missing": ("runs: [{name: x}]\n", ("algorithm",)),
    "algorithm-number": ("runs: [{algorithm: 7}]\n", ("algorithm",)),
    "params-unknown": ("runs: [{algorithm: 1f1b, params: {frobnicate: 1}}]\n", ("frobnicate", "params")),
    "params-list": ("runs: [{algorithm: zbv, params: [1, 2]}]\n", ("params",)),
    "costs-string": ("costs: fast\nruns: [{algorithm: 1f1b}]\n", ("costs",)),
    "malformed-yaml": ("runs: [{algorithm: 1f1b\n", ("c.yaml",)),
    "tab-indent": "runs:\n\t- algorithm: 1f1b\n",
    "dup-keys-file-algo": ("runs: [{algorithm: 'file:/nonexistent/t.json'}]\n", ("/nonexistent/t.json",)),
}
OWN["tab-indent"] = (OWN["tab-indent"], ("c.yaml",))
for tag, (text, keys) in OWN.items():
    cases.append(
        Case(
            f"simulate-config-{tag}",
            "own",
            "simulate",
            "config",
            lambda ctx, t=text: _sim(config(ctx, t), ctx),
            ERR(*keys),
        )
    )
PRIMUS_OWN = {
    "schedulers-empty": ("schedulers: []\n", ("schedulers",)),
    "schedulers-mapping": ("schedulers: {class: a.Schedule1F1B}\n", ("schedulers",)),
    "class-unknown": ("schedulers: [{class: os.system, pp_size: 4, micro_batches: 8}]\n", ("class",)),
    "class-missing": ("schedulers: [{pp_size: 4}]\n", ("class",)),
    "pp-size-string": ("schedulers: [{class: a.Schedule1F1B, pp_size: four, micro_batches: 8}]\n", ("pp",)),
    "unknown-top-key": ("evil: 1\nschedulers: [{class: a.Schedule1F1B}]\n", ("evil",)),
    "memory-config-bad": (
        "schedulers: [{class: a.ScheduleZBVGreedy, memory_config: all}]\n",
        ("memory_config",),
    ),
    "entry-string": ("schedulers: [Schedule1F1B]\n", ("schedulers",)),
}
for tag, (text, keys) in PRIMUS_OWN.items():
    cases.append(
        Case(
            f"simulate-primus-{tag}",
            "own",
            "simulate",
            "config-primus",
            lambda ctx, t=text: _sim(config(ctx, t), ctx),
            ERR(*keys),
        )
    )
for verb in ("simulate", "dump", "compare"):
    for tag, target in (("dir", "in"), ("missing", "in/nope.yaml"), ("dangling-link", "in/dangling.yaml")):
        cases.append(
            Case(
                f"{verb}-config-{tag}",
                "own",
                verb,
                "config",
                lambda ctx, verb=verb, tag=tag, target=target: (
                    (
                        ctx.symlink("in/dangling.yaml", ctx.root / "gone.yaml")
                        if tag == "dangling-link"
                        else None
                    ),
                    [verb, "--config", str(ctx.root / target)]
                    + (["--out", str(ctx.out)] if verb != "compare" else []),
                )[1],
                ERR(target.split("/")[-1], "--config", "config"),
            )
        )
cases.append(
    Case(
        "simulate-config-symlink-loop",
        "own",
        "simulate",
        "config",
        lambda ctx: (
            ctx.symlink("in/loop1.yaml", ctx.inp / "loop2.yaml"),
            ctx.symlink("in/loop2.yaml", ctx.inp / "loop1.yaml"),
            _sim(str(ctx.inp / "loop1.yaml"), ctx),
        )[2],
        ERR("loop1.yaml", "--config"),
    )
)
cases.append(
    Case(
        "simulate-primus-valid",
        "own",
        "simulate",
        "config-primus",
        lambda ctx: _sim(
            config(
                ctx,
                primus_yaml(
                    "{class: primus.Schedule1F1B, pp_size: 4, micro_batches: 8}",
                    "{class: primus.ScheduleZBVGreedy, memory_config: half, pp_size: 4, micro_batches: 8}",
                ),
            ),
            ctx,
        ),
        OK(),
        outputs=SIM_OUT,
    )
)
