"""Options shared by several verbs.

Numbers are bounded where they are typed (primuspp.schedule.limits): --pp 1..65,536, --vpp 1..1,024,
--mb 1..1,048,576, costs (--fwd/--bwd/--wgrad/--comm) finite and 0..1e15, --mem-limit finite in (0, 1e9],
--max-nodes the estimated nodes a command may build (default 10 million, ~4 GiB). A value outside is one
line naming the flag, exit 2."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from primuspp.commands.console import err
from primuspp.schedule.limits import (
    DEFAULT_MAX_NODES,
    MAX_COST,
    MAX_MB,
    MAX_MEM_LIMIT,
    MAX_PP,
    MAX_TOKENS,
    MAX_VPP,
    SIZE_FLAGS,
    bounded_int,
)

if TYPE_CHECKING:
    from primuspp.config.loader import Overrides


def finite_check(
    low: float = 0.0, high: float = MAX_COST, *, open_low: bool = False
) -> Callable[[float | None], float | None]:
    """A typer callback refusing NaN, ±inf and values outside [low, high] ((low, high] with `open_low`)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        below = value <= low if open_low else value < low
        if not math.isfinite(value) or below or value > high:
            relation = ">" if open_low else "≥"
            raise typer.BadParameter(f"{value:g}: expected a finite number {relation} {low:g} and ≤ {high:g}")
        return value

    return check


def int_check(low: int, high: int) -> Callable[[int | None], int | None]:
    """A typer callback refusing integers outside [low, high], naming the value and the range."""

    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            raise typer.BadParameter(f"{value}: expected an integer from {low:,} to {high:,}")
        return value

    return check


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Simulation YAML (ours or Primus' pp_simulation.yaml).")
]
AlgoOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--algo", "-a", help="Algorithm name or alias, or file:PATH (repeatable). See `primuspp algorithms`."
    ),
]
PpOpt = Annotated[int | None, typer.Option("--pp", callback=int_check(1, MAX_PP), help="Pipeline ranks p.")]
VppOpt = Annotated[
    int | None,
    typer.Option(
        "--vpp", callback=int_check(1, MAX_VPP), help="Chunks per rank v (algorithms that allow it)."
    ),
]
MbOpt = Annotated[
    int | None,
    typer.Option(
        "--mb", "--micro-batches", callback=int_check(1, MAX_MB), help="Microbatches per iteration m."
    ),
]


def _cost(flag: str, what: str, default: int) -> Any:
    help_ = f"{what} in ms (default: the config's, packaged {default})."
    return typer.Option(flag, callback=finite_check(), help=help_)


FwdOpt = Annotated[float | None, _cost("--fwd", "Forward (F) time of a rank's share per microbatch", 1000)]
BwdOpt = Annotated[float | None, _cost("--bwd", "Input-grad (B) time (a full backward: B + W)", 1000)]
WgradOpt = Annotated[float | None, _cost("--wgrad", "Weight-grad (W) time", 1000)]
CommOpt = Annotated[float | None, _cost("--comm", "Latency of one p2p transfer", 0)]
MemLimitOpt = Annotated[
    float | None,
    typer.Option(
        "--mem-limit",
        callback=finite_check(0.0, MAX_MEM_LIMIT, open_low=True),
        help="Per-rank memory cap, > 0: in microbatch units for simulations (1 = one microbatch's "
        "activations, whole rank), in GiB for measured runs (compare SOURCES).",
    ),
]
MaxNodesOpt = Annotated[
    int,
    typer.Option(
        "--max-nodes",
        callback=int_check(1, 10**12),
        help="Refuse runs whose tables are estimated above this many nodes in all (compute + p2p; about "
        "400 bytes each: the default keeps a command near 4 GiB).",
    ),
]
CostsFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--costs-from",
        help="Measure the cost model from a pp_data dump or result directory (--pp and --mb default to "
        "the run's).",
    ),
]
ShowOpt = Annotated[
    bool,
    typer.Option("--show", help="Draw each run's timeline in the terminal (a row per rank, coloured cells)."),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else there.")
]


def overrides(
    algo: list[str] | None = None,
    pp: int | None = None,
    vpp: int | None = None,
    mb: int | None = None,
    fwd: float | None = None,
    bwd: float | None = None,
    wgrad: float | None = None,
    comm: float | None = None,
    mem_limit: float | None = None,
    costs_from: Path | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> Overrides:
    # imported here, not above: a verb's --help needs only the option types (start-up time)
    from primuspp.config.loader import Overrides

    costs: dict[str, Any] = {}
    if costs_from is not None:
        from primuspp.sim.calibrate import costs_from_dir

        cal = costs_from_dir(str(costs_from))
        measured = cal.portable()  # one value per rank: any placement over the same p
        keys = ("forward", "backward", "wgrad", "comm", "activation", "b_free_fraction")
        costs.update({k: getattr(measured, k) for k in keys})
        note = " (no W in the run: full backward split evenly into B and W)" if cal.bw_split_assumed else ""
        unit = ""
        if cal.memory_unit != "microbatches" and cal.activation_per_microbatch > 0:
            unit = f"; 1 activation unit = {cal.activation_per_microbatch:,.0f} {cal.memory_unit}"
        # sizes the command line leaves out are the run's
        taken = [
            f"{k} {v}" for k, v, given in (("p", cal.pp, pp), ("m", cal.micro_batches, mb)) if given is None
        ]
        pp, mb = pp or cal.pp, mb or cal.micro_batches
        size = f"; {', '.join(taken)} from the run" if taken else ""
        err.print(
            f"costs measured from {costs_from}: {cal.samples} intervals{note}; p2p latency "
            f"{cal.costs.comm:.3g} ms ({cal.comm_samples} waiting hand-offs){unit}{size}",
            highlight=False,
        )
    explicit = (("forward", fwd), ("backward", bwd), ("wgrad", wgrad), ("comm", comm))
    costs.update({k: v for k, v in explicit if v is not None})
    return Overrides(tuple(algo or ()), pp, vpp, mb, costs, mem_limit, max_nodes)


# --- a real model on a GPU profile (`plan`, and `simulate` / `compare` with --model) ---------------------

MODEL_HELP = "Preset (e.g. llama3-70b) or a Hugging Face config.json path."
GPU_HELP = "GPU profile (mi300x, h100, cpu, ...) or a YAML path."
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help=MODEL_HELP + " Projects in ms and bytes (the costs come from the model)."),
]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help=GPU_HELP + " With --model (default h100).")]
SeqLenOpt = Annotated[int | None, typer.Option("--seq-len", help="Tokens per sequence (default 4096).")]
LayoutOpt = Annotated[
    str | None, typer.Option("--layout", help="balanced (default), even, or a Megatron layout string.")
]
FirstLayersOpt = Annotated[
    int | None,
    typer.Option("--decoder-first-pipeline-num-layers", help="Layers on the first pipeline rank (Megatron)."),
]
LastLayersOpt = Annotated[
    int | None,
    typer.Option("--decoder-last-pipeline-num-layers", help="Layers on the last pipeline rank (Megatron)."),
]
NoSpOpt = Annotated[bool, typer.Option("--no-sequence-parallel", help="TP without sequence parallelism.")]
SpWgradOpt = Annotated[
    str | None,
    typer.Option(
        "--sp-wgrad",
        help="With sequence parallelism: W of a column-parallel linear gathers its input again (regather, "
        "default: W time) or keeps it from F (keep: memory).",
    ),
]
DtypeOpt = Annotated[
    str | None, typer.Option("--dtype", help="Peak FLOP/s to use: bf16 or fp8 (fp32: 4-byte activations).")
]
TpOpt = Annotated[int | None, typer.Option("--tp", help="With --model: tensor-parallel size (default 1).")]
EpOpt = Annotated[int | None, typer.Option("--ep", help="With --model: expert-parallel size (default 1).")]
CpOpt = Annotated[int | None, typer.Option("--cp", help="With --model: context-parallel size (default 1).")]
GpusOpt = Annotated[
    int | None,
    typer.Option("--gpus", help="With --model: GPUs in all, TP x CP x PP x DP (default TP x CP x PP)."),
]
MbsOpt = Annotated[
    int | None, typer.Option("--micro-batch-size", help="With --model: sequences per microbatch (default 1).")
]
GbsOpt = Annotated[
    int | None,
    typer.Option(
        "--global-batch-size", help="With --model: sequences per step (default micro-batch size x DP x m)."
    ),
]
RecomputeOpt = Annotated[
    str | None, typer.Option("--recompute", help="With --model: none (default), selective or full.")
]
RecomputeLayersOpt = Annotated[
    int | None,
    typer.Option(
        "--recompute-num-layers",
        help="With --recompute full: only the first N layers of every pipeline part (Megatron's block "
        "method).",
    ),
]
MainGradsOpt = Annotated[
    str | None, typer.Option("--main-grads-dtype", help="fp32 (default) or bf16 (precision-aware optimizer).")
]
MomentsOpt = Annotated[
    str | None,
    typer.Option(
        "--moments-dtype", help="Adam's moments: fp32 (default) or bf16 (precision-aware optimizer)."
    ),
]
NoDistOptOpt = Annotated[
    bool,
    typer.Option("--no-distributed-optimizer", help="Optimizer state whole on every DP rank (not sharded)."),
]
OverlapOpt = Annotated[
    str | None,
    typer.Option(
        "--overlap",
        help="Communication hidden behind compute, comma-separated: grad-reduce, param-gather, tp, ep, or "
        "none (default grad-reduce,param-gather,tp: Megatron's recommended settings).",
    ),
]
DEFAULT_OVERLAP = "grad-reduce,param-gather,tp"


def training(
    recompute_layers: int | None,
    main_grads: str | None,
    moments: str | None,
    no_distributed_optimizer: bool,
    overlap: str | None,
) -> dict:
    """The optimizer, recompute and overlap flags as `Parallel` fields, checked (one line naming the flag)."""
    from primuspp.errors import ConfigError
    from primuspp.models.runs import OVERLAP_FIELDS as OVERLAPS

    check_positive("--recompute-num-layers", recompute_layers)
    sizes = {}
    for flag, value, field in (
        ("--main-grads-dtype", main_grads, "main_grad_bytes"),
        ("--moments-dtype", moments, "moment_bytes"),
    ):
        if value not in (None, "fp32", "bf16"):
            raise ConfigError(f"{flag} {value}: expected fp32 or bf16", key=flag)
        sizes[field] = 2 if value == "bf16" else 4
    names = [n.strip() for n in (overlap or DEFAULT_OVERLAP).split(",")]
    if names != ["none"]:
        for n in names:
            if n not in OVERLAPS:
                allowed = ", ".join(OVERLAPS)
                raise ConfigError(
                    f"--overlap {overlap}: unknown '{n}' (allowed: {allowed}, or none)", key="--overlap"
                )
    chosen = {field: name in names for name, field in OVERLAPS.items()}
    if no_distributed_optimizer and "param-gather" in names and overlap is not None:
        raise ConfigError(
            f"--overlap {overlap}: param-gather needs the distributed optimizer (without it no parameters "
            "are gathered)",
            key="--overlap",
        )
    return {
        "recompute_layers": recompute_layers,
        "distributed_optimizer": not no_distributed_optimizer,
        **sizes,
        **chosen,
    }


def sp_wgrad(value: str | None) -> str:
    """--sp-wgrad checked: regather (default) or keep."""
    from primuspp.errors import ConfigError
    from primuspp.models.parallel import SP_WGRAD

    if value is None:
        return "regather"
    if value not in SP_WGRAD:
        raise ConfigError(f"--sp-wgrad {value}: expected regather or keep", key="--sp-wgrad")
    return value


def check_positive(key: str, value: int | None, high: int | None = None) -> None:
    """An integer flag given as 0 or less, or over `high` (default: its bound in `SIZE_FLAGS`, else
    2^31), is one line naming it."""
    if value is not None:
        bounded_int(value, key, 1, high or SIZE_FLAGS.get(key, 2**31))


def check_batch(seq_len: int, micro_batch_sizes: Iterable[int]) -> None:
    """--seq-len and --micro-batch-size bounded, alone and as tokens per microbatch."""
    check_positive("--seq-len", seq_len)
    why = f" ({MAX_TOKENS:,} tokens per microbatch at --seq-len {seq_len})"
    for mbs in micro_batch_sizes:
        bounded_int(mbs, "--micro-batch-size", 1, MAX_TOKENS // seq_len, why)


def first_last(first: int | None, last: int | None) -> tuple[int | None, int | None] | None:
    """Megatron's --decoder-first/last-pipeline-num-layers, checked; None when neither is given."""
    check_positive("--decoder-first-pipeline-num-layers", first)
    check_positive("--decoder-last-pipeline-num-layers", last)
    return None if first is None and last is None else (first, last)


LayersOpt = Annotated[int | None, typer.Option("--layers", help="With --model: transformer layers instead.")]
HiddenOpt = Annotated[
    int | None,
    typer.Option("--hidden", help="With --model: hidden size instead (the FFN keeps its ratio)."),
]
HeadsOpt = Annotated[int | None, typer.Option("--heads", help="With --model: attention heads instead.")]
FfnOpt = Annotated[int | None, typer.Option("--ffn", help="With --model: MLP width instead.")]
KvHeadsOpt = Annotated[int | None, typer.Option("--kv-heads", help="With --model: key/value heads instead.")]
VocabOpt = Annotated[int | None, typer.Option("--vocab", help="With --model: vocabulary size instead.")]

#: the --model flags (parameter name: option), in the order --help lists them
#: (`model_flags.model_options`)
MODEL_OPTIONS: dict[str, Any] = {
    name: globals()[alias]
    for name, alias in (
        pair.split(":")
        for pair in """model:ModelOpt gpu:GpuOpt tp:TpOpt ep:EpOpt cp:CpOpt gpus:GpusOpt
        micro_batch_size:MbsOpt global_batch_size:GbsOpt seq_len:SeqLenOpt recompute:RecomputeOpt
        layout:LayoutOpt dtype:DtypeOpt no_sequence_parallel:NoSpOpt sp_wgrad:SpWgradOpt
        first_layers:FirstLayersOpt last_layers:LastLayersOpt layers:LayersOpt hidden:HiddenOpt
        heads:HeadsOpt ffn:FfnOpt kv_heads:KvHeadsOpt vocab:VocabOpt recompute_layers:RecomputeLayersOpt
        main_grads_dtype:MainGradsOpt moments_dtype:MomentsOpt no_distributed_optimizer:NoDistOptOpt
        overlap:OverlapOpt""".split()  # noqa: SIM905
    )
}
