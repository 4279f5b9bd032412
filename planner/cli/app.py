"""The ``kvplan`` command line: the typer app and its commands, and the console entry point.

Each command is a plain function in its own module (parse, call one library function,
render); this module registers them, so no command module imports the app.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
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
from planner.errors import KvplanError

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


class Command(TyperCommand):
    """A kvplan command: the words of its command line are the files the user named, which
    kvplan may read even when they are a pipe or a device (:func:`planner.files.open_input`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        from planner.files import name_on_command_line

        name_on_command_line(args)
        return super().parse_args(ctx, args)


class ServeCommand(Command):
    """A command taking vLLM's serve flags, which reads the multi-word ones as vLLM does
    (``--lora-target-modules qkv_proj o_proj``: :func:`join_nargs`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
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
app.command(cls=Command)(gpus)
app.command(cls=Command)(models)
app.command(cls=Command)(check)
app.command(cls=Command)(diagnose)
app.command(cls=Command)(simulate)
app.command(cls=Command)(verify)
app.command(cls=Command)(schema)


def _redacted_excepthook(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    """Print a traceback as Python does, with any Hugging Face token redacted."""
    import traceback

    from planner.secrets import redact

    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


# What a non-UTF-8 terminal gets instead of the characters kvplan prints (anything else is
# written as a \u escape): `PYTHONIOENCODING=ascii`, or `LC_ALL=C` where Python does not
# coerce the locale to UTF-8.
ASCII = {
    "\u2713": "ok",  # check mark
    "\u2717": "x",
    "\u2588": "#",  # the memory bar's segments, still one character each
    "\u2593": "=",
    "\u2592": "+",
    "\u2591": "-",
    "\u00b7": ".",
    "\u2014": "-",
    "\u2013": "-",
    "\u2026": "...",
    "\u2192": "->",
    "\u2190": "<-",
    "\u2264": "<=",
    "\u2265": ">=",
    "\u00d7": "x",
    "\u2248": "~",
    "\u00b1": "+/-",
    "\u00b5": "u",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2502": "|",
    "\u2500": "-",
}


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    return "".join(
        ASCII.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text
    ), exc.end


def setup_streams() -> None:
    """Make stdout and stderr safe for any terminal: on one that is not UTF-8, characters it
    cannot show become ASCII (:data:`ASCII`) instead of a ``UnicodeEncodeError`` half-way
    through a table. A closed stdout (``kvplan gpus >&-``) fails its first write with one
    ``Error:`` line (:func:`planner.cli.app.main`), not an ``AttributeError``."""
    import codecs

    codecs.register_error("kvplan-ascii", _ascii_fallback)
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            utf8 = codecs.lookup(encoding).name.startswith("utf")
        except LookupError:
            utf8 = False
        if not utf8 and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="kvplan-ascii")


class _ClosedStream(io.TextIOBase):
    """What stdout is when the shell closed it: every write fails as a closed file would."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        import errno

        raise OSError(errno.EBADF, "stdout is closed")

    def isatty(self) -> bool:
        return False


# errno values that mean the output could not be written (full disk, quota, a file too big,
# an I/O error, a closed stdout); EPIPE (the reader went away) ends the run quietly
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF}


@contextlib.contextmanager
def _quiet_on_closed_pipe() -> Iterator[None]:
    """``kvplan ... | head``: a write to a closed pipe ends the process as the shell's own
    tools end (SIGPIPE, status 141), not with click's exit 1 (the code of "won't start") or a
    BrokenPipeError traceback. Output files are written to a temporary name and renamed, so
    none is left half-written. The handler is put back afterwards, so a caller that runs
    ``main()`` in its own process (a test, a server's sockets) keeps Python's default."""
    import signal

    if not hasattr(signal, "SIGPIPE"):
        yield
        return
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGPIPE, previous)


def main() -> None:
    """Console entry point: KvplanError -> one line and exit 1; bugs keep their traceback
    (``KVPLAN_DEBUG=1``: every error does), printed without secrets. Any terminal: a stdout
    that is not UTF-8 gets ASCII, a closed pipe ends the run quietly (exit 1), and a full disk
    or closed stdout is one `Error:` line (exit 1), never a traceback. Exit codes:
    :data:`EXIT_CODES`."""
    with _quiet_on_closed_pipe():
        _main()


def _main() -> None:
    setup_streams()
    try:
        try:
            try:
                app()
            finally:  # typer installs its own hook when called; ours prints what escapes
                sys.excepthook = _redacted_excepthook
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # buffered output fails here, not at exit, unhandled
    except KvplanError as exc:  # raised outside a command body (should not happen)
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        from planner.secrets import error_line

        print(f"Error: {error_line(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno != errno.EPIPE and exc.errno not in OUTPUT_ERRNOS:
            raise
        _stdout_failed(exc)


def _stdout_failed(exc: OSError) -> None:
    """End a run whose stdout cannot be written: quietly for a closed pipe (``| head``),
    else with one `Error:` line; stdout is pointed at /dev/null first, so the exit's own
    flush cannot fail again with a traceback."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if exc.errno != errno.EPIPE:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"Error: cannot write the output: {exc.strerror or exc}\n")
            sys.stderr.flush()
    os._exit(1)
