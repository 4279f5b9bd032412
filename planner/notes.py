"""One-line notes for the user from inside the library: ``note: ...`` on stderr in the CLI.

The library prints nothing itself. :func:`say` hands a note to the sink that :func:`notes_to`
installed for the current context and drops it when there is none; a library caller who wants
the note uses the function that returns it (:func:`planner.gpus.lookup_gpu`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_SINK: ContextVar[Callable[[str], None] | None] = ContextVar("kvplan_notes", default=None)


def say(note: str) -> None:
    """Pass ``note`` to the current sink (nothing happens without one, or for "")."""
    sink = _SINK.get()
    if sink is not None and note:
        sink(note)


@contextmanager
def notes_to(sink: Callable[[str], None]) -> Iterator[None]:
    """Send the notes :func:`say` gets inside the block to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)
