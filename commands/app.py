"""The `primuspp` entry point: one Typer app, one-line errors (exit 2), tracebacks only with --debug."""

from __future__ import annotations

import sys
import traceback

import typer
from typer.exceptions import Abort, TyperException

from primuspp import __version__
from primuspp.commands.algorithms import algorithms
from primuspp.commands.compare import compare
from primuspp.commands.console import err
from primuspp.commands.dump import dump
from primuspp.commands.plan import plan
from primuspp.commands.simulate import simulate
from primuspp.commands.train import train
from primuspp.commands.viz import viz
from primuspp.errors import PrimusppError

app = typer.Typer(
    name="primuspp",
    help="Pipeline-parallel schedules as data: simulate, draw, dump, compare and run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(simulate)
app.command()(dump)
app.command()(compare)
app.command()(viz)
app.command("visualize", help="Alias of `viz`.")(viz)
app.command()(algorithms)
app.command()(train)
app.command()(plan)


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


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="primuspp", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except Abort:
        err.print("aborted")
        return 130
    except TyperException as e:
        if debug:
            traceback.print_exc()
        where = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) is not None else ""
        print(f"error: {where}{_one_line(e.format_message())}", file=sys.stderr)
        return 2
    except PrimusppError as e:
        if debug:
            traceback.print_exc()
        print(f"error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if debug:
            raise
        print(
            f"error: internal: {type(e).__name__}: {_one_line(str(e))} (run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def entry() -> None:
    sys.exit(main())
