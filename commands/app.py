"""The `primuspp` entry point: one Typer app, one-line errors (exit 2), tracebacks only with --debug.

Verbs are registered lazily: `primuspp --help` lists them from `VERBS` (name, module, one-line help,
examples) without importing them, and a verb's module (with its plotly, pydantic, torch, ...) is imported
only when that verb runs or shows its own --help. `primuspp --version` imports typer alone.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import Abort, TyperException

from primuspp import __version__
from primuspp.commands.process import before_exit, defer_coercion, keep_freed_memory
from primuspp.errors import PrimusppError

HELP = "Pipeline-parallel schedules as data: simulate, draw, dump, compare and run them."


@dataclass(frozen=True)
class Verb:
    """A verb as the root help lists it; `help` must equal the first line of the function's docstring
    (tests/commands/test_cli.py checks it), `examples` end the verb's own --help."""

    name: str
    module: str
    function: str
    help: str
    examples: tuple[str, ...]
    #: whether the verb builds and simulates tables in this process: it then keeps freed memory for reuse
    #: (`commands.process`); `train` and `algorithms` do not
    builds: bool = True


VERBS: tuple[Verb, ...] = (
    Verb(
        "simulate",
        "primuspp.commands.simulate",
        "simulate",
        "Simulate schedules on a cost model (default: the packaged p=8, m=32 config, every algorithm).",
        (
            "primuspp simulate",
            "primuspp simulate --algo 1f1b --algo zbv --pp 4 --mb 8 --out res",
            "primuspp simulate --algo zbv --pp 4 --mb 8 --json --show",
        ),
    ),
    Verb(
        "dump",
        "primuspp.commands.dump",
        "dump",
        "Write schedule tables (default: every run of the packaged config, as text on stdout).",
        (
            "primuspp dump --algo zb1p --pp 2 --mb 3",
            "primuspp dump --algo zbv --pp 4 --mb 8 --format json --out zbv.json",
            "primuspp dump --algo file:zbv.json --check",
        ),
    ),
    Verb(
        "compare",
        "primuspp.commands.compare",
        "compare",
        "Compare schedules by step time, bubble and peak memory; with --mem-limit, recommend one.",
        (
            "primuspp compare --algo 1f1b --algo zbv --pp 4 --mb 8",
            "primuspp compare --mem-limit 5 --html compare.html",
            "primuspp compare pp_simulation_result/zbv output/pp_data",
        ),
    ),
    Verb(
        "viz",
        "primuspp.commands.viz",
        "viz",
        "Draw pipeline timelines: an interactive HTML page that opens offline, and/or a Chrome trace.",
        (
            "primuspp viz pp_simulation_result",
            "primuspp viz pp_simulation_result/zbv output/pp_data --out both.html",
            "primuspp viz configs/pp_simulation.yaml --chrome trace.json",
        ),
    ),
    Verb(
        "visualize",
        "primuspp.commands.viz",
        "viz",
        "Alias of `viz`.",
        ("primuspp visualize pp_simulation_result", "primuspp visualize output/pp_data --out real.html"),
    ),
    Verb(
        "algorithms",
        "primuspp.commands.algorithms",
        "algorithms",
        "List the algorithms, their aliases, placement, allowed v, constraints and memory class.",
        ("primuspp algorithms", "primuspp algorithms --json"),
        builds=False,
    ),
    Verb(
        "train",
        "primuspp.commands.train",
        "train",
        "Train with a schedule on real processes (gloo on CPU, nccl on GPU).",
        (
            "primuspp train --algo zbv",
            "primuspp train --algo 1f1b --emulate --pp 4 --mb 8",
            "primuspp train --backend torch --algo zb1p --verify",
        ),
        builds=False,
    ),
    Verb(
        "plan",
        "primuspp.commands.plan",
        "plan",
        "Plan a model on N GPUs: sweep TP, CP, PP, VPP, EP, micro-batch size and algorithm; rank what fits.",
        (
            "primuspp plan --model llama3-70b --gpu h100 --gpus 64",
            "primuspp plan --model qwen3-235b-a22b --gpu mi300x --gpus 32 --ep 8",
            "primuspp plan --model llama2-7b --gpu mi300x --gpus 8 --html plan.html",
        ),
    ),
)


def _epilog(examples: tuple[str, ...]) -> str:
    """One paragraph: Typer's rich help keeps its single line breaks (and puts blank lines between
    paragraphs)."""
    return "\n".join(["Examples:", *(f"  $ {e}" for e in examples)])


def _flags_as_flags(params: list[Any]) -> list[Any]:
    """Typer 0.29 prints `--json <bool>` for flags; a flag takes no value, so it gets no type column."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class _Command(TyperCommand):
    #: set from `Verb.builds` (`load`)
    keeps_heap = False

    def get_params(self, ctx: Any) -> list[Any]:
        return defer_coercion(_flags_as_flags(super().get_params(ctx)))

    def invoke(self, ctx: Any) -> Any:
        if self.keeps_heap:  # the verb runs (its --help does not get here)
            keep_freed_memory()
        return super().invoke(ctx)


class _LazyVerb(TyperCommand):
    """What the root help lists for a verb; running it (or its --help) imports and builds the real one."""

    def __init__(self, verb: Verb) -> None:
        super().__init__(name=verb.name, help=verb.help, short_help=verb.help, add_help_option=False)
        self.verb = verb

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        return load(self.verb).make_context(info_name, args, parent=parent, **extra)


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return defer_coercion(_flags_as_flags(super().get_params(ctx)))


def load(verb: Verb) -> TyperCommand:
    """The verb's real click command (its module imported now)."""
    function = getattr(importlib.import_module(verb.module), verb.function)
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    sub.command(verb.name, cls=_Command, epilog=_epilog(verb.examples))(function)
    if verb.name == "visualize":  # the alias: its own one-line help, viz's parameters
        sub.registered_commands[0].help = verb.help
    command = typer.main.get_command(sub)
    command.keeps_heap = verb.builds
    return command


app = typer.Typer(
    name="primuspp",
    help=HELP,
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"primuspp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Pipeline-parallel schedules as data: simulate, draw, dump, compare and run them."""


def command() -> TyperGroup:
    """The root click group, every verb registered lazily."""
    group = typer.main.get_command(app)
    for verb in VERBS:
        group.add_command(_LazyVerb(verb))
    return group


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


_CHOICE = re.compile(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)\.?$")


def _usage_message(message: str) -> str:
    """Typer's usage error on one line; a value outside a choice (`--format jsn`) gets the closest
    allowed ones suggested."""
    message = _one_line(message).replace("Value error, ", "")
    match = _CHOICE.search(message)
    if match:
        from primuspp.suggest import did_you_mean

        choices = re.findall(r"'([^']*)'", match.group(2))
        message = message.rstrip(".") + did_you_mean(match.group(1), choices)
    return message


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    for stream in (sys.stdout, sys.stderr):  # an ASCII terminal, a path that is not UTF-8: shown escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        result = command().main(args=args or ["--help"], prog_name="primuspp", standalone_mode=False)
        sys.stdout.flush()  # a full disk or a closed pipe is reported here, not at exit
        return result if isinstance(result, int) else 0
    except Abort:
        print("aborted", file=sys.stderr)
        return 130
    except TyperException as e:
        if debug:
            traceback.print_exc()
        where = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) is not None else ""
        print(f"error: {where}{_usage_message(e.format_message())}", file=sys.stderr)
        return 2
    except PrimusppError as e:
        if debug:
            traceback.print_exc()
        print(f"error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except OSError as e:  # the system refused (a full disk, a closed pipe): not a bug in primuspp
        if debug:
            traceback.print_exc()
        where = f" ({e.filename})" if e.filename else ""
        print(f"error: {_internal_context(args)}{e.strerror or e}{where}", file=sys.stderr)
        return 2
    except Exception as e:
        if debug:
            raise
        print(
            f"error: internal: {_internal_context(args)}{type(e).__name__}: {_one_line(str(e))[:300]} "
            "(a bug: run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def _internal_context(args: list[str]) -> str:
    """`primuspp VERB` and the last input file it opened, so an unexpected error still says where it was."""
    from primuspp.inputs import last_read

    verb = next((a for a in args if not a.startswith("-") and a in {v.name for v in VERBS}), None)
    where = f"primuspp {verb}" if verb else "primuspp"
    reading = last_read()
    return f"{where}{f' reading {reading}' if reading else ''}: "


def entry() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except OSError:  # what could not be written (a full disk, a closed pipe) is dropped, not retried at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    before_exit()
    sys.exit(code)
