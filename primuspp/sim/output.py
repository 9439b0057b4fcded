"""Result directories: `<out>/<name>/config.json + pp_rank_<r>.json + summary.json + schedule.json`.

Each is written whole through `primuspp.outputs.replace_dir` (an existing one is replaced only when primuspp
wrote it, and never when it holds a file primuspp did not write); `results_dir` holds the lock of `<out>`
for the whole run and checks every target before anything is simulated. `write_results` keeps `<out>` one
set: the runs an earlier simulation of other sizes left there (ours) are removed once the new ones are in."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from primuspp.errors import ConfigError
from primuspp.inputs import load_json
from primuspp.outputs import (
    OLD_PREFIX,
    check_dir_target,
    locked_dir,
    make_temp_dir,
    replace_dir,
    safe_component,
)
from primuspp.schedule.formats import to_json_pieces
from primuspp.sim.engine import SimResult
from primuspp.sim.runs import summary
from primuspp.trace.pp_data import write_pp_data

KEY = "--out"


def check_results(out_dir: str | Path, names: Sequence[str]) -> None:
    """Every run's directory under `out_dir` can be written (names safe, targets absent or ours)."""
    out = Path(out_dir)
    for name in names:
        check_dir_target(out / safe_component(name, "run name"), "result", KEY)


@contextmanager
def results_dir(out_dir: str | Path, names: Sequence[str]) -> Iterator[Path]:
    """Lock `out_dir` and check the targets of `names` before the work inside the block."""
    with locked_dir(out_dir, KEY) as out:
        check_results(out, names)
        yield out


def write_result(result: SimResult, out_dir: str | Path) -> Path:
    """Write one run's directory; an earlier one of the same name (ours) is replaced only once all is
    written."""
    name = safe_component(result.name, "run name")  # again here: no name may leave `out_dir`

    def write(tmp: Path) -> None:
        costs = result.costs
        extra = {
            "placement": result.table.placement.kind,
            "costs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in costs.__dict__.items()},
        }
        write_pp_data([result.timeline], tmp, extra)
        (tmp / "summary.json").write_text(json.dumps(summary(result), indent=2) + "\n")
        with open(tmp / "schedule.json", "w", encoding="utf-8") as f:  # a rank at a time: never all held
            f.writelines(to_json_pieces(result.table))
            f.write("\n")

    return replace_dir(Path(out_dir) / name, "result", write, KEY)


def write_results(results: Sequence[SimResult], out_dir: str | Path) -> str:
    """Write every run (under `results_dir`'s lock), then remove the result directories of other sizes (p,
    m) an earlier simulation left in `out_dir`, each whole and only when it is ours, so that readers never
    take two sizes for one set. Returns one line saying what was removed or kept ("" when nothing)."""
    out = Path(out_dir)
    for result in results:
        write_result(result, out)
    sizes = {(r.table.pp, r.table.num_microbatches) for r in results}
    removed: dict[str, list[str]] = {}
    kept = []
    for d in sorted(out.iterdir()):
        size = _size(d) if d.name not in {r.name for r in results} else None
        if size is None or size in sizes:
            continue
        at = f"p {size[0]} m {size[1]}"
        try:
            check_dir_target(d, "result", KEY)
        except ConfigError:
            kept.append(f"{d.name} ({at})")
            continue
        aside = make_temp_dir(out, d.name, OLD_PREFIX)  # marked: a killed run's is removed later
        os.rename(d, aside / d.name)  # gone at once, then deleted
        shutil.rmtree(aside, ignore_errors=True)
        removed.setdefault(at, []).append(d.name)
    lines = [
        f"removed {len(n)} earlier run{'s' * (len(n) > 1)} at {at} from {out}/ ({', '.join(n)})"
        for at, n in removed.items()
    ]
    if kept:
        lines.append(f"kept {', '.join(kept)} in {out}/: not primuspp's alone to remove")
    return "; ".join(lines)


def _size(run_dir: Path) -> tuple | None:
    """(p, m) of a result directory by its summary.json; None when it has none readable."""
    try:
        s = load_json(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else None
    except ConfigError:
        return None
    return (s.get("pp"), s.get("micro_batches")) if isinstance(s, dict) else None
