"""The docs run: every command shown in README.md and docs/*.md is executed and its output compared with
what the page shows, numbers included, so the pages cannot go stale.

The convention (for whoever writes docs):

- A fenced block whose info string is `console` is a shell session: each line starting with `$ ` is a
  command, the lines after it (up to the next `$ ` line or the fence) are what it prints, stdout and stderr
  together, in order. Any other fenced block is never run, and may not hold `$ ` lines.
- Commands may be `primuspp` with an offline verb (simulate, dump, compare, algorithms, viz, visualize),
  optionally after `NAME=value` environment settings, with shell redirections or pipes; `mkdir DIR`; and
  `cat FILE`, which does not run but *writes* the lines shown under it to FILE, so an example carries
  its own input. Anything else (training, GPUs, files the reader brings) needs the block marked, on the
  line before its fence: `<!-- docs-test: skip (why) -->`.
- A line `...` in an output stands for any number of lines (output left out of the page).
- The blocks of one page run in order in one fresh temporary directory, with COLUMNS=110 (unless the
  command sets it), so a page's later examples can use what its earlier ones wrote.
- Compared after normalising only whitespace (runs of spaces, trailing spaces, blank lines at the ends)
  and the width of box-drawing rules (`━━━━` equals `━`); progress lines (`simulating 3/12 ...`, printed
  when a slow run's stderr is not a terminal) are dropped. Exit codes are not checked: errors show as the
  `error: ...` line they print.

Regenerate every shown output from the real commands (after a change that moves the numbers):

    python tests/test_docs.py --update [FILE.md ...]

then read the diff: each changed number is a changed behaviour to explain.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OFFLINE_VERBS = ("simulate", "dump", "compare", "algorithms", "viz", "visualize")
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.+)\)\s*-->")
_OFFLINE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*primuspp\s+(\S+)")
_PROGRESS = re.compile(
    r"^\S.* \d+/\d+( \(.*\))? \d+ s$|^\S.*: \d+/\d+ (done in|steps).* \d+ s$|: starting \(\d+ steps\)$"
)
_RULE = re.compile(r"([━─═])\1+")


@dataclass
class Command:
    text: str  # after "$ "
    line: int  # 0-based index of the "$ " line in the page
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: Path
    fence: int  # 0-based index of the opening fence
    skip: str | None
    commands: list[Command]


def parse(page: Path) -> list[Block]:
    """The `console` blocks of a page; a `$ ` line in any other block is an error (it would never run)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        info, start = lines[i][3:].strip(), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        body = range(start + 1, end)
        if info != "console":
            stray = [j + 1 for j in body if lines[j].startswith("$ ")]
            assert not stray, f"{page.name}:{stray[0]}: a `$ ` command outside a ```console block"
        else:
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            match = SKIP.search(before)
            commands: list[Command] = []
            for j in body:
                if lines[j].startswith("$ "):
                    commands.append(Command(lines[j][2:], j))
                else:
                    assert commands, f"{page.name}:{j + 1}: output before the first `$ ` command"
                    commands[-1].expected.append(lines[j])
            blocks.append(Block(page, start, match.group(1) if match else None, commands))
        i = end + 1
    return blocks


def normalise(lines: list[str]) -> list[str]:
    out = [_RULE.sub(r"\1", " ".join(line.split())) for line in lines]
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` (normalised) equals `actual`, each `...` line standing for any lines."""
    parts: list[list[str]] = [[]]
    for line in expected:
        if line == "...":
            parts.append([])
        else:
            parts[-1].append(line)
    if len(parts) == 1:
        return expected == actual
    head, *middle, tail = parts
    if actual[: len(head)] != head or (tail and actual[len(actual) - len(tail) :] != tail):
        return False
    pos, stop = len(head), len(actual) - len(tail)
    if stop < pos:
        return False
    for part in middle:
        found = next((k for k in range(pos, stop - len(part) + 1) if actual[k : k + len(part)] == part), None)
        if found is None:
            return False
        pos = found + len(part)
    return True


def _wrapper(bin_dir: Path) -> None:
    """`primuspp` on PATH: this interpreter's package, whatever is installed elsewhere."""
    script = bin_dir / "primuspp"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m primuspp "$@"\n')
    script.chmod(0o755)


def run(command: Command, cwd: Path, bin_dir: Path) -> list[str]:
    """Run one command as the page shows it; its output lines (progress lines dropped)."""
    text = command.text
    if text.startswith("cat "):
        (cwd / text[4:].strip()).write_text("\n".join(command.expected) + "\n", encoding="utf-8")
        return list(command.expected)
    verb = _OFFLINE.match(text)
    if not text.startswith("mkdir ") and (verb is None or verb.group(1) not in OFFLINE_VERBS):
        raise AssertionError(
            f"line {command.line + 1}: `{text}` is not an offline primuspp command, mkdir or cat: "
            "mark its block `<!-- docs-test: skip (why) -->`"
        )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "110",
        "PYTHONUNBUFFERED": "1",  # stdout and stderr interleave as printed
    }
    env.pop("FORCE_COLOR", None)
    proc = subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=600,
    )
    return [line.rstrip() for line in proc.stdout.splitlines() if not _PROGRESS.search(line.rstrip())]


def run_page(page: Path, update: bool = False) -> list[str]:
    """Run a page's blocks in order; the mismatches (or, with `update`, rewrite the page's outputs)."""
    blocks = parse(page)
    failures: list[str] = []
    replacements: list[tuple[Command, list[str]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd, bin_dir = Path(tmp) / "work", Path(tmp) / "bin"
        cwd.mkdir()
        bin_dir.mkdir()
        _wrapper(bin_dir)
        for block in blocks:
            if block.skip:
                continue
            for command in block.commands:
                actual = run(command, cwd, bin_dir)
                if matches(normalise(command.expected), normalise(actual)):
                    continue
                if update:
                    replacements.append((command, _elided_like(command.expected, actual)))
                else:
                    failures.append(
                        f"{page.relative_to(ROOT)}:{command.line + 1}: $ {command.text}\n"
                        + "--- the page shows:\n"
                        + "\n".join(command.expected)
                        + "\n--- it prints:\n"
                        + "\n".join(actual)
                    )
    if update and replacements:
        lines = page.read_text(encoding="utf-8").splitlines()
        for command, new in sorted(replacements, key=lambda r: -r[0].line):
            start = command.line + 1
            lines[start : start + len(command.expected)] = new
        page.write_text("\n".join(lines) + "\n", encoding="utf-8")
        failures = [f"{page.relative_to(ROOT)}: {len(replacements)} outputs rewritten"]
    return failures


def _elided_like(expected: list[str], actual: list[str]) -> list[str]:
    """The real output, shortened as the page had it: the same number of lines before the first `...`
    and after the last one."""
    marks = [k for k, line in enumerate(expected) if line.strip() == "..."]
    actual = list(actual)
    while actual and not actual[-1]:
        actual.pop()
    if not marks:
        return actual
    head, tail = marks[0], len(expected) - marks[-1] - 1
    if head + tail >= len(actual):
        return actual
    return [*actual[:head], "...", *(actual[len(actual) - tail :] if tail else [])]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_commands_print_what_the_page_shows(page):
    failures = run_page(page)
    assert not failures, "\n\n".join(failures)


def test_convention_covers_the_pages():
    """Each page parses (no stray `$ ` lines) and something runs: the convention is in use."""
    blocks = [b for page in PAGES for b in parse(page)]
    runnable = [c for b in blocks if not b.skip for c in b.commands]
    assert len(runnable) >= 20
    assert all(b.commands for b in blocks), "an empty ```console block"


def test_matching_rules():
    assert matches(normalise(["┏━━┳━┓", "│ a  │ 1 │  "]), normalise(["┏━━━━━┳━━┓", "│ a │ 1 │", ""]))
    assert not matches(normalise(["x 103,000"]), normalise(["x 99,500"]))
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "..."], ["a"])
    assert not matches(["a", "...", "d"], ["a", "b"])
    assert _elided_like(["a", "...", "z"], ["1", "2", "3", "4"]) == ["1", "...", "4"]


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "--update":
        sys.exit("usage: python tests/test_docs.py --update [FILE.md ...]")
    chosen = [Path(a).resolve() for a in args[1:]] or PAGES
    for page in chosen:
        for message in run_page(page, update=True) or [f"{page.relative_to(ROOT)}: up to date"]:
            print(message)
