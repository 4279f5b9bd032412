"""Keep Hugging Face tokens out of everything kvplan prints or writes.

kvplan never reads a token itself: ``huggingface_hub`` sends it. But people paste kvplan's
output into tickets and PR comments, so every output path passes through :func:`redact`: the
tables and JSON on stdout (:class:`RedactingStream`), the `Error:` lines and warnings on stderr,
the report files of ``-o``, and the traceback of a bug. A token can reach those through a
file the user points kvplan at (a log with ``hf_token`` in it, a config whose name is a URL with
credentials) or an exception message from a library.

The secrets are the values of ``HF_TOKEN`` and ``HUGGING_FACE_HUB_TOKEN`` and the token that
``huggingface-cli login`` saved (``$HF_TOKEN_PATH``, else ``$HF_HOME/token``); they are looked up
at each call, so a token set after start-up is covered too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MIN_SECRET_CHARS = 8  # shorter values would blank out ordinary words
REDACTED = "[redacted token]"


def _token_file() -> Path:
    if os.environ.get("HF_TOKEN_PATH"):
        return Path(os.environ["HF_TOKEN_PATH"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(home) / "token"


def secrets() -> list[str]:
    """The token values to hide, longest first (so one that contains another goes whole)."""
    found = [os.environ.get(name, "").strip() for name in TOKEN_VARIABLES]
    try:
        with _token_file().open("rb") as f:
            found.append(f.read(4096).decode("utf-8", "replace").strip())
    except (OSError, ValueError):
        pass
    return sorted({s for s in found if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every token replaced by ``[redacted token]``."""
    for secret in secrets():
        text = text.replace(secret, REDACTED)
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
