"""Numbers in flags (`--pp`, `--mb`, `--fwd`, `--mem-limit`, `--max-nodes`, ...) for simulate, dump,
compare and train --emulate: absurd sizes (item 7), overflowing and non-finite values (items 9, 10), zero
costs (item 12) and the usual hostile values (own)."""

from __future__ import annotations

import json

from tests.adversarial.build import SIM_OUT, SMALL
from tests.adversarial.harness import ERR, OK, REPO, Case, Ctx, Expect, Outcome

cases: list[Case] = []


def _args(verb: str, ctx: Ctx, *flags: str) -> list[str]:
    if verb in ("simulate", "dump"):
        return [verb, *flags, "--out", str(ctx.cwd / "t.txt" if verb == "dump" else ctx.out)]
    if verb == "train":
        return ["train", "--emulate", "--steps", "10000", *flags]
    return [verb, *flags]


def _add(id_: str, item: str, verb: str, flags: list[str], expect, **kw) -> None:
    heavy = verb == "train"
    cases.append(
        Case(
            id_,
            item,
            verb,
            "flags",
            lambda ctx, verb=verb, flags=flags: _args(verb, ctx, *flags),
            expect,
            timeout=kw.pop("timeout", 30 if heavy else 60),
            heavy=heavy,
            **kw,
        )
    )


# -- item 7: sizes whose node count would exhaust memory -------------------------------------------
NODES = ("--max-nodes", "nodes")
#: an absurd size may also be refused earlier, by the flag's own range (or the local-rank limit of train)
NODES_OR_RANGE = (*NODES, "--pp", "--mb")
for verb in ("simulate", "dump", "compare", "train"):
    _add(
        f"{verb}-pp4096-mb65536",
        "7",
        verb,
        ["--algo", "1f1b", "--pp", "4096", "--mb", "65536"],
        ERR(*NODES_OR_RANGE),
    )
_add(
    "simulate-pp1e6-mb1000",
    "7",
    "simulate",
    ["--algo", "1f1b", "--pp", "1000000", "--mb", "1000"],
    ERR(*NODES_OR_RANGE),
)
_add(
    "simulate-pp2-mb1e9",
    "7",
    "simulate",
    ["--algo", "1f1b", "--pp", "2", "--mb", "1000000000"],
    ERR(*NODES_OR_RANGE),
)
_add("simulate-every-algo-pp512-mb4096", "7", "simulate", ["--pp", "512", "--mb", "4096"], ERR(*NODES))
_add(
    "dump-check-pp4096-mb65536",
    "7",
    "dump",
    ["--check", "--algo", "zbv", "--pp", "4096", "--mb", "65536"],
    ERR(*NODES),
)
_add(
    "simulate-max-nodes-too-small",
    "7",
    "simulate",
    ["--max-nodes", "100", "--algo", "1f1b", *SMALL],
    ERR("--max-nodes"),
)
_add(
    "simulate-max-nodes-zero",
    "7",
    "simulate",
    ["--max-nodes", "0", "--algo", "1f1b", *SMALL],
    ERR("--max-nodes"),
)
_add(
    "simulate-max-nodes-negative",
    "7",
    "simulate",
    ["--max-nodes", "-5", "--algo", "1f1b", *SMALL],
    ERR("--max-nodes"),
)
_add(
    "simulate-max-nodes-word",
    "7",
    "simulate",
    ["--max-nodes", "lots", "--algo", "1f1b", *SMALL],
    ERR("--max-nodes"),
)
_add(
    "simulate-max-nodes-raised",
    "7",
    "simulate",
    ["--max-nodes", "100000000", "--algo", "1f1b", "--pp", "8", "--mb", "16"],
    OK(),
    outputs=SIM_OUT,
)

# -- item 9: numbers that overflow -----------------------------------------------------------------
HUGE = "99999999999999999999"
for verb in ("simulate", "dump", "compare", "train"):
    _add(f"{verb}-pp-20-digits", "9", verb, ["--algo", "1f1b", "--pp", HUGE, "--mb", "8"], ERR("--pp"))
_add(
    "simulate-mb-20-digits",
    "9",
    "simulate",
    ["--algo", "1f1b", "--pp", "4", "--mb", HUGE],
    ERR("--mb", "--micro-batches"),
)
_add(
    "simulate-vpp-20-digits",
    "9",
    "simulate",
    ["--algo", "1f1b-interleaved", *SMALL, "--vpp", HUGE],
    ERR("--vpp"),
)
for verb in ("simulate", "compare"):
    for value in ("inf", "nan", "1e308", "-inf"):
        _add(
            f"{verb}-mem-limit-{value}",
            "9",
            verb,
            ["--algo", "zbv", *SMALL, "--mem-limit", value],
            ERR("--mem-limit"),
        )
_add("compare-recommend-mem-limit-nan", "9", "compare", [*SMALL, "--mem-limit", "nan"], ERR("--mem-limit"))

# -- item 10: non-finite and negative costs, --mem-limit -1 ----------------------------------------
for verb in ("simulate", "dump", "compare", "train"):
    _add(f"{verb}-fwd-inf", "10", verb, ["--algo", "1f1b", *SMALL, "--fwd", "inf"], ERR("--fwd"))
for flag, value in (
    ("--bwd", "-inf"),
    ("--wgrad", "1e400"),
    ("--comm", "inf"),
    ("--fwd", "-1"),
    ("--bwd", "-0.5"),
):
    _add(
        f"simulate{flag}-{value}", "10", "simulate", ["--algo", "zero-bubble", *SMALL, flag, value], ERR(flag)
    )
_add(
    "dump-chrome-fwd-1e400",
    "10",
    "dump",
    ["--algo", "1f1b", *SMALL, "--format", "chrome", "--fwd", "1e400"],
    ERR("--fwd"),
)
for verb in ("simulate", "compare"):
    _add(
        f"{verb}-mem-limit-minus-1",
        "10",
        verb,
        ["--algo", "zbv", *SMALL, "--mem-limit", "-1"],
        ERR("--mem-limit"),
    )
_add(
    "compare-recommend-mem-limit-minus-1", "10", "compare", [*SMALL, "--mem-limit", "-1"], ERR("--mem-limit")
)
_add("train-emulate-bwd-nan", "10", "train", ["--pp", "2", "--mb", "2", "--bwd", "nan"], ERR("--bwd"))
_add("train-emulate-wgrad-minus", "10", "train", ["--pp", "2", "--mb", "2", "--wgrad", "-3"], ERR("--wgrad"))


# -- item 12: zero costs ---------------------------------------------------------------------------


def _memory_sane(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    doc = json.loads(outcomes[0].stdout)
    for r in doc["results"]:
        if not r["peak_memory"] > 0:
            return f"{r['name']}: peak memory {r['peak_memory']} with zero costs (expected > 0)"
    for f in sorted(ctx.out.glob("*/pp_rank_*.json")):
        for it, rec in json.loads(f.read_text()).items():
            low = min(rec.get("activation_memory_usage") or [0])
            if low < 0:
                return f"{f.relative_to(ctx.root)} iteration {it}: memory curve goes to {low}"
    return None


ZERO = ["--fwd", "0", "--bwd", "0", "--wgrad", "0", "--json"]
for algo, extra in (
    ("1f1b", []),
    ("gpipe", []),
    ("zero-bubble", []),
    ("zbv", []),
    ("1f1b-interleaved", ["--vpp", "2"]),
    ("dualpipe", []),
    ("dualpipe-v", []),
    ("v-min", []),
):
    _add(
        f"simulate-zero-costs-{algo}",
        "12",
        "simulate",
        ["--algo", algo, *SMALL, *extra, *ZERO],
        OK(),
        outputs=SIM_OUT,
        check=_memory_sane,
    )
_add(
    "simulate-zero-fwd-only",
    "12",
    "simulate",
    ["--algo", "zero-bubble", *SMALL, "--fwd", "0", "--json"],
    OK(),
    outputs=SIM_OUT,
    check=_memory_sane,
)


def _compare_peak(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    rows = json.loads(outcomes[0].stdout)["results"]
    bad = [r["name"] for r in rows if not r["peak_memory"] > 0]
    return f"peak memory not > 0 with zero costs: {bad}" if bad else None


_add(
    "compare-zero-costs",
    "12",
    "compare",
    ["--algo", "1f1b", "--algo", "zbv", *SMALL, *ZERO],
    OK(),
    check=_compare_peak,
)

# -- own: the usual hostile values -----------------------------------------------------------------
for verb in ("simulate", "dump", "compare"):
    _add(f"{verb}-pp-zero", "own", verb, ["--algo", "1f1b", "--pp", "0", "--mb", "8"], ERR("--pp", "pp"))
    _add(f"{verb}-pp-word", "own", verb, ["--algo", "1f1b", "--pp", "four"], ERR("--pp"))
    _add(f"{verb}-algo-unknown", "own", verb, ["--algo", "no-such-algo"], ERR("no-such-algo", "--algo"))
_add(
    "simulate-pp-negative",
    "own",
    "simulate",
    ["--algo", "1f1b", "--pp", "-3", "--mb", "8"],
    ERR("--pp", "pp"),
)
_add(
    "simulate-mb-zero",
    "own",
    "simulate",
    ["--algo", "1f1b", "--pp", "4", "--mb", "0"],
    ERR("--mb", "micro_batches"),
)
_add("simulate-pp-float", "own", "simulate", ["--algo", "1f1b", "--pp", "1.5"], ERR("--pp"))
_add(
    "simulate-vpp-zero",
    "own",
    "simulate",
    ["--algo", "1f1b-interleaved", *SMALL, "--vpp", "0"],
    ERR("--vpp", "vpp"),
)
_add(
    "simulate-vpp-3-for-zbv", "own", "simulate", ["--algo", "zbv", *SMALL, "--vpp", "3"], ERR("--vpp", "vpp")
)
_add("simulate-algo-empty", "own", "simulate", ["--algo", "", *SMALL], ERR("--algo", "algorithm"))
_add("simulate-algo-file-empty-path", "own", "simulate", ["--algo", "file:", *SMALL], ERR("--algo", "file:"))
_add("simulate-fwd-word", "own", "simulate", ["--algo", "1f1b", "--fwd", "fast"], ERR("--fwd"))
_add("simulate-comm-nan", "own", "simulate", ["--algo", "1f1b", *SMALL, "--comm", "nan"], ERR("--comm"))
_add(
    "simulate-costs-from-missing",
    "own",
    "simulate",
    ["--algo", "1f1b", "--costs-from", "/nonexistent/dir"],
    ERR("/nonexistent/dir", "--costs-from"),
)
_add("dump-format-bogus", "own", "dump", ["--algo", "1f1b", "--format", "pdf"], ERR("--format"))
_add(
    "dump-dualpipe-odd-pp",
    "own",
    "dump",
    ["--algo", "dualpipe", "--pp", "3", "--mb", "8"],
    ERR("pp", "dualpipe"),
)
_add("compare-unknown-option", "own", "compare", ["--frobnicate"], Expect("refused", ("--frobnicate",)))
_add(
    "simulate-json-ok",
    "own",
    "simulate",
    ["--algo", "1f1b", "--algo", "zbv", *SMALL, "--json"],
    OK(),
    outputs=SIM_OUT,
    check=lambda ctx, o: None if len(json.loads(o[0].stdout)["results"]) == 2 else "expected 2 results",
)
_add(
    "compare-json-ok",
    "own",
    "compare",
    ["--algo", "1f1b", "--algo", "gpipe", *SMALL, "--json"],
    OK(),
    check=lambda ctx, o: None if json.loads(o[0].stdout)["recommendation"] else "no recommendation",
)
_add(
    "compare-recommend-ok",
    "own",
    "compare",
    [*SMALL, "--mem-limit", "4", "--json"],
    OK(),
    check=lambda ctx, o: None if json.loads(o[0].stdout)["results"] else "no candidates",
)

# -- issue 34: --mem-limit has one unit per kind of run ----------------------------------------------
_PRIMUS_RUN = REPO / "tests" / "data" / "primus" / "pp_data_example" / "pp4_zb_new"


def _in_gib(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    doc = json.loads(outcomes[0].stdout)
    return None if "limit of 5 GiB" in doc["reason"] and "55.5 GiB" in doc["reason"] else doc["reason"]


cases += [
    Case(
        "compare-mem-limit-measured-gib",
        "own",
        "compare",
        "flags",
        lambda ctx: ["compare", str(_PRIMUS_RUN), "--mem-limit", "5", "--json"],
        OK(),
        check=_in_gib,
    ),
    Case(
        "compare-mem-limit-mixed-units",
        "own",
        "compare",
        "flags",
        lambda ctx: ["compare", str(ctx.golden / "all" / "zbv"), str(_PRIMUS_RUN), "--mem-limit", "4"],
        ERR("--mem-limit"),
    ),
    Case(
        "compare-mem-limit-simulated-and-measured",
        "own",
        "compare",
        "flags",
        lambda ctx: ["compare", str(_PRIMUS_RUN), "--algo", "1f1b", *SMALL, "--mem-limit", "4"],
        ERR("--mem-limit"),
    ),
]
