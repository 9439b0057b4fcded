"""Output safety at the CLI: nothing outside the output is touched, special files stay special, a directory
is replaced only when primuspp wrote it, one `--out` has one writer at a time, and every output location is
checked before any work or rank starts (one line, exit 2)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from primuspp.commands.app import main
from primuspp.outputs import LOCK, MARKER, OLD_PREFIX, TMP_PREFIX, make_temp_dir
from primuspp.trace.pp_data import read_pp_data

TRAIN = ["train", "--backend", "torch", "--pp", "2", "--mb", "2", "--steps", "1"]
TRAIN += ["--hidden", "16", "--heads", "2", "--seq-len", "8"]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(err: str, *needles: str) -> None:
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for needle in needles:
        assert needle in err, err


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


# -- item 1: run names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../victim", "..", ".", "/tmp/abs-victim", "a/b"])
def test_run_names_cannot_leave_out(capsys, tmp_path, name):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.txt").write_text("years of work")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"pp: 2\nmicro_batches: 2\nruns:\n  - algorithm: 1f1b\n    name: {json.dumps(name)}\n")
    before = _tree_hash(tmp_path)
    code, _, err = _run(capsys, "simulate", "--config", str(cfg), "--out", str(tmp_path / "out"))
    assert code == 2
    _one_line_error(err, "name")
    assert _tree_hash(tmp_path) == before  # not even an empty out/


# -- item 2: single-file outputs --------------------------------------------------------------------------


def test_dump_to_dev_null_leaves_a_character_device(capsys):
    before = os.stat("/dev/null")
    code, _, err = _run(capsys, "dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", "/dev/null")
    assert code == 0, err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_outputs_through_a_symlink_write_its_target(capsys, tmp_path):
    sim = tmp_path / "sim"
    assert _run(capsys, "simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", str(sim))[0] == 0
    for verb, option, name in (
        (["dump", "--algo", "1f1b", "--pp", "2", "--mb", "2"], "--out", "table.txt"),
        (["viz", str(sim / "1f1b")], "--out", "page.html"),
        (["viz", str(sim / "1f1b")], "--chrome", "trace.json"),
        (["compare", str(sim)], "--html", "compare.html"),
    ):
        real = tmp_path / "real" / name
        real.parent.mkdir(exist_ok=True)
        real.write_text("old")
        link = tmp_path / f"link-{name}"
        link.symlink_to(real)
        code, _, err = _run(capsys, *verb, option, str(link))
        assert code == 0, err
        assert link.is_symlink() and real.read_text() != "old", (verb, option)


@pytest.mark.parametrize(
    "verb",
    [
        ["dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out"],
        ["viz", "configs/pp_simulation.yaml", "--out"],
        ["viz", "configs/pp_simulation.yaml", "--chrome"],
        ["compare", "--algo", "1f1b", "--html"],
    ],
)
def test_fifo_without_reader_is_refused_not_replaced_and_nothing_blocks(capsys, tmp_path, verb):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, _, err = _run(capsys, *verb, str(fifo))
    assert code == 2
    _one_line_error(err, verb[-1], "FIFO that nobody reads")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("option", ["--out", "--chrome"])
def test_directory_as_a_file_output_is_refused_before_any_work(capsys, tmp_path, option):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("x")
    before = _tree_hash(tmp_path)
    code, _, err = _run(capsys, "viz", str(tmp_path / "missing"), option, str(tmp_path / "d"))
    assert code == 2
    _one_line_error(err, f"{option} {tmp_path / 'd'}: is a directory")  # not: the missing input
    assert _tree_hash(tmp_path) == before


# -- item 3: result directories ---------------------------------------------------------------------------

SIM = ["simulate", "--algo", "1f1b", "--algo", "gpipe", "--pp", "2", "--mb", "2"]


def test_user_file_inside_a_result_dir_is_never_lost(capsys, tmp_path):
    out = tmp_path / "out"
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0
    (out / "1f1b" / "NOTES.txt").write_text("my notes")
    before = _tree_hash(tmp_path)
    code, _, err = _run(capsys, *SIM, "--out", str(out))
    assert code == 2
    _one_line_error(err, f"--out {out / '1f1b'}", "NOTES.txt")
    assert _tree_hash(tmp_path) == before  # gpipe's directory was not rewritten either: checked first


def test_plain_file_or_foreign_dir_at_a_result_path_is_untouched(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "1f1b").write_text("a file of mine")
    (out / "gpipe").mkdir()
    (out / "gpipe" / "data.csv").write_text("1,2")
    before = _tree_hash(tmp_path)
    code, _, err = _run(capsys, *SIM, "--out", str(out))
    assert code == 2
    _one_line_error(err, "--out")
    assert _tree_hash(tmp_path) == before


def test_our_result_dirs_are_replaced_and_other_files_in_out_kept(capsys, tmp_path):
    out = tmp_path / "out"
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0
    (out / "README.txt").write_text("mine")
    (out / "1f1b" / "pp_rank_7.json").write_text("{}")  # stale rank of a bigger run (a name we write)
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0
    assert (out / "README.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["1f1b", "README.txt", "gpipe"]
    assert not (out / "1f1b" / "pp_rank_7.json").exists()
    assert _run(capsys, "viz", str(out), "--out", str(tmp_path / "v.html"))[0] == 0


# -- item 5: one writer per --out -------------------------------------------------------------------------


def test_second_concurrent_simulate_is_refused_naming_lock_and_pid(capsys, tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys
                from primuspp.outputs import locked_dir
                with locked_dir({str(out)!r}):
                    print("held", flush=True)
                    sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        code, _, err = _run(capsys, *SIM, "--out", str(out))
        assert code == 2
        _one_line_error(err, f"pid {holder.pid}", str(out / LOCK))
        assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing written
    finally:
        holder.communicate("", timeout=60)
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0  # released with its process


def test_stale_lock_of_a_dead_process_is_taken_over(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("999999999\n")
    code, _, err = _run(capsys, *SIM, "--out", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["1f1b", "gpipe"]


# -- item 9: unwritable outputs, checked first ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [*SIM, "--out", "/proc/1/out"],
        [*SIM, "--out", "/dev/null"],
        ["dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", "/proc/1/t.txt"],
        ["compare", "--algo", "1f1b", "--html", "/proc/1/c.html"],
        ["viz", "configs/pp_simulation.yaml", "--out", "/proc/1/v.html"],
    ],
)
def test_unwritable_outputs_are_one_line(capsys, args):
    code, out, err = _run(capsys, *args)
    assert code == 2 and out == ""
    _one_line_error(err, args[-2])
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def _train_in_child(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    """`primuspp train ARGS` in a child that also says whether torch was imported: ranks need torch, so
    a refusal with torch never imported came before any rank started."""
    code = (
        "import sys; from primuspp.commands.app import main; rc = main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'torch never imported'); sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--dump-pp-data", "/dev/null"],
        ["--dump-pp-data", "/proc/1/pp"],
        ["--emulate", "--dump-pp-data", "/dev/null"],
    ],
)
def test_train_outputs_are_checked_before_any_rank(extra):
    proc = _train_in_child([*TRAIN, *extra])
    assert proc.returncode == 2
    _one_line_error(proc.stderr, "--dump-pp-data")
    assert proc.stdout.strip() == "torch never imported"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_megatron_save_and_dump_are_checked_before_any_rank(tmp_path):
    (tmp_path / "file").write_text("x")
    args = ["train", "--pp", "2", "--steps", "1", "--save", str(tmp_path / "file" / "ckpt")]
    proc = _train_in_child(args)
    assert proc.returncode == 2
    _one_line_error(proc.stderr, "--save")
    assert proc.stdout.strip() == "torch never imported"


# -- item 4: train dumps ----------------------------------------------------------------------------------


def test_train_dump_into_a_foreign_dir_is_refused_untouched(tmp_path):
    dump = tmp_path / "pp"
    dump.mkdir()
    (dump / "pp_rank_0.json").write_text('{"my": "primus run"}')  # a real Primus dump, say
    before = _tree_hash(tmp_path)
    proc = _train_in_child([*TRAIN, "--dump-pp-data", str(dump)])
    assert proc.returncode == 2
    _one_line_error(proc.stderr, f"--dump-pp-data {dump}", "not written by primuspp")
    assert proc.stdout.strip() == "torch never imported"
    assert _tree_hash(tmp_path) == before


def test_train_dump_replaces_an_older_dump_whole_and_reads_back(capsys, tmp_path):
    dump = tmp_path / "pp"
    dump.mkdir()
    (dump / "config.json").write_text(json.dumps({"backend": "torch", "pp_size": 4}))
    for r in range(4):  # a larger run's dump
        (dump / f"pp_rank_{r}.json").write_text("{}")
    code, out, err = _run(capsys, *TRAIN, "--dump-pp-data", str(dump))
    assert code == 0, err
    assert f"in {dump}/" in out
    assert sorted(p.name for p in dump.iterdir()) == [
        MARKER,
        "config.json",
        "pp_rank_0.json",
        "pp_rank_1.json",
    ]
    assert read_pp_data(dump)[0].pp == 2
    assert _run(capsys, "viz", str(dump), "--out", str(tmp_path / "v.html"))[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pp", "v.html"]  # no temp directory left


# -- issue 16: the four commands in one directory ---------------------------------------------------------


def test_simulate_train_viz_compare_in_one_directory(capsys, tmp_path, monkeypatch):
    """`primuspp simulate`, `primuspp train --algo zbv`, `primuspp viz output/pp_data`, `primuspp compare`:
    train writes output/pp_data by default and a bare compare shows predicted vs measured."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUMP_PP_DIR")
    code, out, err = _run(capsys, "simulate")
    assert code == 0, err
    small = ["--backend", "torch", "--pp", "4", "--mb", "8", "--steps", "2", "--hidden", "16", "--heads", "2"]
    code, out, err = _run(capsys, "train", "--algo", "zbv", *small, "--seq-len", "8")
    assert code == 0, err
    assert "per-node timings (Primus pp_data) in output/pp_data/" in out
    code, _, err = _run(capsys, "viz", "output/pp_data")
    assert code == 0, err
    assert Path("pp_viz.html").is_file()

    # the latest simulation is p=8 m=32: the measured schedule is simulated on costs measured from the run
    code, out, err = _run(capsys, "compare")
    assert code == 0, err
    assert "compared the latest measured run output/pp_data/ (zbv p=4 v=2 m=8)" in " ".join(out.split())
    assert "Predicted (zbv-v2) vs measured (output/pp_data" in out and "step time ms" in out

    # once the latest simulation holds that schedule at that size, it is the prediction; the earlier
    # runs at p=8 m=32 are gone from the results directory (primuspp's own), not mixed with the new size
    code, _, err = _run(capsys, "simulate", "--algo", "zbv", "--pp", "4", "--mb", "8")
    assert code == 0 and "removed 11 earlier runs at p 8 m 32 from pp_simulation_result/" in err
    assert [p.name for p in Path("pp_simulation_result").iterdir() if not p.name.startswith(".")] == ["zbv"]
    code, out, err = _run(capsys, "compare", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["compared"].startswith(
        "the latest measured run output/pp_data/ (zbv p=4 v=2 m=8) with the simulation "
        "pp_simulation_result/zbv"
    )
    (pair,) = doc["predicted_vs_measured"]
    assert (pair["algorithm"], pair["pp"], pair["vpp"], pair["micro_batches"]) == ("zbv", 4, 2, 8)
    # a simulation and a measurement of one schedule are not choices: nothing is recommended between them
    assert doc["results"] == [] and doc["recommendation"] is None

    # --no-dump opts out; $DUMP_PP_DIR overrides the default
    before = _tree_hash(tmp_path / "output")
    code, out, err = _run(capsys, "train", "--algo", "1f1b", *small, "--seq-len", "8", "--no-dump")
    assert code == 0, err
    assert "pp_data" not in out and _tree_hash(tmp_path / "output") == before
    monkeypatch.setenv("DUMP_PP_DIR", str(tmp_path / "elsewhere"))
    assert _run(capsys, "train", "--algo", "1f1b", *small, "--seq-len", "8")[0] == 0
    assert read_pp_data(tmp_path / "elsewhere")[0].algorithm == "1f1b"


def test_bare_compare_without_a_measured_run_says_what_it_compared(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DUMP_PP_DIR")
    code, out, err = _run(capsys, "compare")
    assert code == 0, err
    text = " ".join(out.split())
    assert "compared the packaged config's runs, simulated now (no measured run in output/pp_data/" in text


def test_immutable_out_is_one_line_before_any_work(capsys, tmp_path):
    """An immutable directory (chattr +i, where the system lets us make one; else /proc/1, where nobody
    may create files) as the place of every kind of output."""
    ro = tmp_path / "ro"
    ro.mkdir()
    immutable = subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode == 0
    where = ro if immutable else Path("/proc/1")
    try:
        for args in (
            [*SIM, "--out", str(where / "out")],
            ["dump", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", str(where / "t.txt")],
            ["viz", "configs/pp_simulation.yaml", "--chrome", str(where / "t.json")],
        ):
            code, out, err = _run(capsys, *args)
            assert code == 2 and out == ""
            _one_line_error(err, f"{args[-2]} {args[-1]}: cannot write in {where}")
        proc = _train_in_child([*TRAIN, "--dump-pp-data", str(where / "pp")])
        assert proc.returncode == 2 and proc.stdout.strip() == "torch never imported"
        _one_line_error(proc.stderr, f"--dump-pp-data {where / 'pp'}: cannot write in {where}")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(ro)], check=True)
    assert list(ro.iterdir()) == []


# -- issue 34: only what the writer marked as its own is deleted ------------------------------------------


def test_a_dir_named_like_our_temporaries_but_unmarked_is_kept(capsys, tmp_path):
    out = tmp_path / "out"
    user = out / f"{TMP_PREFIX}mine"
    (user / "sub").mkdir(parents=True)
    (user / "sub" / "data.txt").write_text("precious")
    aside = out / f"{OLD_PREFIX}mine"
    aside.mkdir()
    (aside / "x").write_text("mine too")
    before = _tree_hash(user), _tree_hash(aside)
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0
    assert (_tree_hash(user), _tree_hash(aside)) == before
    assert sorted(p.name for p in out.iterdir()) == sorted(["1f1b", "gpipe", user.name, aside.name])


def test_a_killed_runs_marked_temporaries_are_removed(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # what a run killed inside `replace_dir` leaves: a temp directory carrying the writer's mark
    left = make_temp_dir(out, "1f1b")
    (left / "pp_rank_0.json").write_text("{}")
    assert _run(capsys, *SIM, "--out", str(out))[0] == 0
    assert not left.exists()
    assert sorted(p.name for p in out.iterdir()) == ["1f1b", "gpipe"]


@pytest.mark.parametrize("special", ["fifo", "dir"])
def test_a_non_regular_file_at_the_lock_path_is_refused_and_kept(capsys, tmp_path, special):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK
    os.mkfifo(lock) if special == "fifo" else lock.mkdir()
    code, _, err = _run(capsys, *SIM, "--out", str(out))
    assert code == 2
    _one_line_error(err, str(lock), "not a regular file")
    kept = os.lstat(lock).st_mode
    assert stat.S_ISFIFO(kept) if special == "fifo" else stat.S_ISDIR(kept)
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing written
