"""An unexpected exception (a bug) still ends in one line that names the command and the input it read."""

import pytest

from primuspp.commands.app import main


def test_a_bug_is_one_line_naming_the_verb_and_the_input(tmp_path, capsys, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text("pp: 2\nmicro_batches: 4\nruns: [{algorithm: 1f1b}]\n")

    def broken(spec):
        raise RuntimeError("planted bug\nsecond line")

    monkeypatch.setattr("primuspp.sim.runs.run", broken)
    code = main(["simulate", "--config", str(config), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(
        f"error: internal: primuspp simulate reading {config}: RuntimeError: planted bug second"
    )
    assert "--debug" in err


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setattr("primuspp.sim.runs.run", lambda spec: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--out", str(tmp_path)])


def _cli(*args: str, stdout=None, **env: str):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "primuspp.commands", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def test_what_the_system_refuses_is_exit_2_not_a_bug(tmp_path):
    # a full disk was `error: internal: ... OSError` (exit 1); an ASCII-only terminal or a path that is not
    # UTF-8 a UnicodeEncodeError (exit 1)
    with open("/dev/full", "w") as full:
        proc = _cli(
            "simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "--json", "-o", str(tmp_path), stdout=full
        )
    assert proc.returncode == 2 and proc.stderr == "error: primuspp simulate: No space left on device\n"
    out = str(tmp_path / "r\udcff")
    proc = _cli("simulate", "--algo", "1f1b", "--pp", "2", "--mb", "2", "-o", out, PYTHONIOENCODING="ascii")
    assert proc.returncode == 0 and proc.stderr == "" and "1f1b" in proc.stdout
    args = ("plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "--pp", "8", "-a", "1f1b")
    page = str(tmp_path / "p\udcff.html")
    env = {"LC_ALL": "C", "PYTHONIOENCODING": "ascii"}
    proc = _cli(*args, "--cp", "1", "--micro-batch-size", "1", "--html", page, **env)
    assert (
        proc.returncode == 0
        and "1f1b" in proc.stdout
        and proc.stderr == "wrote " + page.replace("\udcff", "\\udcff") + "\n"
    )


def test_no_arguments_is_the_help(capsys):
    # it was the help, then an empty `error: primuspp: ` line (exit 2)
    assert main([]) == 0
    captured = capsys.readouterr()
    assert "Usage" in captured.out and "plan" in captured.out and captured.err == ""
