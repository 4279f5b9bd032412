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
from planner.cli.simulate import simulate
from planner.cli.verify import verify
from planner.errors import KvplanError, one_line

# One table for every command (README "Exit codes"; tests/test_exit_codes.py).
EXIT_CODES = {
    0: "ok: vLLM starts with these settings (it may queue at worst case), a check passed",
    1: "won't start, a check failed, or the model cannot be read",
    2: "a bad flag or an invalid file (plans, log, -w workload, --prices, --plan)",
    3: "verify measured less than the plan",
    141: "stdout closed early (| head): ended by SIGPIPE, nothing written half-way",
}

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
    read; 2 a bad flag or an invalid file (-w too); 3 verify measured less; 141 | head.
    """


# `kvplan --help` lists the commands in this order
app.command(cls=ServeCommand)(estimate)
app.command()(gpus)
app.command()(models)
app.command()(check)
app.command()(diagnose)
app.command()(simulate)
app.command()(verify)


def _redacted_excepthook(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    """Print a traceback as Python does, with any Hugging Face token redacted."""
    import traceback

    from planner.secrets import redact

    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def _quiet_on_closed_pipe() -> None:
    """``kvplan ... | head``: a write to a closed pipe ends the process as the shell's own
    tools end (SIGPIPE, status 141), not with click's exit 1 (the code of "won't start") or a
    BrokenPipeError traceback. Output files are written to a temporary name and renamed, so
    none is left half-written."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def main() -> None:
    """Console entry point: KvplanError -> one line and its exit code; bugs keep their
    traceback (``KVPLAN_DEBUG=1``: every error does), printed without secrets. Exit codes:
    :data:`EXIT_CODES`."""
    _quiet_on_closed_pipe()
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
