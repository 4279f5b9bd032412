"""What every view shares: the consoles (redacted), JSON, warnings, user text made safe to
print, and the memory bar.

rich is imported where a console is made, not at the top: ``--json`` prints without it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from planner.errors import one_line
from planner.outcome import Outcome
from planner.secrets import REDACTED, RedactingStream, error_line, redact

if TYPE_CHECKING:
    from rich.console import Console


def user_text(text: object) -> str:
    """Text that came from the user's files or flags, safe to print: one line without control
    characters (:func:`planner.errors.one_line`), and rich markup in it shown, not applied."""
    from rich.markup import escape

    return escape(one_line(str(text)))


MIN_WIDTH, MAX_WIDTH = 20, 1000  # COLUMNS outside these is a mistake, not a terminal


def _width() -> int | None:
    """The console width from ``COLUMNS`` (None: rich asks the terminal): 0, negative or
    absurd values are clamped, where rich would print nothing at width 0 or pad every line
    to a million spaces."""
    raw = os.environ.get("COLUMNS", "").strip()
    try:
        columns = int(raw)
    except ValueError:
        return None
    return 80 if columns < 1 else max(MIN_WIDTH, min(columns, MAX_WIDTH))


def _console(stream: IO[str]) -> Console:
    """A rich console on ``stream`` that redacts every string before rendering it: rich
    folds a long word across lines and shortens cells, and a token in pieces would slip past
    the stream's own redaction (which stays, for whatever else is written)."""
    from rich.console import Console

    class RedactingConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:
            markup = kwargs.get("markup")
            if markup is None:
                markup = self._markup
            return super().render_str(
                redact(text, "\\" + REDACTED if markup else REDACTED), **kwargs
            )

    return RedactingConsole(file=RedactingStream(stream), highlight=False, width=_width())  # type: ignore[arg-type]


def console() -> Console:
    """stdout, with any Hugging Face token redacted (:mod:`planner.secrets`)."""
    return _console(sys.stdout)


def err_console() -> Console:
    """stderr for warnings and `Error:` lines, redacted like :func:`console`."""
    return _console(sys.stderr)


def write_out(text: str) -> None:
    """``text`` as is on stdout, redacted like :func:`console` (JSON and reports need no
    console, and so no rich)."""
    RedactingStream(sys.stdout).write(text)


def to_json(obj: Any) -> str:
    """Stable, indented JSON with integer bytes (dataclasses via ``asdict``). Non-finite floats
    become ``null``: ``NaN`` and ``Infinity`` are not JSON, and jq and browsers reject them."""
    return json.dumps(_finite(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def wrap_words(text: str, width: int, *, indent: str = "", hang: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken between words only: every word
    (an identifier, a number, a flag with its value) stays whole, on the next line when it
    does not fit (a word wider than the line alone stands alone), behind ``hang`` (default:
    ``indent`` plus two spaces)."""
    return textwrap.wrap(
        text,
        width=max(width, 20),
        initial_indent=indent,
        subsequent_indent=indent + "  " if hang is None else hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def wrap_line(line: str, width: int) -> list[str]:
    """One report line at ``width``: its own indent kept, the lines after it hung under its
    first word after a mark (``  ! Starved ...``, ``    → admit ...``), else two in."""
    if len(line) <= width:
        return [line]
    body = line.lstrip(" ")
    indent = line[: len(line) - len(body)]
    mark = body.split(" ", 1)[0]
    hang = indent + " " * (len(mark) + 1) if len(mark) == 1 and not mark.isalnum() else None
    return wrap_words(body, width, indent=indent, hang=hang)


def print_wrapped(
    out: Console,
    text: str,
    *,
    indent: str = "",
    hang: str | None = None,
    style: str = "",
    label_style: str = "",
) -> None:
    """Prose at ``out``'s width (:func:`wrap_words`: every word whole). ``text`` is plain: no
    rich markup is read, so none leaks; ``style`` colours whole lines, ``label_style`` the
    first word (``Warning:``)."""
    from rich.text import Text

    for i, line in enumerate(wrap_words(text, out.width, indent=indent, hang=hang)):
        if i == 0 and label_style:
            shown = Text(redact(line), style=style)  # a Text skips render_str's redaction
            shown.stylize(label_style, len(indent), len(indent) + len(text.split(" ", 1)[0]))
            out.print(shown, highlight=False, soft_wrap=True)
        else:
            out.print(line, markup=False, highlight=False, soft_wrap=True, style=style or None)


def print_note(out: Console, note: str, *, style: str = "dim") -> None:
    """``note: ...`` at ``out``'s width, the lines after the first two in (user text made one
    line first: no control characters)."""
    print_wrapped(out, f"note: {one_line(note)}", hang="  ", style=style)


def warnings_(messages: list[str]) -> None:
    if not messages:
        return

    out = err_console()
    for message in messages:  # redacted, then long words cut, like an Error: line
        print_wrapped(out, f"Warning: {one_line(error_line(message))}", label_style="yellow")


BAR_CHARS = {
    "weights": "█",
    "activation": "▓",
    "overhead": "▒",
    "KV cache": "░",
    "not requested": "·",
}


def usage_bar(parts: list[tuple[str, int]], total: int, width: int = 64) -> str:
    """A memory bar readable without colour: one character per segment kind. It never grows
    past ``width``: parts that add up to more than ``total`` (a budget overrun) are cut."""
    out, used = [], 0
    for label, size in parts:
        share = (2 * width * max(size, 0) + total) // (2 * total) if total > 0 else 0  # rounded
        n = min(share, width - used)
        out.append(BAR_CHARS[label] * n)
        used += n
    return "".join(out)


# The three outcomes in words (JSON ``outcome`` -> what every view says).
OUTCOME_PHRASES: dict[str, str] = {o.value: o.phrase for o in Outcome}


def outcome_words(
    outcome: str | None,
    running: int | None,
    max_num_seqs: int | None,
    max_model_len: int | None = None,
    *,
    short: bool = False,
) -> str:
    """An outcome (JSON ``outcome``: ``wont_start``, ``queues_at_worst_case``,
    ``fits_at_worst_case``) in the words every view uses: "starts, queues at worst case: 12 of
    32 requests of 8,192 tokens run at once"; ``short`` for a table cell, "queues 12/32" (12
    of 32 run at once). No outcome (a deployment that could not be planned) is "—"."""
    if outcome is None:
        return "—"
    if outcome == "wont_start":
        return OUTCOME_PHRASES[outcome]
    if short:
        word = "queues" if outcome == "queues_at_worst_case" else "fits"
        return f"{word} {running or 0:,}/{max_num_seqs or running or 0:,}"
    of = f" of {max_num_seqs:,}" if max_num_seqs else ""
    requests = f"requests of {max_model_len:,} tokens" if max_model_len else "requests"
    phrase = OUTCOME_PHRASES[outcome]
    if outcome == "queues_at_worst_case":
        return f"{phrase}: {running or 0:,}{of} {requests} run at once"
    return f"{phrase}: all {running or 0:,} {requests} run at once"


@dataclass(frozen=True)
class Column:
    """One column of :func:`fitted_table`: its header, its cells, whether it is an identifier
    (never shortened or dropped: the strings users type), and how it aligns."""

    header: str
    cells: list[str]
    identifier: bool = False
    right: bool = False


def fitted_table(columns: list[Column], width: int, *, gap: int = 2) -> tuple[list[str], list[str]]:
    """Plain aligned rows that fit ``width`` columns: every cell whole, identifiers always
    kept; secondary columns are dropped, last first, until the rows fit. Returns the lines
    (header first) and the headers of the dropped columns (for a "--json has ..." note).

    Readable piped and with ``NO_COLOR``: no box characters, no wrapping inside a cell, so
    ``grep name`` finds a row whole.
    """
    kept = list(columns)
    dropped: list[str] = []

    def widths(cols: list[Column]) -> list[int]:
        return [max([len(c.header), *(len(x) for x in c.cells)]) for c in cols]

    while sum(widths(kept)) + gap * (len(kept) - 1) > width:
        secondary = [i for i, c in enumerate(kept) if not c.identifier]
        if not secondary:
            break  # identifiers alone: wider than the screen, but whole
        dropped.insert(0, kept.pop(secondary[-1]).header)
    sizes = widths(kept)

    def line(cells: list[str]) -> str:
        parts = [
            cell.rjust(w) if col.right else cell.ljust(w)
            for cell, w, col in zip(cells, sizes, kept, strict=True)
        ]
        return (" " * gap).join(parts).rstrip()

    rows = len(kept[0].cells) if kept else 0
    lines = [line([c.header for c in kept])]
    lines += [line([c.cells[i] for c in kept]) for i in range(rows)]
    return lines, dropped


def print_fitted(out: Console, title: str, columns: list[Column], note: str = "") -> None:
    """``title``, then :func:`fitted_table`'s rows at ``out``'s width, then which columns were
    left out for width and ``note`` (e.g. "--json has every field."), if any."""
    lines, dropped = fitted_table(columns, out.width)
    out.print(title, markup=False)
    for text in lines:
        out.print(text, markup=False, soft_wrap=True)
    more = f"not shown at this width: {', '.join(dropped)}" if dropped else ""
    footer = "; ".join(part for part in (more, note) if part)
    if footer:
        out.print(footer, markup=False)
