"""Real multi-process runs (gloo, fp32): every registered algorithm, random tables for every placement
(FB, B/W split, OFFLOAD), a file: table; loss and every gradient against one process running the whole
model. Also the 1f1b activation pattern and failure handling."""

from __future__ import annotations

import multiprocessing
import os
import random
from pathlib import Path

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.backends.torch.gpt import GPTConfig, gpt_layers
from primuspp.backends.torch.train import TrainSpec, reference_run, train_worker
from primuspp.backends.torch.verify import compare
from primuspp.errors import ScheduleError
from primuspp.runtime.launch import LaunchError, launch
from primuspp.schedule.formats import to_json
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from tests.runtime.workers import RECV_AHEAD, run_jobs, shape_only_worker
from tests.schedule.random_orders import random_order

TOL = 1e-6
GPT = dict(vocab=32, seq_len=8, hidden=16, heads=2)


def admissible_sizes(name: str, p: int) -> list[tuple[int, int]]:
    """(vpp, m) for `name` at p ranks: the first admitted m not a multiple of p, and an m < p if admitted."""
    algo = ALGORITHMS[name]
    v = algo.vpp_default
    if not algo.vpp_ok(v):
        return []
    admitted = [
        m
        for m in (2 * p + 2, 2 * p + 1, 3 * p + 1, 2 * p, 3 * p, p + 1, p, 4 * p)
        if not algo.refuse(p, v, m, {})
    ]
    sizes = []
    odd = [m for m in admitted if m % p]
    if odd or admitted:
        sizes.append((v, (odd or admitted)[0]))
    small = [m for m in range(p - 1, 0, -1) if not algo.refuse(p, v, m, {})]
    if small:
        sizes.append((v, small[0]))
    return sizes


def spec_for(table: ScheduleTable, steps: int = 1, **kw) -> TrainSpec:
    parts = len(set(table.placement.model_part))
    return TrainSpec(table, GPTConfig(layers=parts, **GPT), steps=steps, collect_grads=True, **kw)


def algorithm_cases(p: int) -> dict[str, tuple[str, int, int]]:
    """Job name -> (algorithm, vpp, m) for every registered algorithm (decided without generating)."""
    return {
        f"{name}-p{p}-v{v}-m{m}": (name, v, m) for name in ALGORITHMS for v, m in admissible_sizes(name, p)
    }


def algorithm_jobs(p: int, refused: dict[str, str]) -> dict[str, TrainSpec]:
    """The cases' specs; a case whose generation refuses lands in `refused` (its test fails: the sizes are
    admissible, so a refusal is a bug)."""
    jobs = {}
    for job, (name, v, m) in algorithm_cases(p).items():
        try:
            table = build_schedule(name, p, v, m)
        except ScheduleError as err:
            refused[job] = str(err)
            continue
        jobs[job] = spec_for(table, steps=2 if m % p else 1)
    return jobs


def random_jobs(p: int) -> dict[str, TrainSpec]:
    jobs = {}
    for kind, v in (("linear", 1), ("loop", 2), ("v", 2), ("bidirectional", 2)):
        for seed in range(2):
            pl = make_placement(kind, p, v)
            m = 5 + seed
            order = random_order(pl, m, random.Random(1000 * p + seed), split=0.5, fuse=0.3, offload=0.3)
            table = ScheduleTable(pl, m, lower_comms(pl, m, order), f"random-{kind}")
            mode = "copy" if seed else "account"
            jobs[f"random-{kind}-p{p}-m{m}-seed{seed}-{mode}"] = spec_for(table, offload_mode=mode)
    return jobs


def file_job(p: int, tmp: Path) -> dict[str, TrainSpec]:
    path = tmp / "interleaved.json"
    path.write_text(to_json(build_schedule("1f1b-interleaved", p, 2, p + 2)))
    table = build_schedule(f"file:{path}")
    return {f"file-interleaved-p{p}-m{p + 2}": spec_for(table, steps=2)}


def memory_job(p: int) -> dict[str, TrainSpec]:
    return {f"memory-1f1b-p{p}-m{2 * p}": spec_for(build_schedule("1f1b", p, 1, 2 * p))}


def _jobs(p: int, tmp: Path, refused: dict[str, str]) -> dict[str, TrainSpec]:
    return {**algorithm_jobs(p, refused), **random_jobs(p), **file_job(p, tmp), **memory_job(p)}


def shape_only_jobs(p: int) -> dict[str, ScheduleTable]:
    """Tables for the compute-free executor: every random placement, more microbatches, FB included."""
    jobs = {}
    for kind, v in (("linear", 1), ("loop", 3), ("v", 2), ("bidirectional", 2)):
        pl = make_placement(kind, p, v)
        m = 2 * p + 3
        order = random_order(pl, m, random.Random(7 * p), split=0.5, fuse=0.4, offload=0.2)
        jobs[f"shape-only-{kind}-p{p}"] = ScheduleTable(pl, m, lower_comms(pl, m, order), f"random-{kind}")
    return jobs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All jobs: one launch of 4 ranks and one of 2; name -> (spec or table, per-rank results)."""
    out: dict = {"refused": {}}
    for p in (4, 2):
        specs = _jobs(p, tmp_path_factory.mktemp(f"p{p}"), out["refused"])
        tables = shape_only_jobs(p)
        jobs = [(train_worker, spec) for spec in specs.values()]
        jobs += [(shape_only_worker, table) for table in tables.values()]
        results = launch(run_jobs, p, jobs)
        for i, (name, what) in enumerate([*specs.items(), *tables.items()]):
            out[name] = (what, [per_rank[i] for per_rank in results])
    return out


def _job_names() -> list[str]:
    names = []
    for p in (4, 2):
        names += list(algorithm_cases(p)) + list(random_jobs(p))
        names += [f"file-interleaved-p{p}-m{p + 2}", f"memory-1f1b-p{p}-m{2 * p}"]
    return names


@pytest.mark.parametrize("name", _job_names())
def test_gradients_match_one_process(runs, name):
    if name in runs["refused"]:
        pytest.fail(f"generation refused an admissible size: {runs['refused'][name]}")
    spec, per_rank = runs[name]
    report = compare(per_rank, reference_run(spec))
    assert not report.missing
    assert report.tensors == spec.steps * sum(1 for layer in gpt_layers(spec.gpt) for _ in layer.parameters())
    assert report.max_loss_rel <= TOL, report
    # bidirectional placements included: the reference sums the two replicas' gradients as they do
    assert report.max_grad_rel <= TOL, report


@pytest.mark.parametrize("name", [n for p in (4, 2) for n in shape_only_jobs(p)])
def test_messages_reach_their_consumer(runs, name):
    """A compute-free executor (the emulator's shape) on real p2p: every received tensor is the one its
    consumer expects, on every rank, for every placement, whether receives are posted at their table
    position or ahead of it."""
    table, per_rank = runs[name]
    for rank, modes in enumerate(per_rank):
        assert len(modes) == len(RECV_AHEAD)
        for mode, (errors, computed) in zip(RECV_AHEAD, modes, strict=True):
            assert errors == [], f"rank {rank}, {mode or 'defaults'}: {errors[:3]}"
            assert computed == sum(1 for n in table.ranks[rank] if n.kind.is_compute)


def test_every_algorithm_is_covered():
    """Every registered algorithm (today's and any added later) gets a p=4 case, with an m not a multiple
    of 4 when it admits one."""
    cases = algorithm_cases(4)
    for name in ALGORITHMS:
        mine = [m for algo, _, m in cases.values() if algo == name]
        assert mine, f"{name}: no admissible size at p=4"


@pytest.mark.parametrize("p", [4, 2])
def test_1f1b_activation_pattern(runs, p):
    """Rank r holds p - r microbatches at its peak: p on rank 0, 1 on the last rank."""
    _, per_rank = runs[f"memory-1f1b-p{p}-m{2 * p}"]
    for r, records in enumerate(per_rank):
        measured = records[0].measured
        one = measured.memory[1][1]  # after the first F: one microbatch's saved activations
        assert one > 0
        assert measured.peak_bytes == (p - r) * one, (r, measured.peak_bytes, one)


def test_failing_rank_stops_everyone(tmp_path):
    spec = spec_for(build_schedule("1f1b", 4, 1, 8), fault=(2, "F3.2"))
    with pytest.raises(LaunchError, match=r"rank 2 failed at F3\.2: RuntimeError: injected fault") as info:
        launch(train_worker, 4, spec)
    assert info.value.rank == 2
    assert multiprocessing.active_children() == []
    assert _children(os.getpid()) == []


def _children(pid: int) -> list[str]:
    """Command lines of `pid`'s live descendants, except the children that are multiprocessing's helpers,
    living as long as this process and shared by every launch (the resource tracker; the fork server the
    ranks are forked from: its children, the ranks, count, though their command line is the server's)."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_text().replace("\0", " ")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    helpers = ("resource_tracker import main", "forkserver import main")
    kids, parents = [], {pid}
    while parents:
        found = {child for child, (ppid, _, _) in procs.items() if ppid in parents}
        for child in found:
            ppid, state, cmdline = procs[child]
            if state != "Z" and not (ppid == pid and any(h in cmdline for h in helpers)):
                kids.append(cmdline)
        parents = found
    return kids
