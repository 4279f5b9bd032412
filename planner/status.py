"""A transient status line on stderr while slow work runs (a Hub fetch, a long replay, a
probe), so a user waiting on the network or a million requests sees what is happening.

Silent when stderr is not a terminal (pipes, CI logs, tests) and under ``--json``
(:func:`quiet`), so machine-read output never carries it. rich is imported only when a line
is shown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

_QUIET = False


def quiet(on: bool = True) -> None:
    """Silence status lines for this process (the CLI calls it for ``--json``)."""
    global _QUIET
    _QUIET = on


def shown() -> bool:
    """Whether a status line would be shown now."""
    return not _QUIET and sys.stderr.isatty()


@contextmanager
def status(message: str) -> Iterator[None]:
    """Show ``message`` with a spinner on stderr while the block runs, then erase it."""
    if not shown():
        yield
        return
    from rich.console import Console

    with Console(file=sys.stderr).status(message):
        yield
