"""Result directories: `<out>/<name>/config.json + pp_rank_<r>.json + summary.json`, written atomically."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from primuspp.errors import ConfigError
from primuspp.schedule.formats import to_json_dict
from primuspp.sim.engine import SimResult
from primuspp.sim.runs import summary
from primuspp.trace.pp_data import write_pp_data


def write_result(result: SimResult, out_dir: str | Path) -> Path:
    """Write one run's directory; an earlier one of the same name is replaced only once all is written."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot create ({err.strerror})", key="out") from None
    target = out / result.name
    tmp = Path(tempfile.mkdtemp(prefix=f".{result.name}.", dir=out))
    try:
        costs = result.costs
        extra = {
            "placement": result.table.placement.kind,
            "costs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in costs.__dict__.items()},
        }
        write_pp_data([result.timeline], tmp, extra)
        (tmp / "summary.json").write_text(json.dumps(summary(result), indent=2) + "\n")
        (tmp / "schedule.json").write_text(json.dumps(to_json_dict(result.table)) + "\n")
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{result.name}.old.", dir=out))
            target.rename(old / "x")
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
