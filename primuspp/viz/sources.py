"""What `primuspp viz` draws: timelines from a simulate output, a pp_data dump or a YAML config."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from primuspp.config.loader import load_config, run_specs
from primuspp.errors import ConfigError, PrimusppError
from primuspp.inputs import load_json, read_text
from primuspp.schedule.costs import CostModel
from primuspp.schedule.formats import from_json
from primuspp.sim.engine import simulate
from primuspp.sim.runs import run
from primuspp.sim.sources import run_dirs
from primuspp.trace.metrics import typical
from primuspp.trace.reconstruct import read_labelled
from primuspp.trace.timeline import Timeline

YAML_SUFFIXES = (".yaml", ".yml")
#: the most bytes of pp_rank files one run may hold to be drawn, checked before any is read (about a million
#: intervals: a 128-rank zbv run of 1024 microbatches, or a thousand iterations of a small one); a page of
#: more boxes would not draw, and reading them took minutes and gigabytes
MAX_RUN_BYTES = 64 << 20


@dataclass(frozen=True)
class Source:
    """One section of the page: a run, with one timeline per iteration (one for simulations)."""

    label: str
    path: str
    timelines: tuple[Timeline, ...]
    note: str = ""


def load_sources(paths: list[Path]) -> list[Source]:
    """Every PATH's runs, in order; labels made unique."""
    sources = [s for path in paths for s in load_path(Path(path))]
    seen: dict[str, int] = {}
    unique = []
    for s in sources:
        seen[s.label] = seen.get(s.label, 0) + 1
        label = s.label if seen[s.label] == 1 else f"{s.label} ({seen[s.label]})"
        unique.append(replace(s, label=label))
    return unique


def shown_iterations(sources: list[Source], iteration: str | None) -> list[int]:
    """For each source, the index of the timeline to show first: `iteration` where the source has it, else
    a typical one (`typical`). An `iteration` no source has is an error."""
    if iteration is not None and not any(tl.iteration == iteration for s in sources for tl in s.timelines):
        have = ", ".join(f"{s.label}: {_iteration_range(s)}" for s in sources)
        raise ConfigError(f"--iteration {iteration}: no source has it ({have})", key="iteration")
    return [
        next((i for i, tl in enumerate(s.timelines) if tl.iteration == iteration), typical(s.timelines))
        for s in sources
    ]


def _iteration_range(source: Source) -> str:
    its = [tl.iteration for tl in source.timelines]
    return its[0] if len(its) == 1 else f"{its[0]}..{its[-1]}"


def load_path(path: Path) -> list[Source]:
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory", key="path")
    if path.is_file():
        if path.suffix.lower() not in YAML_SUFFIXES:
            raise ConfigError(
                f"{path}: expected a simulate output directory, a pp_data directory or a YAML config",
                key="path",
            )
        try:
            return [
                Source(spec.name, str(path), (run(spec).timeline,), f"simulated from {path}")
                for spec in run_specs(load_config(path))
            ]
        except PrimusppError as err:  # e.g. an algorithm this build lacks: say which file asked for it
            if str(path) in str(err):
                raise
            raise type(err)(f"{path}: {err}", key=err.key) from None
    if not path.is_dir():
        raise ConfigError(
            f"{path}: not a regular file nor a directory (a FIFO, socket or device); expected a simulate "
            "output directory, a pp_data directory or a YAML config",
            key="path",
        )
    sources = [_run_dir(p) for p in run_dirs(path)]
    if len({_size(s) for s in sources}) > 1:  # a root of several sizes is not one set: by size, labelled
        sources = [
            replace(s, label=f"{s.label} (p {_size(s)[0]}, m {_size(s)[1]})")
            for s in sorted(sources, key=_size)
        ]
    return sources


def _size(source: Source) -> tuple[int, int]:
    return source.timelines[0].pp, source.timelines[0].micro_batches


def with_transfers(source: Source, index: int) -> Timeline:
    """Timeline `index` of the source, with its p2p transfers. pp_data has no place for them, but a simulate
    output keeps its table (schedule.json) and costs (config.json): simulating it again recovers them (for
    the Chrome trace's send -> receive arrows). Anything else comes back as it is."""
    timeline = source.timelines[index]
    run_dir = Path(source.path)
    if timeline.transfers or timeline.source != "simulated" or not (run_dir / "schedule.json").is_file():
        return timeline
    try:
        costs = CostModel(**load_json(run_dir / "config.json")["costs"])
        table = from_json(read_text(run_dir / "schedule.json"), str(run_dir / "schedule.json"))
        again = simulate(table, costs, timeline.name).timeline
    except (OSError, KeyError, TypeError, ValueError, PrimusppError):
        return timeline
    same = [sorted((iv.start, iv.end) for iv in rt.intervals) for rt in again.ranks] == [
        sorted((iv.start, iv.end) for iv in rt.intervals) for rt in timeline.ranks
    ]
    return replace(timeline, transfers=again.transfers) if same else timeline


def _run_dir(path: Path) -> Source:
    size = sum(p.stat().st_size for p in path.glob("pp_rank_*.json") if p.is_file())
    if size > MAX_RUN_BYTES:
        raise ConfigError(
            f"{path}: its pp_rank files hold {size / 2**20:.0f} MiB; viz draws runs of at most "
            f"{MAX_RUN_BYTES >> 20} MiB (about a million intervals): dump fewer iterations, or simulate "
            "fewer ranks or microbatches to look at",
            key="path",
        )
    timelines, note = read_labelled(path)
    return Source(timelines[0].name or path.name, str(path), tuple(timelines), note)
