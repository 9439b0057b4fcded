"""pp_data directories and result directories read back by viz (and its alias visualize), compare and
`--costs-from` (simulate, train --emulate): sizes from config.json (item 7), FIFOs and huge files (item 8),
bad encodings, NaN, nesting (item 9), insane intervals and a pp_size that disagrees with the files (item 11),
the round trip of every algorithm's output (item 13), Primus' older interleaved dump (item 14), and broken
shapes (own)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.build import (
    SIM_OUT,
    deep_json,
    dump_dir,
    edit_json,
    edit_rank,
    old_interleaved_dump,
    raw_rank,
    run_dir,
)
from tests.adversarial.harness import ALGOS, EITHER, ERR, OK, REPO, Case, Ctx, Outcome

cases: list[Case] = []
READERS = ("viz", "compare", "costs-from")


def _argv(reader: str, ctx: Ctx, path: Path, *more: str) -> list[str]:
    if reader in ("viz", "visualize"):
        return [reader, str(path), "--out", str(ctx.cwd / "v.html"), *more]
    if reader == "compare":
        return ["compare", str(path), *more]
    if reader == "costs-from":
        return [
            "simulate",
            "--costs-from",
            str(path),
            "--algo",
            "1f1b",
            "--pp",
            "4",
            "--mb",
            "8",
            "--out",
            str(ctx.out),
            *more,
        ]
    return ["train", "--emulate", "--costs-from", str(path), "--pp", "4", "--steps", "10000", *more]


def _verb(reader: str) -> str:
    return {"costs-from": "simulate", "train-costs-from": "train"}.get(reader, reader)


OUTS = {"viz": ("cwd/v.html",), "visualize": ("cwd/v.html",), "costs-from": SIM_OUT}


def _add(id_: str, item: str, readers: tuple[str, ...], make: Callable[[Ctx], Path], expect, **kw) -> None:
    for reader in readers:
        heavy = reader.startswith("train")
        cases.append(
            Case(
                f"{reader}-ppdata-{id_}",
                item,
                _verb(reader),
                "pp_data",
                lambda ctx, reader=reader: _argv(reader, ctx, make(ctx)),
                expect,
                outputs=OUTS.get(reader, ()),
                timeout=30 if heavy or item in ("7", "8") else 60,
                heavy=heavy,
                **kw,
            )
        )


def _corrupt(change: Callable[[dict], None], rank: int = 1, algo: str = "1f1b") -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        d = dump_dir(ctx, algo)
        edit_rank(d, rank, change)
        return d

    return make


def _raw(text: str | bytes, rank: int = 0) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        d = dump_dir(ctx)
        raw_rank(d, rank, text)
        return d

    return make


def _config(change: Callable[[dict], None] | None = None, raw: bytes | None = None) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        d = dump_dir(ctx)
        if raw is not None:
            (d / "config.json").write_bytes(raw)
        else:
            edit_json(d / "config.json", change)
        return d

    return make


def _set(key, value):
    def change(d):
        d[key] = value

    return change


# -- item 7 ----------------------------------------------------------------------------------------
_add("pp-size-1e9", "7", READERS, _config(_set("pp_size", 1e9)), ERR("config.json", "pp_size"))
_add(
    "mb-1e12",
    "7",
    ("viz", "costs-from"),
    _config(_set("micro_batches", 10**12)),
    ERR("config.json", "micro_batches"),
)
# -- item 8 ----------------------------------------------------------------------------------------


def _fifo_rank(ctx: Ctx) -> Path:
    d = dump_dir(ctx)
    (d / "pp_rank_2.json").unlink()
    ctx.fifo("in/run/pp_rank_2.json")
    return d


def _fifo_file(name: str) -> Callable[[Ctx], Path]:
    def make(ctx: Ctx) -> Path:
        d = run_dir(ctx)
        (d / name).unlink()
        ctx.fifo(f"in/run/{name}")
        return d

    return make


def _huge_rank(ctx: Ctx) -> Path:
    d = dump_dir(ctx)
    p = d / "pp_rank_0.json"
    text = p.read_text()
    with open(p, "w") as f:
        f.write(" " * (100 * 2**20) + text)
    return d


_add("rank-fifo", "8", (*READERS, "train-costs-from"), _fifo_rank, ERR("pp_rank_2.json"))
_add("config-fifo", "8", ("viz", "costs-from"), _fifo_file("config.json"), ERR("config.json"))
_add("summary-fifo", "8", ("compare",), _fifo_file("summary.json"), ERR("summary.json"))
_add("schedule-fifo", "8", ("viz",), _fifo_file("schedule.json"), EITHER("schedule.json"))
# viz refuses the whole run before reading it: the line names the run and its pp_rank files
_add("rank-100mb", "8", ("viz",), _huge_rank, ERR("pp_rank_0.json", "pp_rank files"))
# -- item 9 ----------------------------------------------------------------------------------------
_add("rank-latin1", "9", READERS, _raw(b'{"1": {"fwd_start": [], "x": "caf\xe9"}}'), ERR("pp_rank_0.json"))
_add("config-latin1", "9", ("viz", "compare"), _config(raw=b'{"name": "caf\xe9"}'), ERR("config.json"))
_add(
    "rank-nan",
    "9",
    READERS,
    _corrupt(lambda r: r["fwd_start"].__setitem__(0, float("nan"))),
    ERR("pp_rank_1.json"),
)
_add(
    "rank-infinity",
    "9",
    ("viz",),
    _corrupt(lambda r: r["fwd_end"].__setitem__(0, float("inf"))),
    ERR("pp_rank_1.json"),
)
_add("rank-nested-100k", "9", ("viz", "compare"), _raw(deep_json(100_000)), ERR("pp_rank_0.json"))
_add(
    "summary-nested-100k",
    "9",
    ("compare",),
    lambda ctx: (run_dir(ctx) / "summary.json").write_text(deep_json(100_000)) and ctx.inp / "run",
    ERR("summary.json"),
)
# -- item 11: intervals that cannot be -------------------------------------------------------------
RANK1 = ("pp_rank_1.json",)
_add("negative-start", "11", READERS, _corrupt(lambda r: r["fwd_start"].__setitem__(0, -50.0)), ERR(*RANK1))


def _end_before_start(r: dict) -> None:
    r["bwd_end"][2] = r["bwd_start"][2] - 5.0


def _overlap(r: dict) -> None:
    # the second forward starts inside the first
    r["fwd_start"][1] = r["fwd_start"][0] + (r["fwd_end"][0] - r["fwd_start"][0]) / 2


def _overlap_ok(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    o = outcomes[0]
    if o.rc == 0 and not any(w in o.stderr.lower() for w in ("overlap", "clip")):
        return "overlapping intervals accepted without a warning naming them (overlap/clipped)"
    return None


_add("end-before-start", "11", READERS, _corrupt(_end_before_start), ERR(*RANK1))
_add("overlap", "11", READERS, _corrupt(_overlap), EITHER(*RANK1), check=_overlap_ok)
_add("pp-size-more-than-files", "11", READERS, _config(_set("pp_size", 8)), ERR("config.json", "pp_size"))
_add(
    "pp-size-fewer-than-files",
    "11",
    ("viz", "compare"),
    _config(_set("pp_size", 2)),
    ERR("config.json", "pp_size"),
)
_add(
    "mb-disagrees",
    "11",
    ("viz", "costs-from"),
    _config(_set("micro_batches", 3)),
    ERR("config.json", "micro_batches"),
)
_add("start-1e300", "11", ("compare",), _corrupt(lambda r: r["fwd_end"].__setitem__(0, 1e300)), ERR(*RANK1))

# -- item 13: every algorithm's own output reads back ----------------------------------------------
for algo in (*[a if a != "1f1b-interleaved" else "1f1b-interleaved-v2" for a in ALGOS], "zbv-offload"):
    for reader in READERS:
        cases.append(
            Case(
                f"{reader}-roundtrip-{algo}",
                "13",
                _verb(reader),
                "result-dir",
                lambda ctx, algo=algo, reader=reader: _argv(reader, ctx, ctx.golden / "all" / algo),
                OK(),
                outputs=OUTS.get(reader, ()),
            )
        )
for algo in (*[a if a != "1f1b-interleaved" else "1f1b-interleaved-v2" for a in ALGOS], "zbv-offload"):
    # the same output as a bare pp_data dump (no summary.json): compare must read its pp_rank files
    cases.append(
        Case(
            f"compare-roundtrip-ppdata-{algo}",
            "13",
            "compare",
            "pp_data",
            lambda ctx, algo=algo: ["compare", str(dump_dir(ctx, algo)), "--json"],
            OK(),
        )
    )
cases.append(
    Case(
        "visualize-roundtrip-root",
        "13",
        "visualize",
        "result-dir",
        lambda ctx: _argv("visualize", ctx, ctx.golden / "all"),
        OK(),
        outputs=OUTS["viz"],
    )
)
cases.append(
    Case(
        "compare-roundtrip-root",
        "13",
        "compare",
        "result-dir",
        lambda ctx: ["compare", str(ctx.golden / "all"), "--json"],
        OK(),
        check=lambda ctx, o: None if len(json.loads(o[0].stdout)["results"]) == 13 else "expected 13 runs",
    )
)
cases.append(
    Case(
        "viz-roundtrip-chrome-dualpipe",
        "13",
        "viz",
        "result-dir",
        lambda ctx: ["viz", str(ctx.golden / "all" / "dualpipe"), "--chrome", str(ctx.cwd / "t.json")],
        OK(),
        outputs=("cwd/t.json",),
    )
)

# -- item 14: Primus' older interleaved dump -------------------------------------------------------


def _projection_close(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    projected = json.loads(outcomes[0].stdout)["results"][0]["step_time"]
    measured = json.loads((ctx.golden / "all" / "1f1b-interleaved-v2" / "summary.json").read_text())[
        "step_time"
    ]
    error = projected / measured - 1
    return (
        None
        if abs(error) <= 0.05
        else f"projection {projected:.1f} vs measured {measured:.1f} ({error:+.1%})"
    )


cases.append(
    Case(
        "costs-from-old-interleaved-dump-projection",
        "14",
        "simulate",
        "pp_data",
        lambda ctx: [
            "simulate",
            "--costs-from",
            str(old_interleaved_dump(ctx)),
            "--algo",
            "1f1b-interleaved",
            "--vpp",
            "2",
            "--pp",
            "4",
            "--mb",
            "8",
            "--json",
            "--out",
            str(ctx.out),
        ],
        OK(),
        outputs=SIM_OUT,
        check=_projection_close,
    )
)


def _no_invented_memory(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    text = outcomes[0].stdout
    lines = [ln for ln in text.splitlines() if "memory" in ln.lower()]
    says = ("not in", "no memory", "not recorded", "not available", "without memory", "holds no", "has no")
    if not any(any(w in ln.lower() for w in says) for ln in lines):
        return "compare did not say that the dump holds no memory figures: " + " | ".join(lines)[:300]
    return None


cases.append(
    Case(
        "compare-old-dump-memory-not-invented",
        "14",
        "compare",
        "pp_data",
        lambda ctx: [
            "compare",
            str(old_interleaved_dump(ctx)),
            str(ctx.golden / "all" / "1f1b-interleaved-v2"),
        ],
        OK(),
        check=_no_invented_memory,
    )
)
cases.append(
    Case(
        "viz-old-interleaved-dump",
        "14",
        "viz",
        "pp_data",
        lambda ctx: _argv("viz", ctx, old_interleaved_dump(ctx)),
        OK(),
        outputs=OUTS["viz"],
    )
)

# -- own -------------------------------------------------------------------------------------------
_add("empty-dir", "own", READERS, lambda ctx: ctx.inp, ERR("in"))
_add(
    "rank-gap",
    "own",
    ("viz", "compare"),
    lambda ctx: (dump_dir(ctx) / "pp_rank_1.json").unlink() or ctx.inp / "run",
    ERR("run", "pp_rank"),
)
_add("rank-list", "own", READERS, _raw("[]"), ERR("pp_rank_0.json"))
_add("rank-empty-object", "own", ("viz",), _raw("{}"), ERR("pp_rank_0.json"))
_add("rank-empty-file", "own", ("viz", "costs-from"), _raw(""), ERR("pp_rank_0.json"))
_add("rank-binary", "own", ("compare",), _raw(bytes(range(256))), ERR("pp_rank_0.json"))
_add("rank-record-string", "own", ("viz",), _raw('{"1": "fwd"}'), ERR("pp_rank_0.json"))
_add(
    "fwd-start-strings",
    "own",
    READERS,
    _corrupt(lambda r: r["fwd_start"].__setitem__(0, "soon")),
    ERR(*RANK1),
)
_add("lengths-differ", "own", ("viz",), _corrupt(lambda r: r["fwd_end"].pop()), ERR(*RANK1))
_add(
    "minibatch-strings",
    "own",
    READERS,
    _corrupt(lambda r: r["fwd_minibatch"].__setitem__(0, "a")),
    ERR(*RANK1),
)
_add(
    "bwd-kind-unknown",
    "own",
    ("viz", "costs-from"),
    _corrupt(lambda r: r["bwd_kind"].__setitem__(0, "Q")),
    ERR(*RANK1),
)
_add(
    "memory-string",
    "own",
    ("viz", "compare"),
    _corrupt(lambda r: r.__setitem__("memory", "lots")),
    ERR(*RANK1),
)
_add(
    "memory-curve-strings",
    "own",
    ("viz",),
    _corrupt(lambda r: r["activation_memory_usage"].__setitem__(0, "x")),
    ERR(*RANK1),
)
_add("vpp-size-string", "own", READERS, _config(_set("vpp_size", "two")), ERR("config.json", "vpp_size"))
_add(
    "vpp-size-zero-mb-zero",
    "own",
    ("viz", "compare"),
    _config(lambda c: c.update(vpp_size=0, micro_batches=0)),
    ERR("config.json", "vpp_size"),
)
_add("config-list", "own", ("viz", "compare"), _config(raw=b"[1, 2]"), ERR("config.json"))
_add("config-name-html", "own", ("viz",), _config(_set("name", "<script>alert(1)</script>")), OK())
_add(
    "iteration-missing-on-rank",
    "own",
    ("viz",),
    lambda ctx: (
        edit_json(dump_dir(ctx) / "pp_rank_3.json", lambda d: {"999": next(iter(d.values()))}),
        ctx.inp / "run",
    )[1],
    ERR("pp_rank_3.json"),
)
_add(
    "summary-missing-keys",
    "own",
    ("compare",),
    lambda ctx: (run_dir(ctx) / "summary.json").write_text('{"name": "x"}') and ctx.inp / "run",
    ERR("summary.json"),
)
_add(
    "summary-step-time-string",
    "own",
    ("compare",),
    lambda ctx: (edit_json(run_dir(ctx) / "summary.json", _set("step_time", "fast")), ctx.inp / "run")[1],
    ERR("summary.json", "step_time"),
)
_add(
    "summary-list",
    "own",
    ("compare",),
    lambda ctx: (run_dir(ctx) / "summary.json").write_text("[]") and ctx.inp / "run",
    ERR("summary.json"),
)
_add(
    "summary-per-rank-string",
    "own",
    ("compare",),
    lambda ctx: (edit_json(run_dir(ctx) / "summary.json", _set("per_rank", "all")), ctx.inp / "run")[1],
    ERR("summary.json", "per_rank"),
)
_add(
    "plain-text-file",
    "own",
    ("viz", "compare", "costs-from"),
    lambda ctx: ctx.victim / "thesis.txt",
    ERR("thesis.txt"),
)


def _root_with_bad_run(ctx: Ctx) -> Path:
    root = ctx.copy_golden("all", "in/root")
    (root / "zbv" / "pp_rank_1.json").write_text("{not json")
    return root


_add("root-one-bad-run", "own", ("viz",), _root_with_bad_run, ERR("pp_rank_1.json"))


def _root_with_bad_summary(ctx: Ctx) -> Path:
    root = ctx.copy_golden("all", "in/root")
    (root / "zbv" / "summary.json").write_text("{not json")
    return root


_add("root-one-bad-summary", "own", ("compare",), _root_with_bad_summary, ERR("summary.json"))
_add(
    "dir-symlink-loop",
    "own",
    ("viz", "compare"),
    lambda ctx: ctx.symlink("in/loop", ctx.inp / "loop"),
    ERR("loop"),
)
cases.append(
    Case(
        "viz-iteration-unknown",
        "own",
        "viz",
        "pp_data",
        lambda ctx: _argv("viz", ctx, ctx.golden / "all" / "1f1b", "--iteration", "77"),
        ERR("--iteration"),
    )
)
cases.append(
    Case(
        "visualize-missing-path",
        "own",
        "visualize",
        "pp_data",
        lambda ctx: ["visualize", str(ctx.inp / "nope")],
        ERR("nope"),
    )
)
cases.append(
    Case(
        "compare-sim-vs-sim-pair",
        "own",
        "compare",
        "result-dir",
        lambda ctx: ["compare", str(ctx.golden / "all" / "1f1b"), str(ctx.golden / "all" / "gpipe")],
        OK(),
    )
)


# -- issue 34: roots and runs as a user meets them --------------------------------------------------
def _primus_example(name: str) -> Callable[[Ctx], Path]:
    return lambda ctx: Path(shutil.copytree(REPO / "tests" / "data" / "primus" / name, ctx.inp / name))


def _primus_simulations(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    rows = json.loads(outcomes[0].stdout)["results"]
    sources = {r["source"] for r in rows}
    return None if len(rows) == 5 and sources == {"simulated (Primus' simulator)"} else f"read as {sources}"


def _two_sizes(ctx: Ctx) -> Path:
    root = ctx.inp / "root"
    shutil.copytree(ctx.golden / "all" / "1f1b", root / "1f1b-p4")
    shutil.copytree(ctx.golden / "pp8" / "1f1b", root / "1f1b-p8")
    return root


def _grouped(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    doc = json.loads(outcomes[0].stdout)
    titles = [g["title"] for g in doc["groups"]]
    return None if len(titles) == 2 and doc["recommendation"] is None else f"one set: {titles}"


def _sizes_from_run(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    sizes = {(r["pp"], r["micro_batches"]) for r in json.loads(outcomes[0].stdout)["results"]}
    return None if sizes == {(4, 8)} else f"sizes {sizes}, not the run's (4, 8)"


cases += [
    Case(
        "compare-primus-simulator-root",
        "own",
        "compare",
        "pp_data",
        lambda ctx: ["compare", str(_primus_example("simulator_output_p8_m32")(ctx)), "--json"],
        OK(),
        check=_primus_simulations,
    ),
    Case(
        "compare-root-of-two-sizes",
        "own",
        "compare",
        "result-dir",
        lambda ctx: ["compare", str(_two_sizes(ctx)), "--json"],
        OK(),
        check=_grouped,
    ),
    Case(
        "costs-from-sizes-from-the-run",
        "own",
        "simulate",
        "pp_data",
        lambda ctx: [
            "simulate",
            "--costs-from",
            str(_primus_example("pp_data_example/pp4")(ctx)),
            "--algo",
            "zbv",
            "--json",
            "--out",
            str(ctx.out),
        ],
        OK(),
        outputs=SIM_OUT,
        check=_sizes_from_run,
    ),
]
