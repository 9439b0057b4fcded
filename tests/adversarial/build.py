"""Input builders the cases share: configs, tables and pp_data directories, made from code (or from the
golden outputs of the tool itself, then corrupted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial.harness import Ctx

#: what `simulate --out out` writes; user files in result dirs are not in it
SIM_OUT = (
    "out",
    "out/*",
    "out/*/config.json",
    "out/*/summary.json",
    "out/*/schedule.json",
    "out/*/pp_rank_*.json",
)
SMALL = ["--pp", "4", "--mb", "8"]


def yaml_runs(*runs: str, head: str = "pp: 4\nmicro_batches: 8\n") -> str:
    """An our-format YAML with the given run entries (each a flow mapping)."""
    return head + "runs:\n" + "".join(f"  - {r}\n" for r in runs)


def primus_yaml(*schedulers: str, head: str = "fwd_time: 10\nbwd_time: 10\nwgrad_time: 5\n") -> str:
    return head + "schedulers:\n" + "".join(f"  - {s}\n" for s in schedulers)


def config(ctx: Ctx, text: str | bytes, name: str = "c.yaml") -> str:
    return str(ctx.write(f"in/{name}", text))


def run_dir(ctx: Ctx, algo: str = "1f1b", rel: str = "in/run") -> Path:
    """A copy of a real simulate result directory (config.json, pp_rank_*.json, summary, schedule)."""
    return ctx.copy_golden(f"all/{algo}", rel)


def dump_dir(ctx: Ctx, algo: str = "1f1b", rel: str = "in/run") -> Path:
    """The same run as a bare pp_data dump (config.json + pp_rank_*.json): readers must use its rank files."""
    d = run_dir(ctx, algo, rel)
    for extra in ("summary.json", "schedule.json"):
        (d / extra).unlink()
    return d


def edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    data = json.loads(path.read_text())
    new = change(data)
    path.write_text(json.dumps(data if new is None else new))


def edit_rank(directory: Path, rank: int, change: Callable[[dict], None]) -> None:
    """Apply `change` to every iteration record of one pp_rank file."""

    def each(data: dict) -> None:
        for rec in data.values():
            change(rec)

    edit_json(directory / f"pp_rank_{rank}.json", each)


def raw_rank(directory: Path, rank: int, text: str | bytes) -> None:
    p = directory / f"pp_rank_{rank}.json"
    p.write_bytes(text.encode() if isinstance(text, str) else text)


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_yaml(depth: int) -> str:
    return "pp: 4\nruns: " + "[" * depth + "]" * depth + "\n"


def alias_bomb(levels: int = 9) -> str:
    """A YAML 'billion laughs': 9 levels of 9 aliases each under runs[0].params."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    # the anchors live in a key our schema does not know: the loader must refuse without expanding them
    return "\n".join(["pp: 4", "micro_batches: 8", "costs:", *["  " + ln for ln in lines]]) + (
        f"\nruns:\n  - algorithm: 1f1b\n    params: {{x: *a{levels - 1}}}\n"
    )


def old_interleaved_dump(ctx: Ctx, rel: str = "in/dump") -> Path:
    """A Primus-style real-run dump of interleaved 1F1B (p=4, v=2, m=8) in its older format: no
    minibatch/chunk/stage/kind keys, no memory curve, `vp_size`/`num_mbs` in config.json. Made from our
    simulation with chunk costs F=10, B=20 per chunk (so its 'measured' step time is known)."""
    src = ctx.copy_golden("all/1f1b-interleaved-v2", rel)
    for p in src.glob("pp_rank_*.json"):
        data = json.loads(p.read_text())
        for rec in data.values():
            for k in list(rec):
                if not k.endswith(("_start", "_end")) and k != "total":
                    del rec[k]
            # Primus' older dumps hold one full backward per microbatch: no W
            rec.pop("wgrad_start", None)
            rec.pop("wgrad_end", None)
        p.write_text(json.dumps({"1": next(iter(data.values()))}))
    (src / "config.json").write_text(json.dumps({"pp_size": 4, "vp_size": 2, "num_mbs": 8, "train_iters": 3}))
    for extra in ("summary.json", "schedule.json"):
        (src / extra).unlink(missing_ok=True)
    return src
