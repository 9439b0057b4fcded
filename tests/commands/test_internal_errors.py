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
