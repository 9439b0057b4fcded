"""Input limits on the CLI (issue 11, items 1, 7-10): each bad input ends in exit 2 and one stderr line
`error: ...` naming the flag, or the file and the key inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from primuspp.commands.app import main


def _table(tmp: Path, name: str, change) -> str:
    """A valid dumped table (1f1b, p=2, m=2) with one change applied, written to tmp/name."""
    from primuspp.algorithms.registry import build_schedule
    from primuspp.schedule.formats import to_json_dict

    doc = to_json_dict(build_schedule("1f1b", 2, None, 2))
    change(doc)
    path = tmp / name
    path.write_text(json.dumps(doc))
    return f"file:{path}"


def _text(tmp: Path, name: str, content: str | bytes) -> str:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


def _fifo(tmp: Path, name: str) -> str:
    path = tmp / name
    os.mkfifo(path)
    return str(path)


def _sparse(tmp: Path, name: str, size: int) -> str:
    path = tmp / name
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


def _config(tmp: Path, name: str, text: str) -> list[str]:
    return ["--config", _text(tmp, name, text)]


RUN = "pp: 4\nmicro_batches: 8\nruns: [{algorithm: 1f1b, name: %s}]\n"
PRIMUS = "fwd_time: 1\nschedulers: [{name: %s, class: x.Schedule1F1B, pp_size: 4, micro_batches: 8}]\n"

# (id, argv builder taking tmp_path, what the error line must name)
CASES = [
    # item 1: run names are one safe path component
    ("name-dotdot", lambda t: ["simulate", *_config(t, "c.yaml", RUN % "'..'")], "runs[0].name='..'"),
    ("name-dot", lambda t: ["simulate", *_config(t, "c.yaml", RUN % "'.'")], "runs[0].name='.'"),
    ("name-up", lambda t: ["simulate", *_config(t, "c.yaml", RUN % "../victim")], "runs[0].name='../victim'"),
    ("name-abs", lambda t: ["simulate", *_config(t, "c.yaml", RUN % "/tmp/x")], "runs[0].name='/tmp/x'"),
    ("name-empty", lambda t: ["simulate", *_config(t, "c.yaml", RUN % "''")], "runs[0].name=''"),
    ("name-space", lambda t: ["dump", *_config(t, "c.yaml", RUN % "'a b'")], "runs[0].name='a b'"),
    (
        "primus-name",
        lambda t: ["simulate", *_config(t, "p.yaml", PRIMUS % "../victim")],
        "schedulers[0].name='../victim'",
    ),
    # item 7: the node count is estimated before building
    ("huge-run", lambda t: ["simulate", "--algo", "1f1b", "--pp", "4096", "--mb", "65536"], "--max-nodes"),
    ("huge-dump", lambda t: ["dump", "--algo", "zbv", "--pp", "4096", "--mb", "65536"], "--max-nodes"),
    ("huge-compare", lambda t: ["compare", "--algo", "1f1b", "--pp", "4096", "--mb", "65536"], "--max-nodes"),
    (
        "huge-train",
        lambda t: ["train", "--backend", "torch", "--pp", "64", "--mb", "1000000"],
        "over the limit of 10,000,000 nodes",
    ),
    ("small-limit", lambda t: ["simulate", "--algo", "1f1b", "--max-nodes", "100"], "--max-nodes=100"),
    ("max-nodes-0", lambda t: ["simulate", "--max-nodes", "0"], "'--max-nodes': 0"),
    # item 8: special and oversized inputs
    ("fifo-config", lambda t: ["simulate", "--config", _fifo(t, "c.yaml")], "not a regular file"),
    (
        "fifo-table",
        lambda t: ["dump", "--check", "--algo", f"file:{_fifo(t, 't.json')}"],
        "not a regular file",
    ),
    ("dir-config", lambda t: ["simulate", "--config", str(t)], "is a directory"),
    ("big-config", lambda t: ["simulate", "--config", _sparse(t, "c.yaml", 100 * 2**20)], "byte limit"),
    ("big-table", lambda t: ["dump", "--algo", f"file:{_sparse(t, 't.json', 100 * 2**20)}"], "byte limit"),
    # item 9: absurd values and malformed files
    (
        "latin1-config",
        lambda t: ["simulate", "--config", _text(t, "c.yaml", b"pp: 8 # caf\xe9\n")],
        "not UTF-8",
    ),
    (
        "latin1-table",
        lambda t: ["dump", "--algo", "file:" + _text(t, "t.json", b'{"format": "caf\xe9"}')],
        "t.json: not UTF-8",
    ),
    ("pp-huge", lambda t: ["simulate", "--pp", "99999999999999999999"], "'--pp': 99999999999999999999"),
    ("pp-0", lambda t: ["dump", "--pp", "0"], "'--pp': 0"),
    ("mb-huge", lambda t: ["simulate", "--mb", "2000000"], "'--mb' / '--micro-batches': 2000000"),
    ("vpp-huge", lambda t: ["simulate", "--vpp", "5000"], "'--vpp': 5000"),
    ("mem-inf", lambda t: ["simulate", "--mem-limit", "inf"], "'--mem-limit': inf"),
    ("mem-nan", lambda t: ["compare", "--mem-limit", "nan"], "'--mem-limit': nan"),
    ("mem-1e308", lambda t: ["simulate", "--mem-limit", "1e308"], "'--mem-limit': 1e+308"),
    (
        "table-mb-1e30",
        lambda t: ["dump", "--check", "--algo", _table(t, "t.json", lambda d: d.update(micro_batches=1e30))],
        "t.json: micro_batches=1e+30",
    ),
    (
        "table-nan",
        lambda t: [
            "dump",
            "--algo",
            "file:" + _text(t, "t.json", '{"format": "primuspp.schedule/1", "micro_batches": NaN}'),
        ],
        "t.json: micro_batches=nan",
    ),
    (
        "table-deep",
        lambda t: ["dump", "--algo", "file:" + _text(t, "t.json", "[" * 100_000 + "]" * 100_000)],
        "t.json: nested deeper",
    ),
    (
        "config-deep",
        lambda t: ["simulate", "--config", _text(t, "c.yaml", "[" * 100_000 + "]" * 100_000)],
        "c.yaml: nested deeper",
    ),
    (
        "config-alias-bomb",
        lambda t: [
            "simulate",
            "--config",
            _text(
                t,
                "c.yaml",
                "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
                + "".join(
                    f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
                    for a, b in zip("abcdefgh", "bcdefghi", strict=True)
                ),
            ),
        ],
        "through its aliases",
    ),
    (
        "config-mb-1e30",
        lambda t: ["simulate", *_config(t, "c.yaml", "micro_batches: 1.0e+30\nruns: [{algorithm: 1f1b}]\n")],
        "micro_batches=1e+30",
    ),
    (
        "config-pp-huge",
        lambda t: [
            "simulate",
            *_config(t, "c.yaml", "pp: 99999999999999999999\nruns: [{algorithm: 1f1b}]\n"),
        ],
        "pp=99999999999999999999",
    ),
    (
        "primus-pp-huge",
        lambda t: [
            "simulate",
            *_config(t, "p.yaml", PRIMUS.replace("pp_size: 4", "pp_size: 1.0e+30") % "ok"),
        ],
        "schedulers[0].pp_size=1e+30",
    ),
    # item 10: non-finite or out-of-range costs and limits, unknown placement kinds, too few layers
    ("fwd-inf", lambda t: ["simulate", "--fwd", "inf"], "'--fwd': inf"),
    ("bwd-nan", lambda t: ["dump", "--bwd", "nan"], "'--bwd': nan"),
    ("wgrad-neg", lambda t: ["compare", "--wgrad", "-1"], "'--wgrad': -1"),
    ("comm-1e308", lambda t: ["simulate", "--comm", "1e308"], "'--comm': 1e+308"),
    ("mem-neg", lambda t: ["simulate", "--mem-limit", "-1"], "'--mem-limit': -1"),
    ("mem-zero", lambda t: ["compare", "--mem-limit", "0"], "'--mem-limit': 0"),
    (
        "yaml-inf",
        lambda t: ["simulate", *_config(t, "c.yaml", "costs: {forward: .inf}\nruns: [{algorithm: 1f1b}]\n")],
        "costs.forward=inf",
    ),
    (
        "yaml-nan-list",
        lambda t: [
            "simulate",
            *_config(t, "c.yaml", "runs: [{algorithm: 1f1b, costs: {backward: [1, .nan, 1, 1]}}]\n"),
        ],
        "runs[0].costs.backward[1]=nan",
    ),
    (
        "yaml-1e300",
        lambda t: [
            "simulate",
            *_config(t, "c.yaml", "costs: {wgrad: 1.0e+300}\nruns: [{algorithm: 1f1b}]\n"),
        ],
        "costs.wgrad=1e+300",
    ),
    (
        "yaml-mem-neg",
        lambda t: ["simulate", *_config(t, "c.yaml", "mem_limit: -1\nruns: [{algorithm: v-half}]\n")],
        "mem_limit=-1",
    ),
    (
        "param-1e308",
        lambda t: [
            "simulate",
            *_config(t, "c.yaml", "runs: [{algorithm: v-auto, params: {max_mem: 1.0e+308}}]\n"),
        ],
        "max_mem=1e+308",
    ),
    (
        "primus-fwd-inf",
        lambda t: ["simulate", *_config(t, "p.yaml", PRIMUS.replace("fwd_time: 1", "fwd_time: .inf") % "ok")],
        "fwd_time=inf",
    ),
    (
        "kind-dump",
        lambda t: [
            "dump",
            "--check",
            "--algo",
            _table(t, "t.json", lambda d: d["placement"].update(kind="__import__")),
        ],
        "placement.kind='__import__'",
    ),
    (
        "kind-train",
        lambda t: [
            "train",
            "--backend",
            "torch",
            "--algo",
            _table(t, "t.json", lambda d: d["placement"].update(kind="__import__")),
        ],
        "placement.kind='__import__'",
    ),
    ("torch-layers", lambda t: ["train", "--backend", "torch", "--pp", "4", "--layers", "2"], "--layers 2"),
    ("torch-lr-nan", lambda t: ["train", "--backend", "torch", "--lr", "nan"], "--lr nan"),
    ("megatron-lr-nan", lambda t: ["train", "--lr", "nan"], "--lr nan"),
    ("megatron-lr-inf", lambda t: ["train", "--lr", "inf"], "--lr inf"),
    ("emulate-fwd-inf", lambda t: ["train", "--emulate", "--fwd", "inf"], "--fwd inf"),
    ("emulate-bwd-nan", lambda t: ["train", "--emulate", "--bwd", "nan"], "--bwd nan"),
    ("emulate-wgrad-huge", lambda t: ["train", "--emulate", "--wgrad", "1e9"], "--wgrad 1e+09"),
    (
        "emulate-config-inf",
        lambda t: [
            "train",
            "--emulate",
            *_config(t, "c.yaml", "costs: {forward: .inf}\nruns: [{algorithm: 1f1b}]\n"),
        ],
        "costs.forward=inf",
    ),
    ("train-too-many-local-ranks", lambda t: ["train", "--backend", "torch", "--pp", "65"], "--pp 65"),
    ("train-seq-len-huge", lambda t: ["train", "--backend", "torch", "--seq-len", "99999999"], "--seq-len"),
    (
        "train-model-too-big",
        lambda t: ["train", "--backend", "torch", "--hidden", "200000", "--heads", "1"],
        "--hidden 200000 --heads 1 --seq-len 32",
    ),
    ("emulate-too-many-local-ranks", lambda t: ["train", "--emulate", "--pp", "200"], "--pp 200"),
]


@pytest.mark.parametrize("build,names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_in_one_line(capsys, tmp_path, build, names):
    argv = build(tmp_path)
    if argv[0] in ("simulate", "dump"):
        argv += ["--out", str(tmp_path / "out")]
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert (
        code == 2
        and captured.out == ""
        and len(lines) == 1
        and lines[0].startswith("error: ")
        and names in lines[0]
        and not (tmp_path / "out").exists()
    ), (code, captured.err)


# issue 34: every train flag is refused before torch or megatron is imported (and so before any rank starts)
TRAIN_REFUSALS = [
    (["--algo", "zbvv"], "zbvv"),
    (["--backend", "torch", "--algo", "zbvv"], "zbvv"),
    (["--emulate", "--algo", "zbvv"], "zbvv"),
    (["--steps", "1000000000000"], "--steps"),
    (["--emulate", "--steps", "20000"], "--steps"),
    (["--moe-experts", "1000000", "--moe-topk", "2"], "--moe-experts"),
    (["--moe-experts", "8", "--moe-topk", "9"], "--moe-topk"),
    (["--moe-experts", "8", "--moe-topk", "2", "--ep", "3"], "--ep"),
    (["--moe-experts", "1024", "--moe-topk", "2", "--hidden", "4096"], "--moe-experts 1024"),
    (["--tp", "1000000"], "--tp"),
    (["--ep", "1000000"], "--ep"),
    (["--layers", "100000000"], "--layers"),
    (["--hidden", "100", "--heads", "3"], "--heads 3"),
    (["--kernels", "bogus"], "--kernels"),
    (["--pp", "4", "--tp", "8", "--hidden", "100000", "--heads", "1"], "--hidden 100000"),
]


def test_train_refuses_before_importing_torch():
    script = (
        "import contextlib, io, json, sys\n"
        "from primuspp.commands.app import main\n"
        "out = []\n"
        f"for argv, _ in {TRAIN_REFUSALS!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        code = main(['train', '--no-dump', *argv])\n"
        "    heavy = [m for m in ('torch', 'megatron') if m in sys.modules]\n"
        "    out.append((code, err.getvalue(), heavy))\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    for (argv, names), (code, err, heavy) in zip(TRAIN_REFUSALS, json.loads(done.stdout), strict=True):
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and names in lines[0] and not heavy, (argv, code, err, heavy)
