"""Keep Hugging Face tokens out of everything kvplan prints or writes.

kvplan never reads a token itself: ``huggingface_hub`` sends it. But people paste kvplan's
output into tickets and PR comments, so every output path passes through :func:`redact`: the
tables and JSON on stdout (:class:`RedactingStream`), the `Error:` lines and warnings on stderr,
the report files of ``-o``, and the traceback of a bug. A token can reach those through a
file the user points kvplan at (a log with ``hf_token`` in it, a config whose name is a URL with
credentials) or an exception message from a library.

The secrets are the values of ``HF_TOKEN`` and ``HUGGING_FACE_HUB_TOKEN``, looked up at each
call (a token set after start-up is covered too), and the token that ``huggingface-cli login``
saved (``$HF_TOKEN_PATH``, else ``$HF_HOME/token``), read once per process: a pipe
(``HF_TOKEN_PATH=<(printf ...)``) gives its token once, so a second read would find nothing.
That read never blocks or runs on: a regular file or a pipe, at most 4 KiB, a pipe waited on
for at most a second; anything else (a device, a FIFO without a writer) holds no token.

Redaction comes before anything that shortens or folds text (:func:`shown_value`,
:func:`error_line`, the consoles of :mod:`planner.render._output`): a token cut in two
pieces is no longer the token, and would slip past.
"""

from __future__ import annotations

import os
import select
import stat
import time
from pathlib import Path
from typing import IO, Any

from planner.errors import one_line

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_SECRET_CHARS = 8  # shorter values would blank out ordinary words
REDACTED = "[redacted token]"


TOKEN_FILE_BYTES = 4096  # a token is 37 characters; a bigger "token file" is not one
TOKEN_PIPE_WAIT_S = 1.0  # how long a pipe as HF_TOKEN_PATH may take to give its token
LONG_WORD_CHARS = 200  # error_line cuts a word longer than this (a 100,000-character --gpu)
_FILE_TOKENS: dict[str, str] = {}  # token file -> its token, read once per process


def _token_file() -> Path:
    if os.environ.get("HF_TOKEN_PATH"):
        return Path(os.environ["HF_TOKEN_PATH"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "token"


def _read_token(path: Path) -> str:
    """The token in ``path``: a regular file or a pipe, at most :data:`TOKEN_FILE_BYTES`, a
    pipe waited on for :data:`TOKEN_PIPE_WAIT_S` at most; "" for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):
        return ""
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.read(fd, TOKEN_FILE_BYTES).decode("utf-8", "replace").strip()
        if not stat.S_ISFIFO(mode):
            return ""
        data, deadline = b"", time.monotonic() + TOKEN_PIPE_WAIT_S
        while len(data) < TOKEN_FILE_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            try:
                chunk = os.read(fd, TOKEN_FILE_BYTES - len(data))
            except BlockingIOError:
                continue
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def secrets() -> list[str]:
    """The token values to hide, longest first (so one that contains another goes whole)."""
    found = [os.environ.get(name, "").strip() for name in TOKEN_VARIABLES]
    path = _token_file()
    if str(path) not in _FILE_TOKENS:
        _FILE_TOKENS[str(path)] = _read_token(path)
    found.append(_FILE_TOKENS[str(path)])
    return sorted({s for s in found if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def shown_value(value: object, limit: int = 40) -> str:
    """A user's value as an error quotes it: redacted, then cut to ``limit`` characters
    (``abc...``), in that order, so the cut never leaves part of a token showing."""
    text = redact(str(value))
    return text if len(text) <= limit else text[: limit - 10] + "..."


def error_line(message: str) -> str:
    """``message`` as the one line of an ``Error:`` or ``note:``: redacted first, then made
    one printable line (:func:`planner.errors.one_line`), and a word longer than
    :data:`LONG_WORD_CHARS` (a pasted file, a 100,000-character name) cut to its start and
    its length."""
    line = one_line(redact(message))
    if len(line) <= LONG_WORD_CHARS:
        return line
    words = line.split(" ")
    return " ".join(
        w if len(w) <= LONG_WORD_CHARS else f"{w[:60]}...[{len(w):,} characters]" for w in words
    )


def redact(text: str, replacement: str = REDACTED) -> str:
    """``text`` with every token replaced by ``[redacted token]`` (or ``replacement``: rich
    markup needs the bracket escaped)."""
    for secret in secrets():
        text = text.replace(secret, replacement)
    return text


class RedactingStream:
    """A text stream that redacts what is written and passes everything else to ``stream``
    (rich asks it whether it is a terminal, its encoding, ...)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(redact(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
