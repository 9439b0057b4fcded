"""`primuspp algorithms`, the `visualize` alias and the entry point itself."""

from __future__ import annotations

import json

from tests.adversarial.build import edit_rank, run_dir
from tests.adversarial.harness import ALGOS, ERR, OK, Case, Ctx, Expect, Outcome

cases: list[Case] = []


def _registry(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    names = {a["name"] for a in json.loads(outcomes[0].stdout)["algorithms"]}
    missing = set(ALGOS) - names
    return f"algorithms --json lacks {sorted(missing)}" if missing else None


def _nan_run(ctx: Ctx):
    d = run_dir(ctx)
    edit_rank(d, 0, lambda r: r["bwd_end"].__setitem__(0, float("nan")))
    return d


cases += [
    Case(
        "algorithms-json",
        "own",
        "algorithms",
        "flags",
        lambda ctx: ["algorithms", "--json"],
        OK(),
        check=_registry,
    ),
    Case(
        "algorithms-table",
        "own",
        "algorithms",
        "flags",
        lambda ctx: ["algorithms"],
        OK(),
        check=lambda ctx, o: None if "dualpipe" in o[0].stdout else "no table",
    ),
    Case(
        "algorithms-extra-argument",
        "own",
        "algorithms",
        "flags",
        lambda ctx: ["algorithms", "zbv"],
        ERR("zbv", "argument", "algorithms"),
    ),
    Case(
        "algorithms-unknown-option",
        "own",
        "algorithms",
        "flags",
        lambda ctx: ["algorithms", "--pp", "4"],
        Expect("refused", ("--pp",)),
    ),
    Case("unknown-verb", "own", "algorithms", "flags", lambda ctx: ["simulat"], ERR("simulat")),
    Case(
        "version",
        "own",
        "algorithms",
        "flags",
        lambda ctx: ["--version"],
        OK(),
        check=lambda ctx, o: None if o[0].stdout.startswith("primuspp ") else "no version",
    ),
    Case(
        "visualize-alias-ok",
        "own",
        "visualize",
        "result-dir",
        lambda ctx: ["visualize", str(ctx.golden / "all" / "v-half"), "--out", "v.html"],
        OK(),
        outputs=("cwd/v.html",),
    ),
    Case(
        "visualize-config-fifo",
        "8",
        "visualize",
        "config",
        lambda ctx: ["visualize", str(ctx.fifo("in/c.yml")), "--out", "v.html"],
        ERR("c.yml"),
        timeout=20,
    ),
    Case(
        "visualize-rank-nan",
        "9",
        "visualize",
        "pp_data",
        lambda ctx: ["visualize", str(_nan_run(ctx)), "--out", "v.html"],
        ERR("pp_rank_0.json"),
    ),
    Case(
        "visualize-no-args",
        "own",
        "visualize",
        "flags",
        lambda ctx: ["visualize"],
        ERR("PATHS", "paths", "Missing"),
    ),
]
