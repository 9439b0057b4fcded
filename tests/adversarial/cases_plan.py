"""`plan` and the model inputs of `simulate --model` (issue 34): every size a flag or a file implies bounded
before any work, parallel sizes that divide nothing with the parallel sweep, typos, hostile config.json
files and hardware profiles, layout expressions, paths that are not UTF-8."""

from __future__ import annotations

import json

from tests.adversarial.harness import ERR, OK, REPO, Case, Ctx

cases: list[Case] = []
HF = REPO / "tests" / "data" / "hf_configs"
PLAN = ["plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8"]
#: a sweep of three candidates (micro-batch sizes 1, 2, 4 of one 1F1B configuration)
QUICK = ["--tp", "1", "--cp", "1", "--pp", "8", "-a", "1f1b"]
HARDWARE = (
    "name: Mine\npeak_flops: {bf16: 1.0e+15}\nhbm_bytes: 1.0e+11\nhbm_bandwidth: 4.0e+12\ngpus_per_node: 8\n"
    "intra_node: {bandwidth: 1.0e+11, latency: 0}\ninter_node: {bandwidth: 1.0e+10, latency: 1.0e-5}\n"
)


def _add(id_: str, verb: str, kind: str, setup, expect, **kw) -> None:
    cases.append(Case(id_, "own", verb, kind, setup, expect, timeout=kw.pop("timeout", 90), **kw))


def _hf(ctx: Ctx, base: str = "llama2-7b", text: str | None = None, **changes: object) -> str:
    cfg = json.loads((HF / f"{base}.json").read_text())
    return str(ctx.write("in/config.json", text if text is not None else json.dumps({**cfg, **changes})))


def _gpu(ctx: Ctx, text: str) -> str:
    return str(ctx.write("in/hw.yaml", text))


# -- parallel sizes that divide nothing: the parallel sweep grouped them first (ZeroDivisionError) ---------
for flag in ("--pp", "--tp", "--cp"):
    _add(
        f"plan-{flag[2:]}3-divides-no-gpus",
        "plan",
        "flags",
        lambda ctx, flag=flag: [
            "plan",
            "--model",
            "llama3-70b",
            "--gpu",
            "mi300x",
            "--gpus",
            "64",
            flag,
            "3",
        ],
        ERR("does not divide 64 GPUs"),
    )

# -- sizes typed: bounded before any work -----------------------------------------------------------------
for flag, value in (
    ("--gpus", "1000000000000"),  # a divisor scan linear in it: hung
    ("--seq-len", "100000000000"),  # was refused as `costs.activation`
    ("--micro-batch-size", "100000000000"),
    ("--global-batch-size", "100000000000000"),
    ("--top", "1000000000000000"),
    ("--tp", "0"),
):
    _add(f"plan-{flag[2:]}-{value}", "plan", "flags", lambda ctx, f=flag, v=value: [*PLAN, f, v], ERR(flag))
_add(
    "plan-gpus-at-the-bound",
    "plan",
    "flags",
    lambda ctx: [*PLAN[:-1], "1048576", "--global-batch-size", "1048576", *QUICK],
    OK(),
)
_add("plan-jobs-64", "plan", "flags", lambda ctx: [*PLAN, *QUICK, "--jobs", "64"], OK())
_add(
    "plan-gpu-typo",
    "plan",
    "flags",
    lambda ctx: [*PLAN[:4], "mi300", "--gpus", "8"],
    ERR("did you mean mi300x"),
)
_add(
    "plan-layout-repetition-bomb",
    "plan",
    "flags",
    lambda ctx: [*PLAN, *QUICK, "--layout", "((t*1000)*1000)*1000"],
    ERR("--layout"),
)
for flag, value in (("--layers", "1000000000"), ("--hidden", "0"), ("--vocab", "100000000000000")):
    _add(
        f"simulate-model{flag}-{value}",
        "simulate",
        "flags",
        lambda ctx, f=flag, v=value: ["simulate", "--model", "llama2-7b", f, v, "--out", str(ctx.out)],
        ERR(flag),
    )
_add(
    "train-megatron-moe-experts-1e6",
    "train",
    "flags",
    lambda ctx: ["train", "--backend", "megatron", "--moe-experts", "1000000", "--moe-topk", "2"],
    ERR("--moe-experts"),
    needs="megatron",
    heavy=True,
)

# -- a config.json: sizes, bools and duplicate keys, named by the file's keys ------------------------------
for key, value in (
    ("num_hidden_layers", 10**9),
    ("hidden_size", 0),
    ("intermediate_size", -4096),
    ("vocab_size", True),
    ("num_attention_heads", 2.5),
):
    _add(
        f"plan-config-{key}-{value}",
        "plan",
        "config",
        lambda ctx, k=key, v=value: ["plan", "--model", _hf(ctx, **{k: v}), "--gpu", "mi300x", "--gpus", "8"],
        ERR(key),
    )
_add(
    "plan-config-experts-1e6",
    "plan",
    "config",
    lambda ctx: [
        "plan",
        "--model",
        _hf(ctx, "mixtral-8x7b", num_local_experts=10**6),
        "--gpu",
        "h100",
        "--gpus",
        "8",
    ],
    ERR("num_local_experts"),
)
_add(
    "plan-config-duplicate-key",
    "plan",
    "config",
    lambda ctx: [
        "plan",
        "--model",
        _hf(ctx, text=(HF / "llama2-7b.json").read_text().rstrip().rstrip("}") + ', "num_hidden_layers": 4}'),
        *PLAN[3:],
    ],
    ERR("num_hidden_layers"),
)

# -- a hardware profile: read through the bounded YAML reader ----------------------------------------------
_BOMB = "".join(
    [
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
    ]
)
for tag, text, key in (
    ("alias-bomb", _BOMB, "--gpu"),  # under 1 KB, 10^9 values: 1.6 GB through yaml.safe_load
    ("duplicate-key", HARDWARE + "gpus_per_node: 4\n", "gpus_per_node"),
    ("bool", HARDWARE + "reserved_bytes: true\n", "reserved_bytes"),
    ("nan", HARDWARE + "efficiency: {comm: .nan}\n", "efficiency.comm"),
):
    _add(
        f"plan-gpu-file-{tag}",
        "plan",
        "config",
        lambda ctx, text=text: [*PLAN[:4], _gpu(ctx, text), "--gpus", "8", *QUICK],
        ERR(key),
    )
_add(
    "plan-gpu-file-fifo",
    "plan",
    "config",
    lambda ctx: [*PLAN[:4], str(ctx.fifo("in/hw.yaml")), "--gpus", "8"],
    ERR("--gpu"),
    timeout=60,
)

# -- an output path that is not UTF-8 ------------------------------------------------------------------------
_add(
    "plan-html-path-not-utf8",
    "plan",
    "outputs",
    lambda ctx: [*PLAN, *QUICK, "--html", str(ctx.cwd / "p\udcff.html")],
    OK(),
    outputs=("cwd/p*.html",),
    check=lambda ctx, o: None if list(ctx.cwd.glob("p*.html")) else "no page written",
)
