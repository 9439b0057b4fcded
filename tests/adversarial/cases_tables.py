"""`--algo file:TABLE` inputs (JSON and text tables from `primuspp dump`) for simulate, dump, compare and
train: FIFOs and huge files (item 8), bad encodings, overflowing and NaN numbers, deep nesting (item 9), an
unknown placement kind (item 10), and broken shapes (own)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from tests.adversarial.build import SIM_OUT, deep_json
from tests.adversarial.harness import ERR, OK, Case, Ctx

cases: list[Case] = []


def _table(
    ctx: Ctx,
    change: Callable[[dict], Any] | None = None,
    raw: bytes | str | None = None,
    name: str = "t.json",
) -> str:
    """A copy of the golden 1f1b table (p=4, m=8), changed; returns `file:PATH`."""
    if raw is None:
        data = json.loads((ctx.golden / "table.json").read_text())
        if change is not None:
            new = change(data)
            data = data if new is None else new
        raw = json.dumps(data)
    return "file:" + str(ctx.write(f"in/{name}", raw))


def _argv(verb: str, ctx: Ctx, algo: str, *more: str) -> list[str]:
    if verb == "simulate":
        return ["simulate", "--algo", algo, "--out", str(ctx.out), *more]
    if verb == "dump":
        return ["dump", "--algo", algo, "--check", *more]
    if verb == "compare":
        return ["compare", "--algo", algo, *more]
    if verb == "train-emulate":
        return ["train", "--emulate", "--algo", algo, "--steps", "10000", *more]
    return ["train", "--backend", "torch", "--algo", algo, "--steps", "10000", *more]


def _add(id_: str, item: str, verbs: tuple[str, ...], make: Callable[[Ctx], str], expect, **kw) -> None:
    for verb in verbs:
        heavy = verb.startswith("train")
        cases.append(
            Case(
                f"{verb}-table-{id_}",
                item,
                "train" if heavy else verb,
                "table",
                lambda ctx, verb=verb: _argv(verb, ctx, make(ctx)),
                expect,
                timeout=30 if heavy or item == "8" else 60,
                heavy=heavy,
                **kw,
            )
        )


def _set(key: str, value: Any) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d[key] = value

    return change


def _set_placement(key: str, value: Any) -> Callable[[dict], None]:
    def change(d: dict) -> None:
        d["placement"][key] = value

    return change


def _huge_table(ctx: Ctx) -> str:
    text = (ctx.golden / "table.json").read_text()
    path = ctx.inp / "huge.json"
    with open(path, "w") as f:
        f.write(" " * (100 * 2**20))
        f.write(text)
    return "file:" + str(path)


TKEYS = ("t.json", "--algo")
# -- item 8 ----------------------------------------------------------------------------------------
_add(
    "fifo",
    "8",
    ("simulate", "dump", "train-emulate"),
    lambda ctx: "file:" + str(ctx.fifo("in/t.json")),
    ERR(*TKEYS),
)
_add("100mb", "8", ("simulate",), _huge_table, ERR("huge.json"))
# -- item 9 ----------------------------------------------------------------------------------------
_add(
    "latin1",
    "9",
    ("simulate", "dump", "compare"),
    lambda ctx: _table(ctx, raw=b'{"format": "caf\xe9"}'),
    ERR(*TKEYS),
)
_add("binary", "9", ("simulate",), lambda ctx: _table(ctx, raw=bytes(range(256)) * 4), ERR(*TKEYS))
_add(
    "mb-1e30",
    "9",
    ("simulate", "dump"),
    lambda ctx: _table(ctx, _set("micro_batches", 1e30)),
    ERR("micro_batches"),
)
_add(
    "mb-nan",
    "9",
    ("simulate", "dump"),
    lambda ctx: _table(
        ctx, raw=(ctx.golden / "table.json").read_text().replace('"micro_batches": 8', '"micro_batches": NaN')
    ),
    ERR("micro_batches", "t.json"),
)
_add(
    "placement-pp-1e30",
    "9",
    ("dump",),
    lambda ctx: _table(ctx, _set_placement("pp", 1e30)),
    ERR("pp", "t.json"),
)
_add("nested-100k", "9", ("simulate", "dump"), lambda ctx: _table(ctx, raw=deep_json(100_000)), ERR(*TKEYS))
_add(
    "mb-huge-int",
    "9",
    ("dump",),
    lambda ctx: _table(
        ctx,
        raw=(ctx.golden / "table.json")
        .read_text()
        .replace('"micro_batches": 8', '"micro_batches": ' + "9" * 5000),
    ),
    ERR("micro_batches", "t.json"),
)
# -- item 10 ---------------------------------------------------------------------------------------
_add(
    "placement-kind-import",
    "10",
    ("simulate", "dump", "train-emulate", "train-torch"),
    lambda ctx: _table(ctx, _set_placement("kind", "__import__")),
    ERR("kind", "placement", "__import__"),
)
_add(
    "placement-kind-empty",
    "10",
    ("dump",),
    lambda ctx: _table(ctx, _set_placement("kind", "")),
    ERR("kind", "placement"),
)
# -- own -------------------------------------------------------------------------------------------
_add("empty-file", "own", ("simulate", "dump"), lambda ctx: _table(ctx, raw=""), ERR(*TKEYS))
_add("list-top", "own", ("simulate", "dump"), lambda ctx: _table(ctx, raw="[1, 2]"), ERR(*TKEYS))
_add("missing-ranks", "own", ("dump",), lambda ctx: _table(ctx, lambda d: d.pop("ranks")), ERR("ranks"))
_add(
    "missing-placement",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, lambda d: d.pop("placement")),
    ERR("placement"),
)
_add("ranks-not-list", "own", ("dump",), lambda ctx: _table(ctx, _set("ranks", "F0.0")), ERR("ranks"))
_add(
    "ranks-int-nodes",
    "own",
    ("dump", "simulate"),
    lambda ctx: _table(ctx, _set("ranks", [[1, 2], [3], [], []])),
    ERR("t.json", "ranks", "node"),
)
_add(
    "node-garbage",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, lambda d: d["ranks"][0].__setitem__(0, "Q!x")),
    ERR("t.json", "Q!x"),
)
_add(
    "node-mb-out-of-range",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, lambda d: d["ranks"][0].__setitem__(0, "F99.0")),
    ERR("t.json", "F99.0"),
)
_add("rank-dropped", "own", ("dump",), lambda ctx: _table(ctx, lambda d: d["ranks"].pop()), ERR("t.json"))
_add(
    "placement-empty",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set("placement", {})),
    ERR("placement", "t.json"),
)
_add(
    "placement-list",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set("placement", [1])),
    ERR("placement", "t.json"),
)
_add(
    "placement-pp-negative",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set_placement("pp", -4)),
    ERR("pp", "t.json"),
)
_add(
    "placement-pp-string",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set_placement("pp", "four")),
    ERR("pp", "t.json"),
)
_add(
    "stage-rank-out-of-range",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set_placement("stage_rank", [0, 1, 2, 9])),
    ERR("stage_rank", "t.json"),
)
_add(
    "mb-string",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, _set("micro_batches", "eight")),
    ERR("micro_batches"),
)
_add("mb-zero", "own", ("dump",), lambda ctx: _table(ctx, _set("micro_batches", 0)), ERR("micro_batches"))
_add("wrong-format", "own", ("dump",), lambda ctx: _table(ctx, _set("format", "other/9")), ERR(*TKEYS))
_add(
    "text-bad-header",
    "own",
    ("simulate",),
    lambda ctx: _table(ctx, raw="# primuspp schedule pp=x\nF0.0\n", name="t.txt"),
    ERR("t.txt", "pp"),
)
_add("is-directory", "own", ("simulate", "dump"), lambda ctx: "file:" + str(ctx.inp), ERR("--algo", "in"))
_add(
    "missing",
    "own",
    ("simulate", "train-emulate"),
    lambda ctx: "file:" + str(ctx.inp / "nope.json"),
    ERR("nope.json"),
)
_add(
    "symlink-to-victim-text",
    "own",
    ("dump",),
    lambda ctx: "file:" + str(ctx.symlink("in/t.json", ctx.victim / "thesis.txt")),
    ERR(*TKEYS),
)
_add("valid-json", "own", ("simulate", "compare"), lambda ctx: _table(ctx), OK(), outputs=SIM_OUT)
_add(
    "valid-text",
    "own",
    ("simulate",),
    lambda ctx: "file:" + str(ctx.copy_golden("table.txt", "in/t.txt")),
    OK(),
    outputs=SIM_OUT,
)
_add(
    "bom",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, raw=b"\xef\xbb\xbf" + (ctx.golden / "table.json").read_bytes()),
    OK(),
)
cases.append(
    Case(
        "simulate-table-pp-disagrees",
        "own",
        "simulate",
        "table",
        lambda ctx: ["simulate", "--algo", _table(ctx), "--pp", "8", "--out", str(ctx.out)],
        ERR("--pp", "pp"),
    )
)
# -- issue 34: compute-only orders (torch's compute_only CSV as `dump --format csv` writes it, text, JSON) --


def _compute_only(ctx: Ctx, fmt: str) -> str:
    """The golden table without its comm nodes, as torch CSV, text or JSON: lowered when read."""
    from primuspp.schedule.formats import from_json, to_csv, to_json, to_text

    table = from_json((ctx.golden / "table.json").read_text())
    if fmt == "csv":
        return _table(ctx, raw=to_csv(table), name="t.csv")
    bare = dataclasses.replace(table, ranks=table.compute_order())
    return _table(ctx, raw=(to_text if fmt == "txt" else to_json)(bare), name=f"t.{fmt}")


for _fmt in ("csv", "txt", "json"):
    _add(f"compute-only-{_fmt}", "own", ("dump",), lambda ctx, f=_fmt: _compute_only(ctx, f), OK())
_add("compute-only-sim", "own", ("simulate",), lambda ctx: _compute_only(ctx, "csv"), OK(), outputs=SIM_OUT)
_add(
    "csv-comm-action",
    "own",
    ("dump", "train-torch"),
    lambda ctx: _table(ctx, raw="0F0,0SEND_F0\n1RECV_F0,1F0\n", name="t.csv"),
    ERR("t.csv", "0SEND_F0"),
)
_add(
    "csv-mb-huge",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, raw="0F999999999,0I999999999\n", name="t.csv"),
    ERR("t.csv", "micro_batches"),
)
_add(
    "csv-digits-5000",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, raw="0F" + "9" * 5000 + "\n", name="t.csv"),
    ERR("t.csv"),
)
_add(
    "csv-no-placement",
    "own",
    ("dump",),
    lambda ctx: _table(ctx, raw="0F0,0B0\n2F0,2B0\n", name="t.csv"),
    ERR("t.csv", "placement"),
)
_add("csv-cycle", "own", ("dump",), lambda ctx: _table(ctx, raw="0B0,0F0\n", name="t.csv"), ERR("t.csv"))
_add(
    "text-placement-alias",
    "own",
    ("dump",),
    lambda ctx: _table(
        ctx,
        raw="# primuspp schedule placement=interleaved pp=1 vpp=2 micro_batches=1\nF0.0 F0.1 BW0.1 BW0.0\n",
        name="t.txt",
    ),
    OK(),
)
