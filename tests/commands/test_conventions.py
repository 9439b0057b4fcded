"""CLI conventions: `python -m primuspp`, examples at the end of every --help, flags shown as flags,
'did you mean', an 80-column `algorithms`, sweeps that skip refused algorithms, progress lines when piped,
and verbs that import only what they use."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys

import pytest

from primuspp.algorithms.registry import ALGORITHMS
from primuspp.commands.app import VERBS, load, main
from primuspp.commands.console import StepLines, progress


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_python_m_primuspp():
    proc = _python("-m", "primuspp", "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("primuspp "), proc.stderr
    proc = _python("-m", "primuspp", "simulate", "--algo", "nope")
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown algorithm 'nope'")


def test_root_help_lists_every_verb_and_shows_flags_as_flags(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "<bool>" not in out
    for verb in VERBS:
        assert f" {verb.name} " in out
    assert "--version " in out and "--debug " in out


@pytest.mark.parametrize("verb", VERBS, ids=[v.name for v in VERBS])
def test_verb_help_ends_with_real_examples(capsys, verb):
    code, out, _ = run_cli(capsys, verb.name, "--help")
    assert code == 0
    assert "<bool>" not in out  # flags take no value: no type shown
    assert "--help " in out
    lines = [line.strip() for line in out.strip().splitlines()]
    examples = [line for line in lines if line.startswith("$ primuspp ")]
    assert 2 <= len(examples) <= 3 and lines[-len(examples) - 1] == "Examples:"
    assert lines[-len(examples) :] == examples  # the examples end the help
    command = load(verb)
    for example in verb.examples:  # every example parses: its options exist and their values convert
        words = shlex.split(example)
        assert words[:2] == ["primuspp", verb.name]
        command.make_context(verb.name, words[2:])


@pytest.mark.parametrize("verb", VERBS, ids=[v.name for v in VERBS])
def test_listed_help_is_the_docstring(verb):
    """The root help lists verbs without importing them; their line must not drift from the docstring."""
    if verb.name == "visualize":
        assert verb.module == next(v.module for v in VERBS if v.name == "viz")
        return
    function = getattr(importlib.import_module(verb.module), verb.function)
    assert " ".join(function.__doc__.strip().split("\n\n")[0].split()) == verb.help


@pytest.mark.parametrize(
    "args,message",
    [
        (("simulate", "--algo", "zbw"), "unknown algorithm 'zbw'; did you mean zbv?"),
        (
            ("simulate", "--algo", "1f1binterleaved"),
            "did you mean 1f1b-interleaved or 1f1b-interleaved-padded?",
        ),
        (
            ("dump", "--format", "jsn"),
            "'jsn' is not one of 'text', 'json', 'csv', 'chrome'; did you mean json?",
        ),
    ],
)
def test_unknown_names_suggest_the_closest(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1 and err.startswith("error: ")


def test_no_suggestion_when_nothing_is_close(capsys):
    code, _, err = run_cli(capsys, "simulate", "--algo", "xyz")
    assert code == 2 and "did you mean" not in err and "(allowed: gpipe" in err


def test_algorithms_fit_80_columns():
    proc = _python("-m", "primuspp", "algorithms", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    starts = {line.split()[0] for line in lines if line.strip()}
    assert set(ALGORITHMS) <= starts  # each name whole, at the start of its row


def test_default_sweep_skips_refused_algorithms(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "simulate", "--pp", "4", "--mb", "2", "--json", "--out", str(tmp_path))
    assert code == 0
    doc = json.loads(out)
    refused = {r["algorithm"]: r["reason"] for r in doc["refused"]}
    assert set(refused) == {"dualpipe", "dualpipe-v", "1f1b-interleaved"} and "2*pp" in refused["dualpipe"]
    assert "1f1b-interleaved-padded runs it" in refused["1f1b-interleaved"]  # m < p: no megatron order
    assert {r["algorithm"] for r in doc["results"]} == set(ALGORITHMS) - {
        *refused,
        "1f1b-interleaved-padded",  # not in the packaged config
        "zb-optimal",
    }
    assert not (tmp_path / "dualpipe").exists()
    code, out, _ = run_cli(capsys, "simulate", "--pp", "4", "--mb", "2", "--out", str(tmp_path))
    assert code == 0 and "not run: dualpipe: dualpipe needs micro_batches even and >= 2*pp = 8" in out


def test_named_refused_algorithm_is_an_error(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "simulate", "--algo", "dualpipe", "--pp", "4", "--mb", "2", "--out", str(tmp_path)
    )
    assert code == 2 and err.startswith("error: dualpipe needs")


def test_compare_sweep_skips_refused_algorithms(capsys):
    code, out, _ = run_cli(capsys, "compare", "--pp", "4", "--mb", "2", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {r["name"] for r in doc["refused"]} == {"dualpipe", "dualpipe-v", "1f1b-interleaved-v2"}  # m < p


def test_progress_prints_lines_when_not_a_terminal(capsys):
    assert list(progress(["a", "b", "c"], "simulating", delay=0.0)) == ["a", "b", "c"]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("simulating 1/3 (a)") and err[-1].startswith("simulating: 3/3 done")
    lines = StepLines("training", 20, every=3600)
    for _ in range(20):
        lines.update(advance=1, status="loss 1.0")
    lines.close()
    err = capsys.readouterr().err.splitlines()
    # each 10 % (2 steps), never more
    assert err[0].startswith("training: 2/20 steps, loss 1.0") and len(err) == 10
    assert err[-1].startswith("training: 20/20 steps, loss 1.0")


def test_step_lines_say_nothing_before_a_quick_refusal_then_report_set_up(capsys):
    import time

    quick = StepLines("training", 5, every=0.2)
    quick.close()  # refused at once: no line at all
    assert capsys.readouterr().err == ""
    slow = StepLines("training", 5, every=0.05)
    deadline, seen = time.monotonic() + 60, ""
    while "setting up" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)  # waits for the set-up line (a hang guard, not a timing assertion)
        seen += capsys.readouterr().err
    assert seen.startswith("training: setting up (5 steps)")
    slow.update(advance=5)
    slow.close()
    assert capsys.readouterr().err.splitlines()[-1].startswith("training: 5/5 steps")


def test_quick_runs_print_no_progress(capsys):
    assert list(progress(range(3), "simulating", delay=60.0)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


_IMPORTS = """
import sys
from primuspp.commands import app
heavy = ("plotly", "torch", "megatron", "pydantic", "rich", "yaml")
print(json.dumps({"root": [m for m in heavy if m in sys.modules]}))
for verb in app.VERBS:
    app.load(verb)
    print(json.dumps({verb.name: [m for m in ("plotly", "torch", "megatron") if m in sys.modules]}))
"""


def test_verbs_import_only_what_they_use():
    """Behaviour, not timing (bench/startup.py times it): the root imports no rich, pydantic or plotly;
    no verb imports plotly (pages import it when drawn) or torch (training imports it when it runs)."""
    proc = _python("-c", "import json" + _IMPORTS)
    assert proc.returncode == 0, proc.stderr
    seen = {k: v for line in proc.stdout.splitlines() for k, v in json.loads(line).items()}
    assert seen.pop("root") == []
    assert seen == {verb.name: [] for verb in VERBS}
