"""`primuspp train --backend torch`: the tiny GPT on plain torch modules (backends/torch), as a
`TrainBackend`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primuspp.commands.console import out
from primuspp.commands.launching import check_model_size, run_table, step_bar
from primuspp.commands.train_checks import (
    EMULATION_FLAGS,
    check_clip,
    check_outputs,
    mib,
    refuse,
    refuse_megatron_only,
    render_footer,
    render_steps,
)
from primuspp.errors import ConfigError
from primuspp.runtime.backend import RunSummary, TrainOptions

MEGATRON_FLAGS = ("data", "save", "save_interval", "load", "megatron_settings")


class TorchBackend:
    name = "torch"

    def __init__(self) -> None:
        self.verify = False
        self.describe = ""

    def check(self, opts: TrainOptions) -> Any:
        refuse_megatron_only(opts, "--backend torch")
        refuse(opts, EMULATION_FLAGS, "needs --emulate (the emulated cluster's cost model)")
        refuse(opts, MEGATRON_FLAGS, "is only available with --backend megatron")
        steps = 3 if opts.steps is None else opts.steps
        hidden = 64 if opts.hidden is None else opts.hidden
        seq_len = 32 if opts.seq_len is None else opts.seq_len
        lr = 0.1 if opts.lr is None else opts.lr
        heads, mbs = opts.heads, opts.micro_batch_size
        fault = parse_fault(opts.inject_fault) if opts.inject_fault else None
        check_clip(opts)
        check_outputs(opts.dump_pp_data)
        table = run_table(opts.algo, opts.pp, opts.vpp, opts.mb)
        parts = len(set(table.placement.model_part))
        n_layers = parts if opts.layers is None else opts.layers
        sizes = {
            "layers": n_layers,
            "hidden": hidden,
            "heads": heads,
            "seq-len": seq_len,
            "micro-batch-size": mbs,
        }
        check_model_size(sizes, 64, table.num_microbatches, table.pp)
        if n_layers + 2 < parts:
            raise ConfigError(
                f"--layers {n_layers}: the model (embedding + {n_layers} blocks + head) has fewer layers "
                f"than the {parts} stages of this table",
                key="layers",
            )

        # torch is imported here, once every option is checked: the other verbs run without it
        from primuspp.backends.torch.gpt import GPTConfig
        from primuspp.backends.torch.train import TrainSpec

        self.verify, self.describe = bool(opts.verify), table.describe()
        return TrainSpec(
            table,
            GPTConfig(vocab=64, seq_len=seq_len, hidden=hidden, heads=heads, layers=n_layers),
            micro_batch_size=mbs,
            steps=steps,
            lr=lr,
            seed=opts.seed,
            fault=fault,
            clip_grad=opts.clip_grad,
            post_validation=opts.post_validation,
        )

    def launch(self, spec: Any) -> Any:
        from primuspp.backends.torch.session import run_training

        with step_bar(f"training {spec.table.describe()}", spec.steps) as update:

            def on_step(step: int, loss: float, ms: float) -> None:
                update(advance=1, status=f"loss {loss:.4f}  step {ms:,.1f} ms")

            return run_training(spec, verify=self.verify, on_step=on_step)

    def summarize(self, run: Any) -> RunSummary:
        return run.summary()

    def dump(self, run: Any, directory: Path) -> None:
        from primuspp.backends.torch.session import dump_pp_data

        dump_pp_data(run, directory)

    def render(self, summary: RunSummary) -> None:
        doc = summary.to_dict()
        model = doc["model"]
        out.print(
            f"trained tiny GPT ({model['layers']} blocks, hidden {model['hidden']}, "
            f"{model['stages']} stages) with {self.describe} on {doc['pp']} processes"
        )
        columns = ("step", "loss", "step time ms", "pipeline ms", "bubble", "peak activations per rank (MiB)")
        render_steps(
            columns,
            [
                (
                    str(s["step"] + 1),
                    f"{s['loss']:.6f}",
                    f"{s['step_time_ms']:,.1f}",
                    f"{s['pipeline_ms']:,.1f}",
                    f"{s['bubble_rate']:.1%}",
                    " ".join(mib(b) for b in s["peak_activation_bytes"]),
                )
                for s in doc["steps"]
            ],
        )
        v = doc.get("verify")
        if v is not None:
            out.print(
                "verify: max relative difference vs one process with the whole model: "
                f"loss {v['max_rel_loss_diff']:.2e}, gradients {v['max_rel_grad_diff']:.2e} "
                f"({v['steps']} steps, {v['tensors']} gradient tensors"
                + (f"; largest: {v['worst_tensor']})" if v["max_rel_grad_diff"] > 0 else ")")
            )
        render_footer(doc)


def parse_fault(text: str) -> tuple[int, str]:
    rank, _, node = text.partition(":")
    if not rank.isdigit() or not node:
        raise ConfigError(f"--inject-fault {text!r}: expected RANK:NODE, e.g. 2:F3.2", key="inject-fault")
    return int(rank), node
