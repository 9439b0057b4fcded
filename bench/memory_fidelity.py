"""Memory fidelity on the plain-torch backend: simulated vs measured peak activation bytes per rank.

    python bench/memory_fidelity.py [--pp 4] [--mb 8] [--hidden 16] [--algo 1f1b zero-bubble zbv v-half v-min]

The tiny GPT (one part per virtual stage) trains one step of each algorithm on `pp` processes (gloo), with
the runtime's activation meter (saved-tensor hooks, weight-grad store). The bytes one microbatch leaves on
each stage come from a separate one-microbatch run per placement (linear: zero-bubble m=1, v: zbv m=1),
calibrated per stage (`calibrate`: the rise at F and the part B frees, negative when the weight-grad store
keeps more than autograd released). The simulator, given those bytes, predicts each rank's peak;
error = predicted / measured - 1 (target within 5 %). Bytes are deterministic: so are the figures.
tests/runtime/test_emulate.py checks the same at p=4.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from primuspp.algorithms.registry import build_schedule
from primuspp.backends.torch.gpt import GPTConfig
from primuspp.backends.torch.train import TrainSpec, train_worker
from primuspp.runtime.launch import WorkerContext, launch
from primuspp.runtime.trace import step_timeline
from primuspp.schedule.costs import CostModel
from primuspp.sim import simulate
from primuspp.sim.calibrate import calibrate


def jobs_worker(ctx: WorkerContext, specs: list[TrainSpec]) -> list:
    return [train_worker(ctx, spec) for spec in specs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--mb", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--algo", nargs="+", default=["1f1b", "zero-bubble", "zbv", "v-half", "v-min"])
    args = ap.parse_args()
    p = args.pp
    tables = {
        "one-linear": build_schedule("zero-bubble", p, None, 1),
        "one-v": build_schedule("zbv", p, 2, 1),
    }
    tables |= {a: build_schedule(a, p, None, args.mb) for a in args.algo}
    gpt = dict(vocab=32, seq_len=8, hidden=args.hidden, heads=2)
    specs = [
        TrainSpec(t, GPTConfig(layers=len(set(t.placement.model_part)), **gpt), steps=1)
        for t in tables.values()
    ]
    results = launch(jobs_worker, p, specs)
    assert results is not None
    timelines = {
        name: step_timeline(t, [per_rank[i][0].measured for per_rank in results], name)
        for i, (name, t) in enumerate(tables.items())
    }
    table = Table(
        title=f"Peak activation bytes per rank, tiny GPT (hidden {args.hidden}), p={p}, m={args.mb}",
        title_justify="left",
    )
    for col in ("algorithm", "rank", "predicted", "measured", "error"):
        table.add_column(col, justify="left" if col == "algorithm" else "right")
    worst = 0.0
    for name in args.algo:
        t = tables[name]
        cal = calibrate([timelines["one-v" if t.placement.kind == "v" else "one-linear"]])
        costs = CostModel(activation=cal.costs.activation, b_free_fraction=cal.costs.b_free_fraction)
        predicted = simulate(t, costs).metrics.per_rank
        for r, rt in enumerate(timelines[name].ranks):
            err = predicted[r].peak_memory / rt.peak_memory - 1
            worst = max(worst, abs(err))
            table.add_row(
                name if r == 0 else "",
                str(r),
                f"{predicted[r].peak_memory:,.0f}",
                f"{rt.peak_memory:,.0f}",
                f"{err:+.2%}",
            )
    console = Console(width=120)
    console.print(table)
    console.print(f"largest |error|: {worst:.2%}")


if __name__ == "__main__":
    main()
