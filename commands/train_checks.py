"""Checks and lines the training backends share: output locations, one-line refusals by flag, the
post-validation line. Kept apart from `train.py` (the verb) so the backends never import the verb."""

from __future__ import annotations

from pathlib import Path

from primuspp.errors import ConfigError
from primuspp.outputs import check_dir_target, check_writable_dir
from primuspp.runtime.backend import TrainOptions

DUMP_KEY = "--dump-pp-data"


def check_outputs(dump: Path | None, save: Path | None = None) -> None:
    """Every output location, before any rank starts: the dump is absent, empty or a dump primuspp wrote
    (it is replaced whole at the end); --save is a directory, or can be created."""
    if dump is not None:
        check_dir_target(dump, "pp_data", DUMP_KEY)
    if save is not None:
        check_writable_dir(save, "--save")


#: a parameter of `train` whose flag is not its name with dashes
_FLAGS = {"megatron_settings": "--megatron", "json_": "--json"}


def flag(name: str) -> str:
    """The command-line flag of `train`'s parameter `name`."""
    return _FLAGS.get(name) or "--" + name.replace("_", "-")


def refuse(opts: TrainOptions, names: tuple[str, ...], why: str) -> None:
    """A one-line error for the first of the options `names` that was given: `--flag why`."""
    for name in opts.given(*names):
        raise ConfigError(f"{flag(name)} {why}", key=flag(name)[2:])


def check_clip(opts: TrainOptions) -> None:
    """--clip-grad, when given, is a finite number > 0."""
    clip = opts.clip_grad
    if clip is not None and not 0 < clip < float("inf"):
        raise ConfigError(f"--clip-grad {clip}: expected a finite number > 0", key="clip-grad")


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def render_steps(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """The table of a run's steps, every column right-aligned."""
    from rich.table import Table

    from primuspp.commands.console import out

    table = Table(title_justify="left")
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    out.print(table)


def render_footer(doc: dict) -> None:
    """The lines ending a run's report: its post-validation counts (when it had them) and its pp_data."""
    from primuspp.commands.console import out

    pv = doc.get("post_validation")
    if pv is not None:
        out.print(
            f"post-validation: {pv['validated']} validated, {pv['rolled_back']} rolled back and redone "
            f"with clipping, {pv['skipped']} skipped (overflow)"
        )
    if doc.get("pp_data"):
        out.print(f"per-node timings (Primus pp_data) in {doc['pp_data']}/", highlight=False)


#: flags only the emulated cluster reads
EMULATION_FLAGS = ("fwd", "bwd", "wgrad", "config", "costs_from", "optimizer_cost")


def refuse_megatron_only(opts: TrainOptions, where: str) -> None:
    """MoE layers, expert parallelism, kernel providers and tensor parallelism run on the megatron backend
    only: a one-line error for the first such flag given (`where`: the backend asked for)."""
    moe = {
        "--moe-experts": opts.moe_experts,
        "--moe-topk": opts.moe_topk,
        "--moe-ffn": opts.moe_ffn,
        "--moe-shared-ffn": opts.moe_shared_ffn,
        "--ep": opts.ep if opts.ep != 1 else None,
        "--kernels": opts.kernels if opts.kernels != "auto" else None,
    }
    for name, value in moe.items():
        if value is not None:
            raise ConfigError(
                f"{name} {value}: MoE layers, expert parallelism and kernel providers run on the "
                f"megatron backend only, not on {where}",
                key=name[2:],
            )
    tensor = {
        "--tp": opts.tp != 1,
        "--sequence-parallel": opts.sequence_parallel,
        "--sp-wgrad": opts.sp_wgrad != "regather",
        "--fb-overlap": opts.fb_overlap,
    }
    for name, given in tensor.items():
        if given:
            raise ConfigError(f"{name} is only available with --backend megatron", key=name[2:])
