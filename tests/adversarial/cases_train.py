"""`primuspp train` (torch, megatron and --emulate): output locations checked before any rank starts and a
dump swapped in whole (item 4, item 9), checkpoints that could run code or do not fit (item 6), values to
refuse (item 10), and the usual hostile values (own).

Cases that must be refused before any rank starts ask for 10,000 steps (the most the emulated cluster runs):
a refusal is immediate, a run that starts its ranks instead never ends within the time limit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.adversarial.harness import EITHER, ERR, OK, Case, Ctx, Outcome, run_cli

cases: list[Case] = []
NEVER = ["--steps", "10000"]
TORCH = ["train", "--backend", "torch", "--pp", "2", "--mb", "2"]
EMU = ["train", "--emulate", "--pp", "2", "--mb", "2", "--fwd", "1", "--bwd", "1", "--wgrad", "1"]
MEGA_MODEL = {"layers": 2, "hidden": 32, "heads": 4, "seq_len": 16}
MEGA = [
    "train",
    "--backend",
    "megatron",
    "--pp",
    "2",
    "--mb",
    "2",
    "--layers",
    "2",
    "--hidden",
    "32",
    "--heads",
    "4",
    "--seq-len",
    "16",
]


#: the time limit of refusals that must come before torch or megatron is imported (issue 34): a refusal
#: takes ~1 s; importing megatron and setting up took 17-33 s, building 1e6 experts minutes
FAST = 15
#: what the other cases run forked from (a second fork server): what the torch and megatron backends import
TRAINING = (
    "torch",
    "megatron.core",
    "primuspp.commands.train_torch",
    "primuspp.commands.train_megatron",
    "primuspp.backends.torch.train",
    "primuspp.backends.megatron.train",
)


def _add(id_: str, item: str, argv, expect, timeout: float = 40, **kw) -> None:
    """A train case. The refusals but the FAST ones run with TRAINING imported (saves its import, 3-8 CPU s,
    each); a case that may start ranks runs as the CLI starts (its process group is checked after)."""
    kind = kw.pop("kind", "flags")
    preload = TRAINING if expect.outcome == "refused" and timeout > FAST else ()
    cases.append(
        Case(id_, item, "train", kind, argv, expect, timeout=timeout, heavy=True, preload=preload, **kw)
    )


# -- item 4: --dump-pp-data into what is already there ---------------------------------------------

DPD = ("--dump-pp-data",)


def _previous_larger_dump(ctx: Ctx) -> list[str]:
    ctx.copy_golden("pp8/1f1b", "out/dump")  # a p=8 output of this tool
    return [*EMU, "--steps", "2", "--dump-pp-data", str(ctx.out / "dump")]


def _swapped_whole(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    d = ctx.out / "dump"
    ranks = sorted(p.name for p in d.glob("pp_rank_*.json"))
    if outcomes[0].rc != 0:
        return None if len(ranks) == 8 else "refused, but the previous dump was changed"
    if ranks != ["pp_rank_0.json", "pp_rank_1.json"]:
        return f"the dump holds {ranks} after a p=2 run over a p=8 dump (stale files kept)"
    [o] = run_cli(
        [["viz", str(d), "--out", str(ctx.root / "check.html")]], ctx.cwd, ctx.root / ".logs", 120, False
    )
    (ctx.root / "check.html").unlink(missing_ok=True)
    if o.rc != 0:
        return f"the new dump does not read back with viz: {o.stderr.strip()[:300]}"
    return None


_add(
    "train-emulate-dump-over-larger-dump",
    "4",
    _previous_larger_dump,
    EITHER(*DPD, "dump"),
    timeout=180,
    kind="pp_data",
    outputs=("out/dump", "out/dump/*", "out/.*", "out/.*/*", "check.html"),
    check=_swapped_whole,
)
_add(
    "train-torch-dump-into-foreign-dir",
    "4",
    lambda ctx: (
        ctx.write("out/dump/NOTES.txt", "mine\n"),
        [*TORCH, "--steps", "1", "--dump-pp-data", str(ctx.out / "dump")],
    )[1],
    ERR(*DPD, "dump"),
    timeout=180,
    kind="pp_data",
)
_add(
    "train-torch-dump-onto-char-device",
    "9",
    lambda ctx: [*TORCH, *NEVER, "--dump-pp-data", str(ctx.null_device("out.dev"))],
    ERR(*DPD, "out.dev"),
)
_add(
    "train-emulate-dump-onto-char-device",
    "9",
    lambda ctx: [*EMU, *NEVER, "--dump-pp-data", str(ctx.null_device("out.dev"))],
    ERR(*DPD, "out.dev"),
)
_add(
    "train-torch-dump-onto-plain-file",
    "4",
    lambda ctx: [*TORCH, *NEVER, "--dump-pp-data", str(ctx.victim / "thesis.txt")],
    ERR(*DPD, "thesis.txt"),
)
_add(
    "train-torch-dump-onto-fifo",
    "4",
    lambda ctx: [*TORCH, *NEVER, "--dump-pp-data", str(ctx.fifo("out.fifo"))],
    ERR(*DPD, "out.fifo"),
)
_add(
    "train-torch-dump-under-plain-file",
    "9",
    lambda ctx: [*TORCH, *NEVER, "--dump-pp-data", str(ctx.victim / "thesis.txt" / "d")],
    ERR(*DPD, "thesis.txt"),
)


def _immutable_dir(ctx: Ctx) -> Path:
    import subprocess

    d = ctx.root / "ro"
    d.mkdir()
    subprocess.run(["chattr", "+i", str(d)], check=True)
    return d


_add(
    "train-torch-dump-under-immutable",
    "9",
    lambda ctx: [*TORCH, *NEVER, "--dump-pp-data", str(_immutable_dir(ctx) / "d")],
    ERR(*DPD, "ro"),
    needs="chattr",
)

# -- item 6: checkpoints ---------------------------------------------------------------------------


def _meta(step: int = 1, **extra) -> dict:
    model = {"name": "megatron-gpt", **MEGA_MODEL, "vocab": 256, "settings": {}}
    return {"model": model, "step": step, "data_position": 0, **extra}


def _checkpoint(
    ctx: Ctx, meta: object | bytes | None = None, ranks: dict[int, bytes | str] | None = None
) -> Path:
    """`in/ckpt/step_0000001/` with meta.json and rank files; `ranks` values: bytes, or 'evil' / 'empty'
    (torch.save'd objects)."""
    d = ctx.inp / "ckpt" / "step_0000001"
    d.mkdir(parents=True)
    raw = meta if isinstance(meta, bytes) else json.dumps(_meta() if meta is None else meta).encode()
    (d / "meta.json").write_bytes(raw)
    for r, what in (ranks or {0: "evil", 1: "evil"}).items():
        if isinstance(what, bytes):
            (d / f"rank_{r}.pt").write_bytes(what)
            continue
        import torch

        obj: object = {} if what == "empty" else _Planted(str(ctx.marker))
        torch.save(obj, d / f"rank_{r}.pt")
    return d.parent


class _Planted:
    """Pickles as `exec(<create the marker file>)`: loading it with weights_only=False runs code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


LOAD = ("--load", "ckpt", "meta.json")
_add(
    "train-megatron-load-planted-pickle",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(_checkpoint(ctx))],
    ERR("--load", "rank_0.pt", "rank_1.pt", "ckpt"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-meta-list",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(_checkpoint(ctx, [1, 2]))],
    ERR(*LOAD),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-meta-step-string",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(_checkpoint(ctx, _meta(step="abc")))],
    ERR(*LOAD, "step"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-meta-no-step",
    "6",
    lambda ctx: [
        *MEGA,
        *NEVER,
        "--load",
        str(_checkpoint(ctx, {k: v for k, v in _meta().items() if k != "step"})),
    ],
    ERR(*LOAD, "step"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-meta-latin1",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(_checkpoint(ctx, b'{"model": "caf\xe9"}'))],
    ERR(*LOAD),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-rank-missing",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(_checkpoint(ctx, ranks={0: "empty"}))],
    ERR(*LOAD, "rank_1"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-rank-garbage",
    "6",
    lambda ctx: [
        *MEGA,
        *NEVER,
        "--load",
        str(_checkpoint(ctx, ranks={0: b"\x80\x04garbage", 1: b"\x00" * 64})),
    ],
    ERR(*LOAD, "rank_0.pt"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)
_add(
    "train-megatron-load-missing",
    "6",
    lambda ctx: [*MEGA, *NEVER, "--load", str(ctx.inp / "nope")],
    ERR("--load", "nope"),
    timeout=90,
    kind="checkpoint",
    needs="megatron",
)


def _meta_fifo(ctx: Ctx) -> list[str]:
    d = ctx.inp / "ckpt" / "step_0000001"
    d.mkdir(parents=True)
    ctx.fifo("in/ckpt/step_0000001/meta.json")
    return [*MEGA, *NEVER, "--load", str(d.parent)]


_add(
    "train-megatron-load-meta-fifo",
    "8",
    _meta_fifo,
    ERR(*LOAD),
    timeout=60,
    kind="checkpoint",
    needs="megatron",
)

# -- item 10 ---------------------------------------------------------------------------------------
for value in ("nan", "inf", "-1", "0"):
    _add(
        f"train-torch-lr-{value}", "10", lambda ctx, value=value: [*TORCH, *NEVER, "--lr", value], ERR("--lr")
    )
_add(
    "train-megatron-lr-inf",
    "10",
    lambda ctx: [*MEGA, *NEVER, "--lr", "inf"],
    ERR("--lr"),
    timeout=90,
    needs="megatron",
)
_add(
    "train-torch-pp4-layers2",
    "10",
    lambda ctx: ["train", "--backend", "torch", "--pp", "4", "--layers", "2", *NEVER],
    ERR("--layers"),
)
_add("train-emulate-fwd-inf", "10", lambda ctx: ["train", "--emulate", "--fwd", "inf", *NEVER], ERR("--fwd"))
_add(
    "train-emulate-fwd-1e308",
    "10",
    lambda ctx: ["train", "--emulate", "--fwd", "1e308", *NEVER],
    ERR("--fwd"),
)

# -- own -------------------------------------------------------------------------------------------
OWN = {
    "torch-steps-zero": ([*TORCH, "--steps", "0"], ("--steps",)),
    "torch-heads-zero": ([*TORCH, *NEVER, "--heads", "0"], ("--heads",)),
    "torch-hidden-not-multiple": ([*TORCH, *NEVER, "--hidden", "65"], ("--hidden",)),
    "torch-pp-zero": (["train", "--backend", "torch", "--pp", "0", *NEVER], ("--pp", "pp")),
    "torch-mb-zero": (["train", "--backend", "torch", "--mb", "0", *NEVER], ("--mb", "micro_batches")),
    "torch-algo-unknown": (["train", "--backend", "torch", "--algo", "nope", *NEVER], ("nope", "--algo")),
    "backend-unknown": (["train", "--backend", "jax"], ("--backend",)),
    "torch-inject-fault-garbage": ([*TORCH, *NEVER, "--inject-fault", "x"], ("--inject-fault",)),
    "torch-save": ([*TORCH, *NEVER, "--save", "ck"], ("--save",)),
    "fwd-without-emulate": ([*TORCH, *NEVER, "--fwd", "3"], ("--fwd",)),
    "emulate-verify": ([*EMU, *NEVER, "--verify"], ("--verify",)),
    "megatron-verify": ([*MEGA, *NEVER, "--verify"], ("--verify",)),
    "emulate-steps-negative": ([*EMU, "--steps", "-1"], ("--steps",)),
    "torch-pp-20-digits": (["train", "--backend", "torch", "--pp", "9" * 20, *NEVER], ("--pp",)),
    "torch-micro-batch-size-zero": ([*TORCH, *NEVER, "--micro-batch-size", "0"], ("--micro-batch-size",)),
    "torch-seq-len-huge": ([*TORCH, *NEVER, "--seq-len", "9" * 20], ("--seq-len",)),
}
for tag, (argv, keys) in OWN.items():
    _add(f"train-{tag}", "own", lambda ctx, argv=argv: argv, ERR(*keys))
_add(
    "train-megatron-data-missing",
    "own",
    lambda ctx: [*MEGA, *NEVER, "--data", str(ctx.inp / "nope.txt")],
    ERR("--data", "nope.txt"),
    timeout=90,
    needs="megatron",
)
_add(
    "train-megatron-data-fifo",
    "8",
    lambda ctx: [*MEGA, *NEVER, "--data", str(ctx.fifo("in/d.txt"))],
    ERR("--data", "d.txt"),
    timeout=90,
    needs="megatron",
)
_add(
    "train-megatron-save-onto-plain-file",
    "9",
    lambda ctx: [*MEGA, *NEVER, "--save", str(ctx.victim / "thesis.txt")],
    ERR("--save", "thesis.txt"),
    timeout=90,
    needs="megatron",
)
_add(
    "train-megatron-save-onto-char-device",
    "9",
    lambda ctx: [*MEGA, *NEVER, "--save", str(ctx.null_device("out.dev"))],
    ERR("--save", "out.dev"),
    timeout=90,
    needs="megatron",
)


def _trained(ctx: Ctx, outcomes: list[Outcome]) -> str | None:
    doc = json.loads(outcomes[0].stdout)
    return None if len(doc["steps"]) == 1 and doc["pp"] == 2 else f"unexpected summary {str(doc)[:200]}"


_add(
    "train-torch-tiny-run",
    "own",
    lambda ctx: [*TORCH, "--steps", "1", "--json"],
    OK(),
    outputs=("cwd/output", "cwd/output/**"),  # its pp_data goes to output/pp_data by default
    timeout=180,
    check=_trained,
)

# -- issue 34: every size and name refused at once, before torch or megatron is imported ----------------
for _id, _argv, _keys in (
    ("megatron-algo-typo", [*MEGA, *NEVER, "--algo", "zbvv"], ("zbvv",)),
    ("torch-algo-typo", [*TORCH, *NEVER, "--algo", "zbvv"], ("zbvv",)),
    (
        "megatron-moe-experts-million",
        [*MEGA, *NEVER, "--moe-experts", "1000000", "--moe-topk", "2"],
        ("--moe-experts",),
    ),
    (
        "megatron-moe-memory",
        [*MEGA, *NEVER, "--moe-experts", "1024", "--moe-topk", "2", "--moe-ffn", "1000000"],
        ("--moe-experts",),
    ),
    ("megatron-tp-million", [*MEGA, *NEVER, "--tp", "1000000"], ("--tp",)),
    ("megatron-ep-million", [*MEGA, *NEVER, "--ep", "1000000"], ("--ep",)),
    ("megatron-heads-indivisible", [*MEGA, *NEVER, "--heads", "3"], ("--heads",)),
    ("torch-steps-trillion", [*TORCH, "--steps", "1000000000000"], ("--steps",)),
    ("emulate-steps-over-iterations", [*EMU, "--steps", "20000"], ("--steps",)),
):
    _add(f"train-{_id}", "own", lambda ctx, a=_argv: a, ERR(*_keys), timeout=FAST)
