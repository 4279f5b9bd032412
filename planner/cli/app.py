"""The ``kvplan`` command line: the typer app and its commands, and the console entry point.

Each command is a plain function in its own module (parse, call one library function,
render); this module registers them, so no command module imports the app.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

import typer
from typer.core import TyperCommand

from planner.cli._options import join_nargs
from planner.cli.catalog import gpus, models
from planner.cli.check import check
from planner.cli.diagnose import diagnose
from planner.cli.estimate import estimate
from planner.cli.schema import schema
from planner.cli.simulate import simulate
from planner.cli.verify import verify
from planner.errors import KvplanError, one_line

app = typer.Typer(
    name="kvplan",
    help="KV-cache memory planner for vLLM, SGLang and TensorRT-LLM: what fits, before launch. "
    "Exit codes, every command: 0 ok; 1 won't start, a check failed, or the model cannot be "
    "read; 2 a bad flag or an invalid file; 3 verify measured less than the plan.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=None,
)


class ServeCommand(TyperCommand):
    """A command taking vLLM's serve flags, which reads the multi-word ones as vLLM does
    (``--lora-target-modules qkv_proj o_proj``: :func:`join_nargs`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        return super().parse_args(ctx, join_nargs(args))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"kvplan {version('kvplan')}")
        except PackageNotFoundError:  # run from a checkout that is not installed
            print("kvplan (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print kvplan's version and exit.",
    ),
) -> None:
    """KV-cache memory planner for vLLM, SGLang and TensorRT-LLM: what fits, before launch.

    \b
    Exit codes (every command): 0 ok; 1 won't start / a check failed / the model cannot be
    read; 2 a bad flag or an invalid file.
    """


# `kvplan --help` lists the commands in this order
app.command(cls=ServeCommand)(estimate)
app.command()(gpus)
app.command()(models)
app.command()(check)
app.command()(diagnose)
app.command()(simulate)
app.command()(verify)
app.command()(schema)


def _redacted_excepthook(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    """Print a traceback as Python does, with any Hugging Face token redacted."""
    import traceback

    from planner.secrets import redact

    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def main() -> None:
    """Console entry point: KvplanError -> one line and exit 1; bugs keep their traceback
    (``KVPLAN_DEBUG=1``: every error does), printed without secrets."""
    try:
        try:
            app()
        finally:  # typer installs its own hook when called; ours prints what escapes
            sys.excepthook = _redacted_excepthook
    except KvplanError as exc:  # raised outside a command body (should not happen)
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        from planner.secrets import redact

        print(f"Error: {one_line(redact(str(exc)))}", file=sys.stderr)
        sys.exit(exc.exit_code)
