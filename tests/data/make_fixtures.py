"""Write the Primus-format fixtures under tests/data/primus/ (deterministic; see tests/data/README.md).

    python tests/data/make_fixtures.py          # rewrite them
    python tests/data/make_fixtures.py --check  # exit 1 if the files on disk differ from what it writes

Real-run dumps are replayed from a schedule table with per-rank base costs, seeded log-normal jitter, a p2p
latency, host-side gaps between kernels and a slow first iteration (warm-up), then written in Primus'
real-run layout. Simulator output is our simulator's result for the fixture config, written in the layout of
Primus' simulator (only the keys that simulator writes).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule.costs import CostModel
from primuspp.schedule.table import ScheduleTable
from primuspp.sim import simulate

HERE = Path(__file__).resolve().parent
ROOT = HERE / "primus"
SEED = 20240611

#: Primus' simulator config: the class paths are how Primus names its algorithms.
PP_SIMULATION_YAML = """\
# A config in the format of Primus-Pipeline's pp_simulation.yaml (written by make_fixtures.py).
fwd_time: 1000
bwd_time: 1000
wgrad_time: 1000

print_simulation_result: true

output_dir: ./pp_simulation_result

schedulers:
{schedulers}"""

_CLASS = "primus.core.pipeline_parallel.scheduler.algorithms"
#: (name, class path, vpp, extra keys, our algorithm, written to simulator_output_p8_m32/)
SCHEDULERS = [
    ("basic_1f1b", f"{_CLASS}.basic_1f1b.Schedule1F1B", 1, {}, "1f1b", True),
    ("zerobubble", f"{_CLASS}.zerobubble.ScheduleZeroBubble", 1, {}, "zero-bubble", True),
    (
        "interleaved_1f1b",
        f"{_CLASS}.interleaved_1f1b.ScheduleInterleaved1F1B",
        2,
        {},
        "1f1b-interleaved",
        True,
    ),
    ("zbv-formatted", f"{_CLASS}.zbv_formatted.ScheduleZBVFormatted", 2, {}, "zbv", True),
    ("v-half", f"{_CLASS}.zbv_greedy.ScheduleZBVGreedy", 2, {"memory_config": "half"}, "v-half", True),
    ("v-min", f"{_CLASS}.zbv_greedy.ScheduleZBVGreedy", 2, {"memory_config": "min"}, "v-min", False),
    (
        "zb-heuristic-mem8",
        f"{_CLASS}.zerobubble_heuristic.ScheduleZeroBubbleHeuristic",
        1,
        {"cost_f": 1000, "cost_b": 1000, "cost_w": 1000, "cost_comm": 10, "max_mem": 8},
        "zero-bubble-heuristic",
        False,
    ),
    (
        "zb-heuristic-mem10",
        f"{_CLASS}.zerobubble_heuristic.ScheduleZeroBubbleHeuristic",
        1,
        {"cost_f": 1000, "cost_b": 1000, "cost_w": 1000, "cost_comm": 10, "max_mem": 10},
        "zero-bubble-heuristic",
        False,
    ),
]
SIM_PP, SIM_MB = 8, 32

#: real-run dumps: (directory, algorithm, p, v, m, iterations, format)
REAL_RUNS = [
    ("pp4", "1f1b", 4, 1, 8, 6, "old"),
    ("pp4_vpp2", "1f1b-interleaved", 4, 2, 8, 6, "old"),
    ("pp4_zb_new", "zero-bubble", 4, 1, 8, 4, "new"),
]
#: a rank's share of one microbatch in ms (split evenly over its chunks); odd ranks are slower
BASE_F, BASE_B, BASE_W = 40.0, 48.0, 36.0
COMM_MS = 0.6
JITTER = 0.04  # sigma of the log-normal factor on every duration
WARMUP_MS = 1500.0  # extra time of the first forward of the first iteration (compilation, allocator)


def _num(x: float) -> float:
    """Times as Primus writes them (float32 from CUDA events), rounded to keep the files small."""
    return round(x, 4)


# -- simulator output ---------------------------------------------------------------------------------------


def _yaml() -> str:
    lines = []
    for name, cls, vpp, extra, _, _ in SCHEDULERS:
        lines += [f"  - name: {name}", f"    class: {cls}", f"    pp_size: {SIM_PP}", f"    vpp_size: {vpp}"]
        lines.append(f"    micro_batches: {SIM_MB}")
        lines += [f"    {k}: {v}" for k, v in extra.items()]
        lines.append("")
    return PP_SIMULATION_YAML.format(schedulers="\n".join(lines))


def _simulator_rank(rt, vpp: int) -> dict:
    """One rank as Primus' simulator writes it: lists per kind in time order, and
    `activation_memory_usage`, the level after each F (+1/v) and each B (-1/v) in time order."""
    by_kind = {
        k: sorted((iv for iv in rt.intervals if iv.kind in kinds), key=lambda iv: iv.start)
        for k, kinds in (("fwd", ("F",)), ("bwd", ("B", "BW")), ("wgrad", ("W",)))
    }
    rec: dict = {"total": max(iv.end for iv in rt.intervals), "memory": 0.0}
    for prefix in ("fwd", "bwd", "wgrad"):
        rec[f"{prefix}_start"] = [iv.start for iv in by_kind[prefix]]
        rec[f"{prefix}_end"] = [iv.end for iv in by_kind[prefix]]
    for prefix in ("fwd", "bwd", "wgrad"):
        rec[f"{prefix}_minibatch"] = [iv.microbatch for iv in by_kind[prefix]]
        rec[f"{prefix}_chunk"] = [iv.chunk for iv in by_kind[prefix]]
    events = sorted(by_kind["fwd"] + by_kind["bwd"], key=lambda iv: (iv.start, iv.kind != "F"))
    level, levels = 0.0, []
    for iv in events:
        level += 1 / vpp if iv.kind == "F" else -1 / vpp
        levels.append(level)
    rec["activation_memory_usage"] = levels
    rec["memory"] = max(levels, default=0.0)
    return rec


def write_simulator_output(root: Path) -> None:
    out = root / f"simulator_output_p{SIM_PP}_m{SIM_MB}"
    for name, _, vpp, _, algo, written in SCHEDULERS:
        if not written:
            continue
        run = out / name
        run.mkdir(parents=True)
        table = build_schedule(algo, SIM_PP, vpp if vpp > 1 else None, SIM_MB)
        result = simulate(table, CostModel(1000, 1000, 1000))
        config = {"pp_size": SIM_PP, "vpp_size": vpp, "micro_batches": SIM_MB}
        (run / "config.json").write_text(json.dumps(config, indent=2))
        for rt in result.timeline.ranks:
            rec = _simulator_rank(rt, table.vpp)
            (run / f"pp_rank_{rt.rank}.json").write_text(json.dumps({"0": rec}))


# -- real runs -----------------------------------------------------------------------------------------------


def replay(table: ScheduleTable, rng: random.Random, first_iteration: bool) -> list[list[tuple]]:
    """Each rank's compute nodes in table order, each starting when its rank is free and its input has
    arrived (+ COMM_MS from another rank), with jittered durations: [(kind, mb, stage, chunk, start, end)]."""
    pl = table.placement
    order = [[n for n in nodes if n.kind.is_compute] for nodes in table.ranks]
    done: dict[tuple[str, int, int], float] = {}
    free = [rng.uniform(0.5, 1.0) for _ in order]  # the first launch after the iteration starts
    at = [0] * len(order)
    out: list[list[tuple]] = [[] for _ in order]
    grad = {"B", "BW"}

    def ready(kind: str, mb: int, s: int, rank: int) -> float | None:
        if kind == "F":
            dep = ("F", mb, pl.prev_stage[s]) if pl.prev_stage[s] >= 0 else None
        elif kind in grad:
            nxt = pl.next_stage[s]
            dep = ("G", mb, nxt) if nxt >= 0 else ("F", mb, s)
        else:
            dep = ("G", mb, s)
        if dep is None:
            return 0.0
        if dep not in done:
            return None
        other = pl.stage_rank[dep[2]] != rank
        return done[dep] + (COMM_MS * rng.uniform(0.8, 1.3) if other else 0.0)

    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for r, nodes in enumerate(order):
            while at[r] < len(nodes):
                node = nodes[at[r]]
                kind = node.kind.value
                t = ready(kind, node.microbatch, node.stage, r)
                if t is None:
                    break
                start = max(free[r] + rng.uniform(0.05, 0.4), t)  # host-side launch gap
                slow = 1.25 if r % 2 else 1.0
                base = {"F": BASE_F, "B": BASE_B, "BW": BASE_B + BASE_W, "W": BASE_W}[kind] * slow / pl.vpp
                duration = base * rng.lognormvariate(0.0, JITTER)
                if first_iteration and kind == "F" and at[r] == 0:
                    duration += WARMUP_MS
                end = start + duration
                out[r].append((kind, node.microbatch, node.stage, pl.stage_chunk[node.stage], start, end))
                done[("G" if kind in grad else kind, node.microbatch, node.stage)] = end
                free[r] = end
                at[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{table.algorithm}: replay deadlocked")
    return out


def _real_rank(events: list[tuple], fmt: str, rank: int, vpp: int, rng: random.Random) -> dict:
    """One rank's record in Primus' real-run layout (`old`: no labels, no W; `new`: labels, W,
    `activation_memory_usage` in GiB after each F and B)."""
    kinds = {"fwd": ("F",), "bwd": ("B", "BW"), "wgrad": ("W",)}
    rec: dict = {"total": _num(max(e[5] for e in events) + rng.uniform(1.0, 3.0))}
    static = 30.0 + 2.0 * rank  # GiB of weights and optimizer state on this rank
    act = 4.0 / vpp  # GiB of one microbatch's activations through one chunk
    level, levels = static, []
    for e in sorted(events, key=lambda e: e[4]):
        if e[0] == "F":
            level += act
        elif e[0] in kinds["bwd"]:
            level -= act
        else:
            continue
        levels.append(round(level, 3))
    rec["memory"] = round(max(levels) + 8.0 + rng.uniform(0.0, 2.0), 3)  # reserved > allocated
    prefixes = ("fwd", "bwd") if fmt == "old" else ("fwd", "bwd", "wgrad")
    for prefix in prefixes:
        ivs = [e for e in events if e[0] in kinds[prefix]]
        rec[f"{prefix}_start"] = [_num(e[4]) for e in ivs]
        rec[f"{prefix}_end"] = [_num(e[5]) for e in ivs]
    if fmt == "new":
        for prefix in prefixes:
            ivs = [e for e in events if e[0] in kinds[prefix]]
            rec[f"{prefix}_minibatch"] = [e[1] for e in ivs]
            rec[f"{prefix}_chunk"] = [e[3] for e in ivs]
        rec["activation_memory_usage"] = levels
    return rec


def write_real_runs(root: Path) -> None:
    rng = random.Random(SEED)
    for name, algo, pp, vpp, mb, iterations, fmt in REAL_RUNS:
        run = root / "pp_data_example" / name
        run.mkdir(parents=True)
        table = build_schedule(algo, pp, vpp if vpp > 1 else None, mb)
        config = {"world_size": pp, "dp_size": 1, "tp_size": 1, "ep_size": 1, "pp_size": pp, "vp_size": vpp}
        config |= {"num_mbs": mb, "train_iters": iterations}
        (run / "config.json").write_text(json.dumps(config))
        per_rank: list[dict] = [{} for _ in range(pp)]
        for it in range(1, iterations + 1):
            for r, events in enumerate(replay(table, rng, it == 1)):
                per_rank[r][str(it)] = _real_rank(events, fmt, r, vpp, rng)
        for r, data in enumerate(per_rank):
            (run / f"pp_rank_{r}.json").write_text(json.dumps(data))


def write_all(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "pp_simulation.yaml").write_text(_yaml())
    write_simulator_output(root)
    write_real_runs(root)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "primus"
        write_all(fresh)
        if args.check:
            same = ROOT.is_dir() and _files(fresh) == _files(ROOT)
            print("fixtures up to date" if same else "fixtures differ from make_fixtures.py's output")
            return 0 if same else 1
        if ROOT.exists():
            shutil.rmtree(ROOT)
        shutil.copytree(fresh, ROOT)
    total = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    print(f"wrote {ROOT} ({total:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
