"""`primuspp train` (backend megatron, the default): a megatron-core GPT (backends/megatron), as a
`TrainBackend`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from primuspp.backends.megatron import moe as moe_layers
from primuspp.commands.console import out
from primuspp.commands.launching import check_model_size, check_tp_ranks, run_table, step_bar
from primuspp.commands.train_checks import (
    EMULATION_FLAGS,
    check_clip,
    check_outputs,
    mib,
    refuse,
    render_footer,
    render_steps,
)
from primuspp.errors import ConfigError
from primuspp.runtime.backend import RunSummary, TrainOptions

#: the Megatron GPT's vocabulary (bytes), known before the model module (torch) is imported
VOCAB = 256


class MegatronBackend:
    name = "megatron"

    def __init__(self) -> None:
        self.describe = ""
        self.save: Path | None = None

    def check(self, opts: TrainOptions) -> Any:
        refuse(opts, EMULATION_FLAGS, "needs --emulate (the emulated cluster's cost model)")
        refuse(opts, ("verify",), "is only available with --backend torch")
        fault = parse_save_fault(opts.inject_fault) if opts.inject_fault else None
        steps = 100 if opts.steps is None else opts.steps
        layers = 8 if opts.layers is None else opts.layers
        hidden = 128 if opts.hidden is None else opts.hidden
        seq_len = 128 if opts.seq_len is None else opts.seq_len
        lr = 1e-3 if opts.lr is None else opts.lr
        heads, mbs, save = opts.heads, opts.micro_batch_size, opts.save
        if opts.save_interval is not None and save is None:
            raise ConfigError("--save-interval needs --save DIR", key="save-interval")
        if not 0 < lr < float("inf"):
            raise ConfigError(f"--lr {lr}: expected a finite number > 0", key="lr")
        check_clip(opts)
        tp, sp, sp_wgrad = opts.tp, opts.sequence_parallel, opts.sp_wgrad
        if sp_wgrad not in ("keep", "regather"):
            raise ConfigError(f"--sp-wgrad {sp_wgrad}: expected keep or regather", key="sp-wgrad")
        if sp and tp <= 1:
            raise ConfigError(
                "--sequence-parallel needs --tp > 1 (it splits the sequence over the tensor-parallel ranks)",
                key="sequence-parallel",
            )
        if opts.fb_overlap and sp:
            raise ConfigError(
                "--fb-overlap with --sequence-parallel: Megatron's sequence-parallel collectives cannot be "
                "split between the two threads of an overlapped FB node",
                key="fb-overlap",
            )
        moe = (opts.moe_experts, opts.moe_topk, opts.moe_ffn, opts.moe_shared_ffn)
        moe_layers.check(moe[0], moe[1], opts.ep, moe[2], moe[3])  # no torch: before the imports below
        table = run_table(opts.algo, opts.pp, opts.vpp, opts.mb)
        check_tp_ranks(tp, table.pp)
        sizes = {
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "seq-len": seq_len,
            "micro-batch-size": mbs,
        }
        experts = (moe[0], moe[2] or 4 * hidden) if moe[0] is not None else None
        check_model_size(sizes, VOCAB, table.num_microbatches, table.pp, experts)
        check_outputs(opts.dump_pp_data, save)

        from primuspp.backends.megatron import require

        require()  # one line with the install hint when megatron-core is missing
        from primuspp.backends import kernels as providers

        kernels = providers.resolve(opts.kernels)
        from primuspp.backends.megatron.model import GPTSpec
        from primuspp.backends.megatron.session import parse_settings
        from primuspp.backends.megatron.train import TrainSpec

        model_settings, ddp_settings = parse_settings(opts.megatron_settings or [])
        if moe[0] is not None:  # --megatron KEY=VALUE overrides
            merged = {**dict(moe_layers.settings(*moe)), **dict(model_settings)}
            model_settings = tuple(sorted(merged.items()))
        self.describe, self.save = table.describe(), save
        return TrainSpec(
            table,
            GPTSpec(
                vocab=VOCAB,
                layers=layers,
                hidden=hidden,
                heads=heads,
                seq_len=seq_len,
                settings=model_settings,
            ),
            micro_batch_size=mbs,
            steps=steps,
            lr=lr,
            seed=opts.seed,
            data=str(opts.data) if opts.data is not None else None,
            save=str(save) if save is not None else None,
            save_interval=opts.save_interval,
            load=str(opts.load) if opts.load is not None else None,
            ddp=ddp_settings,
            fault=("save", fault[1]) if fault else None,
            fault_rank=fault[0] if fault else 0,
            ep=opts.ep,
            kernels=kernels,
            tp=tp,
            sequence_parallel=sp,
            sp_wgrad=sp_wgrad,
            fb_overlap=opts.fb_overlap,
            clip_grad=opts.clip_grad,
            post_validation=opts.post_validation,
        )

    def launch(self, spec: Any) -> Any:
        from primuspp.backends.megatron.session import run_training

        table = spec.table
        tp_label = f", tp={spec.tp}" + (" sp" if spec.sequence_parallel else "") if spec.tp > 1 else ""
        shape = f"p={table.pp}, v={table.vpp}, m={table.num_microbatches}{tp_label}"
        label = f"training {table.algorithm} ({shape})"
        with step_bar(label, spec.steps) as update:

            def on_step(step: int, loss: float, ms: float) -> None:
                tokens = spec.tokens_per_step / (ms / 1000) if ms > 0 else 0.0
                update(
                    completed=step + 1, status=f"loss {loss:.4f}  step {ms:,.0f} ms  {tokens:,.0f} tokens/s"
                )

            return run_training(spec, on_step=on_step)

    def summarize(self, run: Any) -> RunSummary:
        summary = run.summary()
        if self.save is not None:
            summary.extra["checkpoint"] = str(self.save)
        return summary

    def dump(self, run: Any, directory: Path) -> None:
        from primuspp.backends.megatron.session import dump_pp_data

        dump_pp_data(run, directory)

    def render(self, summary: RunSummary) -> None:
        doc = summary.to_dict()
        model = doc["model"]
        moe = model["settings"].get("num_moe_experts")
        layers = (
            f"{model['layers']} MoE layers of {moe} experts, top-{model['settings']['moe_router_topk']}"
            if moe
            else f"{model['layers']} layers"
        )
        ep = doc.get("ep", 1)
        procs = f"{doc['pp'] * ep * doc.get('tp', 1)} processes"
        if ep > 1:
            procs += f" (pp {doc['pp']} x ep {ep})"
        procs += _tp_text(doc)
        out.print(
            f"trained Megatron GPT ({layers}, hidden {model['hidden']}, seq {model['seq_len']}, "
            f"{model['stages']} stages) with {self.describe} on {procs}, data: {doc['data']}, "
            f"kernels: {doc.get('kernels', 'torch')}"
        )
        rows = doc["steps"]
        shown = (
            sorted({round(i * (len(rows) - 1) / 9) for i in range(10)})
            if len(rows) > 10
            else range(len(rows))
        )
        render_steps(
            ("step", "loss", "step time ms", "pipeline ms", "tokens/s", "bubble"),
            [
                (
                    str(s["step"] + 1),
                    f"{s['loss']:.4f}",
                    f"{s['step_time_ms']:,.1f}",
                    f"{s['pipeline_ms']:,.1f}",
                    f"{s['tokens_per_s']:,.0f}",
                    f"{s['bubble_rate']:.1%}",
                )
                for s in (rows[i] for i in shown)
            ],
        )
        out.print(
            f"measured bubble rate {doc['bubble_rate']:.1%} (mean over steps after the first), "
            f"{doc['tokens_per_s']:,.0f} tokens/s"
        )
        out.print("peak activation per rank (MiB): " + " ".join(mib(b) for b in doc["peak_activation_bytes"]))
        render_footer(doc)
        if doc.get("checkpoint"):
            out.print(f"checkpoints in {doc['checkpoint']}/")


def _tp_text(doc: dict) -> str:
    if doc.get("tp", 1) <= 1:
        return ""
    sp = f", sequence parallel, W input {doc['sp_wgrad']}" if doc.get("sequence_parallel") else ""
    return f" (tp={doc['tp']}{sp})"


def parse_save_fault(text: str) -> tuple[int, int]:
    """RANK:save:STEP kills that rank right after it wrote its file of the save at STEP (tests)."""
    rank, what, step = [*text.split(":"), "", ""][:3]
    if not rank.isdigit() or what != "save" or not step.isdigit():
        raise ConfigError(
            f"--inject-fault {text!r}: expected RANK:save:STEP with --backend megatron", key="inject-fault"
        )
    return int(rank), int(step)
