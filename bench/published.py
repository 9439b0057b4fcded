"""Projected vs published: the planner rerun on published training runs, side by side (a benchmark).

    python bench/published.py [--only SUBSTRING] [--json]

Every run is projected with the packaged profile of its GPU, unchanged (one profile per GPU, no per-run
factor), and compared with the figure its source publishes: tokens/s/GPU, or TFLOP/s/GPU where the source
gives model FLOPs. Targets: dense runs within 15 %, MoE runs within 25 %; the two seed experiments' speedups
vs their 1f1b row within +-0.05. The sources are cited in docs/plan.md ("Published runs").
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.presets import resolve_model
from primuspp.models.project import project


@dataclass(frozen=True)
class Run:
    name: str
    model: str
    gpu: str
    algorithm: str
    published: float
    metric: str  # "tokens" (tokens/s/GPU) or "tflops" (model TFLOP/s/GPU)
    par: dict = field(default_factory=dict)
    base: str = ""  # the run whose 1f1b row the speedup is taken against
    layout: str = "balanced"

    @property
    def moe(self) -> bool:
        return resolve_model(self.model).moe


_LLAMA2 = dict(pp=8, seq_len=4096, micro_batch_size=1, global_batch_size=32)
_QWEN3 = dict(pp=4, ep=8, dp=8, seq_len=4096, micro_batch_size=1, global_batch_size=256)
#: Megatron-LM README: GPT-3 175B (vocab 131,072, seq 4096), batch 1152, strong scaling on H100
_GPT175 = dict(tp=4, pp=8, vpp=6, seq_len=4096, micro_batch_size=1, global_batch_size=1152)
#: Llama 3 paper, Table 4: 405B at seq 8192, TP8 PP16, 16M tokens per batch
_L3 = dict(tp=8, pp=16, vpp=4, seq_len=8192, micro_batch_size=1, global_batch_size=2048)

RUNS = [
    *(
        Run(
            f"llama2-7b pp8 {a}",
            "llama2-7b",
            "mi300x",
            a,
            v,
            "tokens",
            {**_LLAMA2, "vpp": vpp},
            base="llama2",
        )
        for a, vpp, v in (
            ("1f1b", 1, 10057),
            ("1f1b-interleaved", 2, 10974),
            ("zero-bubble", 1, 11411),
            ("zbv", 2, 11347),
            ("v-half", 2, 10894),
            ("v-min", 2, 8897),
        )
    ),
    *(
        Run(
            f"qwen3-235b pp4 ep8 {a}",
            "qwen3-235b-a22b",
            "mi355x",
            a,
            v,
            "tokens",
            {**_QWEN3, "vpp": vpp},
            base="qwen3",
        )
        for a, vpp, v in (
            ("1f1b", 1, 2742),
            ("zero-bubble", 1, 2963),
            ("zbv", 2, 2953),
            ("v-half", 2, 2913),
            ("v-min", 2, 2201),
        )
    ),
    Run(
        "gpt3-175b 96 gpus",
        "gpt3-175b",
        "h100",
        "1f1b-interleaved",
        0.47 * 989.4,
        "tflops",
        {**_GPT175, "dp": 3},
    ),
    Run(
        "gpt3-175b 4608 gpus",
        "gpt3-175b",
        "h100",
        "1f1b-interleaved",
        0.42 * 989.4,
        "tflops",
        {**_GPT175, "dp": 144},
    ),
    Run(
        "llama3-405b 8192 gpus", "llama3.1-405b", "h100", "1f1b-interleaved", 430, "tflops", {**_L3, "dp": 64}
    ),
    Run(
        "llama3-405b 16384 gpus",
        "llama3.1-405b",
        "h100",
        "1f1b-interleaved",
        400,
        "tflops",
        {**_L3, "dp": 128},
    ),
    Run(
        "deepseek-v3 2048 gpus",
        "deepseek-v3",
        "h800",
        "dualpipe",
        1e12 / (180e3 * 3600),  # 180K H800 GPU hours per trillion tokens
        "tokens",
        dict(
            pp=16,
            ep=64,
            dp=128,
            vpp=2,
            seq_len=4096,
            micro_batch_size=1,
            global_batch_size=15360,
            dtype="fp8",
        ),
    ),
]


def projected(run: Run) -> tuple[float, float]:
    """(the run's projected figure in its metric, step time in ms)."""
    spec, hw = resolve_model(run.model), load_hardware(run.gpu)
    par = Parallel(**{"dp": 1, **run.par}, **hw.kernels())
    pr = project(spec, hw, par, run.algorithm, run.layout)
    value = pr.tokens_per_s_per_gpu if run.metric == "tokens" else pr.tflops_per_gpu
    return value, pr.step_time_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="runs whose name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, firsts = [], {}
    for run in RUNS:
        if args.only not in run.name:
            continue
        value, _ = projected(run)
        row = {
            "run": run.name,
            "gpu": run.gpu,
            "metric": run.metric,
            "published": run.published,
            "projected": value,
            "ratio": value / run.published,
            "moe": run.moe,
        }
        if run.base:
            if run.algorithm == "1f1b":
                firsts[run.base] = (run.published, value)
            if run.base in firsts:
                pub0, proj0 = firsts[run.base]
                row["speedup_published"], row["speedup_projected"] = run.published / pub0, value / proj0
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(
        f"{'run':31} {'gpu':7} {'metric':12} {'published':>10} {'projected':>10} {'ratio':>6}"
        "       speedup vs 1f1b: published / projected"
    )
    for r in rows:
        tol = 0.25 if r["moe"] else 0.15
        ok = "ok" if abs(r["ratio"] - 1) <= tol else "MISS"
        sp = ""
        if "speedup_projected" in r:
            d = r["speedup_projected"] - r["speedup_published"]
            verdict = "ok" if abs(d) <= 0.05 else "MISS"
            sp = f"{r['speedup_published']:.2f} / {r['speedup_projected']:.2f} ({verdict})"
        unit = "tokens/s/GPU" if r["metric"] == "tokens" else "TFLOP/s/GPU"
        print(
            f"{r['run']:31} {r['gpu']:7} {unit:12} {r['published']:>10,.0f} {r['projected']:>10,.0f} "
            f"{r['ratio']:>6.2f} {ok:4} {sp}"
        )


if __name__ == "__main__":
    main()
