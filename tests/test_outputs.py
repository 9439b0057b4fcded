"""primuspp/outputs.py: what a write may replace, and what it must leave alone."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from primuspp.errors import ConfigError
from primuspp.outputs import (
    LOCK,
    MARKER,
    OLD_PREFIX,
    check_dir_target,
    check_file_target,
    check_writable_dir,
    locked_dir,
    make_temp_dir,
    replace_dir,
    safe_component,
    write_file,
)


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", ["1f1b", "zbv-v2", "a.b_c+d", "x" * 200])
def test_safe_names_pass(name):
    assert safe_component(name, "runs[0].name") == name


UNSAFE = ["", ".", "..", "../victim", "/abs", "a/b", "a b", "x\0y", "x" * 201, 5, None]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused_naming_the_key(name):
    with pytest.raises(ConfigError, match=r"runs\[1\]\.name") as e:
        safe_component(name, "runs[1].name")
    assert e.value.key == "runs[1].name"


# -- single files ----------------------------------------------------------------------------------------


def test_regular_file_replaced_atomically_keeping_its_mode(tmp_path):
    target = tmp_path / "a.html"
    target.write_text("old")
    target.chmod(0o640)
    write_file(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html"]  # no temp file left


def test_missing_parents_are_created(tmp_path):
    write_file(tmp_path / "x" / "y" / "a.json", b"{}")
    assert (tmp_path / "x" / "y" / "a.json").read_bytes() == b"{}"


def test_symlink_is_written_through(tmp_path):
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    assert write_file(link, "new") == real
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"


def test_symlink_to_missing_file_in_existing_dir_is_refused_and_dangling_left(tmp_path):
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "nowhere" / "x.html")
    with pytest.raises(ConfigError, match="dangling symlink"):
        write_file(link, "x")
    with pytest.raises(ConfigError, match="dangling symlink"):
        check_file_target(link, "--out")
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_symlink_loop_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ConfigError, match=r"--out .*symlink"):
        write_file(a, "x")
    assert a.is_symlink() and b.is_symlink()


def test_dev_null_stays_a_character_device():
    before = os.stat("/dev/null")
    write_file("/dev/null", "x" * 100_000)
    check_file_target("/dev/null", "--out")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_fifo_without_reader_is_refused_at_once_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO that nobody reads"):
        write_file(fifo, "x")  # would block forever with a blocking open
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_fifo_with_reader_is_written_into(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there
    got = []
    try:
        data = "y" * 200_000  # more than a pipe buffer: the writer waits for the reader
        reader = threading.Thread(target=lambda: got.append(_drain(fd, len(data))))
        reader.start()
        write_file(fifo, data)
        reader.join(30)
    finally:
        os.close(fd)
    assert got == [len(data)]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _drain(fd: int, n: int) -> int:
    import select

    total = 0
    while total < n:
        select.select([fd], [], [], 5)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        total += len(chunk)
    return total


def test_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    calls = (lambda: write_file(tmp_path / "d", "x"), lambda: check_file_target(tmp_path / "d", "--html"))
    for call in calls:
        with pytest.raises(ConfigError, match="is a directory"):
            call()
    assert list((tmp_path / "d").iterdir()) == []


def test_parent_that_is_a_file_is_one_line_naming_the_key(tmp_path):
    (tmp_path / "f").write_text("keep")
    with pytest.raises(ConfigError) as e:
        check_file_target(tmp_path / "f" / "a.html", "--chrome")
    assert str(e.value).startswith(f"--chrome {tmp_path / 'f' / 'a.html'}:") and e.value.key == "--chrome"
    with pytest.raises(ConfigError, match="--chrome"):
        write_file(tmp_path / "f" / "a.html", "x", "--chrome")
    assert (tmp_path / "f").read_text() == "keep"


def test_unwritable_directory_is_seen_before_writing():
    # /proc/1 is a directory nobody may create files in, root included
    with pytest.raises(ConfigError, match=r"--out /proc/1/x\.html: cannot write in /proc/1"):
        check_file_target("/proc/1/x.html", "--out")
    with pytest.raises(ConfigError, match="--out"):
        check_writable_dir("/proc/1/sub", "--out")


# -- owned directories -----------------------------------------------------------------------------------


TWO_RANKS = [MARKER, "config.json", "pp_rank_0.json", "pp_rank_1.json"]


def _pp_files(d: Path, ranks: int) -> None:
    (d / "config.json").write_text("{}")
    for r in range(ranks):
        (d / f"pp_rank_{r}.json").write_text("{}")


def test_new_directory_is_written_whole_with_the_marker(tmp_path):
    target = replace_dir(tmp_path / "out" / "pp", "pp_data", lambda d: _pp_files(d, 2), "--dump-pp-data")
    assert sorted(p.name for p in target.iterdir()) == TWO_RANKS
    assert json.loads((target / MARKER).read_text())["writer"] == "primuspp"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pp"]  # no temp directory left


def test_ours_is_replaced_whole_no_stale_ranks(tmp_path):
    target = tmp_path / "pp"
    replace_dir(target, "pp_data", lambda d: _pp_files(d, 4), "--dump-pp-data")
    replace_dir(target, "pp_data", lambda d: _pp_files(d, 2), "--dump-pp-data")
    assert sorted(p.name for p in target.iterdir()) == TWO_RANKS


def test_failed_write_leaves_the_previous_directory(tmp_path):
    target = tmp_path / "pp"
    replace_dir(target, "pp_data", lambda d: _pp_files(d, 3), "--dump-pp-data")
    before = _tree_hash(target)

    def broken(d: Path) -> None:
        _pp_files(d, 1)
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        replace_dir(target, "pp_data", broken, "--dump-pp-data")
    assert _tree_hash(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pp"]


def test_foreign_directory_is_untouched(tmp_path):
    target = tmp_path / "victim"
    target.mkdir()
    (target / "thesis.txt").write_text("years of work")
    (target / "pp_rank_0.json").write_text("{}")
    before = _tree_hash(tmp_path)
    with pytest.raises(ConfigError, match="not written by primuspp"):
        replace_dir(target, "pp_data", lambda d: _pp_files(d, 1), "--dump-pp-data")
    assert _tree_hash(tmp_path) == before


def test_user_file_inside_our_directory_is_never_lost(tmp_path):
    """An owned directory is replaced whole, so a file primuspp did not write inside it (a user's NOTES.txt)
    makes it not ours: refused, naming the file."""
    target = tmp_path / "1f1b"
    replace_dir(target, "result", lambda d: (d / "summary.json").write_text("{}"), "--out")
    (target / "NOTES.txt").write_text("mine")
    before = _tree_hash(tmp_path)
    with pytest.raises(ConfigError, match=r"holds NOTES\.txt, which primuspp did not write"):
        replace_dir(target, "result", lambda d: (d / "summary.json").write_text("{}"), "--out")
    assert _tree_hash(tmp_path) == before


def test_directory_named_like_our_file_is_foreign(tmp_path):
    target = tmp_path / "r"
    replace_dir(target, "result", lambda d: (d / "summary.json").write_text("{}"), "--out")
    (target / "config.json").mkdir()
    (target / "config.json" / "data").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds config\.json"):
        check_dir_target(target, "result", "--out")


def test_plain_file_symlink_and_device_at_the_path_are_refused(tmp_path):
    (tmp_path / "file").write_text("keep")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for path, what in ((tmp_path / "file", "not a directory"), (tmp_path / "link", "symlink")):
        with pytest.raises(ConfigError, match=what):
            replace_dir(path, "result", lambda d: None, "--out")
    with pytest.raises(ConfigError, match="not a directory"):
        check_dir_target("/dev/null", "pp_data", "--dump-pp-data")
    assert (tmp_path / "file").read_text() == "keep" and (tmp_path / "link").is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_markers_empty_directory_and_legacy_dumps(tmp_path):
    (tmp_path / "empty").mkdir()
    check_dir_target(tmp_path / "empty", "pp_data", "--dump-pp-data")
    run = tmp_path / "run"  # a simulate result is marked by its summary.json
    run.mkdir()
    (run / "pp_rank_0.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"no summary\.json"):
        check_dir_target(run, "result", "--out")
    (run / "summary.json").write_text("{}")
    check_dir_target(run, "result", "--out")
    dump = tmp_path / "old-dump"
    dump.mkdir()
    (dump / "config.json").write_text(json.dumps({"backend": "torch"}))
    check_dir_target(dump, "pp_data", "--dump-pp-data")
    (dump / "config.json").write_text(json.dumps({"pp_size": 4}))  # Primus' own dump: not ours
    with pytest.raises(ConfigError, match="not written by primuspp"):
        check_dir_target(dump, "pp_data", "--dump-pp-data")


# -- locks -----------------------------------------------------------------------------------------------


def test_lock_refuses_a_second_holder_naming_pid_and_lock(tmp_path):
    with locked_dir(tmp_path / "out") as d:
        assert (d / LOCK).read_text().strip() == str(os.getpid())
        with pytest.raises(ConfigError) as e, locked_dir(tmp_path / "out"):
            pass
        assert f"pid {os.getpid()}" in str(e.value) and str(d / LOCK) in str(e.value)
    assert not (tmp_path / "out" / LOCK).exists()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("999999999\n")  # no process holds it
    with locked_dir(out):
        assert (out / LOCK).read_text().strip() == str(os.getpid())


def test_lock_removes_leftover_temp_directories_and_an_unused_new_directory(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    make_temp_dir(out, "1f1b")
    make_temp_dir(out, "1f1b", OLD_PREFIX)
    (out / ".primuspp-tmp-unmarked").mkdir()  # named like ours, not marked: the user's
    (out / "user-dir").mkdir()
    with locked_dir(out):
        pass
    assert sorted(p.name for p in out.iterdir()) == [".primuspp-tmp-unmarked", "user-dir"]
    with locked_dir(tmp_path / "fresh"):
        pass
    assert not (tmp_path / "fresh").exists()
