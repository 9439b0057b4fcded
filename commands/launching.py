"""What the verbs that start ranks share: the table with the CLI's defaults, the per-step progress bar, and
how a failed launch ends (one line, exit 1)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from primuspp.algorithms.registry import build_schedule
from primuspp.commands.console import StepLines, err
from primuspp.errors import ConfigError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.table import ScheduleTable

T = TypeVar("T")

DEFAULT_PP, DEFAULT_MB = 4, 8
#: most processes one local launch starts (one per rank); larger pipelines run under torchrun
MAX_LOCAL_RANKS = 64


def run_table(
    algo: str, pp: int | None, vpp: int | None, mb: int | None, costs: CostModel | None = None
) -> ScheduleTable:
    """The table a run executes: p=4, m=8 unless given (file: tables carry their own). A local launch starts
    one process per rank: more than MAX_LOCAL_RANKS is refused before anything is built."""
    from_file = algo.startswith("file:")
    _check_local_ranks(pp)
    table = build_schedule(
        algo,
        pp if pp is not None or from_file else DEFAULT_PP,
        vpp,
        mb if mb is not None or from_file else DEFAULT_MB,
        costs,
    )
    _check_local_ranks(table.pp)
    return table


#: largest value of any model-size option (beyond it sizes overflow torch's int64 shapes)
MAX_MODEL_DIM = 1 << 24
#: most experts of an MoE layer (DeepSeek-V3 has 256, Kimi K2 384)
MAX_EXPERTS = 1024


def check_model_size(
    sizes: dict[str, int], vocab: int, micro_batches: int, ranks: int, experts: tuple[int, int] | None = None
) -> None:
    """Refuse, before any rank starts, a model this machine cannot hold: `--hidden` a multiple of `--heads`,
    and an estimate of the run's bytes (fp32 parameters with gradients and Adam state, 16 B each:
    12·L·h² + 2·vocab·h, or with `experts` (N experts of FFN size f each) 4·L·h² + 2·N·L·h·f; activations of
    every microbatch in flight, about 34·s·b·h per layer plus 4·s·b·vocab of logits, times one rank's layers
    and at most every microbatch) within the machine's memory."""
    layers, hidden, heads = sizes["layers"], sizes["hidden"], sizes["heads"]
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} must be a multiple of --heads {heads}", key="heads")
    tokens = sizes["seq-len"] * sizes["micro-batch-size"]
    if experts is None:
        params = 12 * layers * hidden * hidden + 2 * vocab * hidden
    else:
        params = (
            4 * layers * hidden * hidden + 2 * experts[0] * layers * hidden * experts[1] + 2 * vocab * hidden
        )
    activations = (34 * tokens * hidden * layers + 4 * tokens * vocab) * micro_batches
    need = 16 * params + activations
    have = _physical_memory()
    if have and need > have:
        given = " ".join(f"--{k} {v}" for k, v in sizes.items())
        if experts is not None:
            given = f"--moe-experts {experts[0]} --moe-ffn {experts[1]} {given}"
        raise ConfigError(
            f"{given}: the run needs an estimated {need / 2**30:,.1f} GiB ({params:,} parameters, "
            f"{activations / 2**30:,.1f} GiB of activations over {ranks} ranks), over this machine's "
            f"{have / 2**30:,.1f} GiB",
            key="moe-experts" if experts is not None else "hidden",
        )


def _physical_memory() -> int:
    import os

    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _check_local_ranks(pp: int | None) -> None:
    if pp is not None and pp > MAX_LOCAL_RANKS and not _under_torchrun():
        raise ConfigError(
            f"--pp {pp}: a local run starts one process per rank, at most {MAX_LOCAL_RANKS} "
            "(start larger pipelines with torchrun, one process per rank)",
            key="pp",
        )


def check_tp_ranks(tp: int, pp: int) -> None:
    """A local launch of tp x pp processes: at most MAX_LOCAL_RANKS."""
    if tp * pp > MAX_LOCAL_RANKS and not _under_torchrun():
        raise ConfigError(
            f"--tp {tp} x --pp {pp} = {tp * pp} ranks: a local run starts one process per rank, at most "
            f"{MAX_LOCAL_RANKS} (start larger runs with torchrun, one process per rank)",
            key="tp",
        )


def _under_torchrun() -> bool:
    from primuspp.runtime.launch import under_torchrun  # imports torch: only past the local limit

    return under_torchrun()


@contextmanager
def step_bar(label: str, steps: int) -> Iterator[Callable[..., None]]:
    """A progress bar over `steps` on stderr; yields `update(completed=..., advance=..., status=...)`. When
    stderr is not a terminal (a pipe, a log): plain lines instead (console.StepLines)."""
    if not err.is_terminal:
        lines = StepLines(label, steps)
        try:
            yield lines.update
        finally:
            lines.close()
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err.console,
        transient=True,
    )
    task = bar.add_task(label, total=steps, status="starting ranks")
    with bar:
        yield lambda **fields: bar.update(task, **fields)


def launched(run: Callable[[], T]) -> T:
    """`run()`, or the launch failure as one line on stderr and exit 1 (ranks are already reaped)."""
    from primuspp.runtime.launch import LaunchError  # torch: imported only by verbs that start ranks

    try:
        return run()
    except LaunchError as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        raise typer.Exit(1) from None
