"""Measured step times for ``kvplan simulate --step-times FILE``: tokens per step -> seconds.

Where a table is given it replaces the roofline (:mod:`planner.simulate.roofline`) for every
step's duration, so TTFT, TPOT and throughput come from the measurements.

The file is CSV or JSON (by suffix: ``.csv``, ``.json``; anything else is tried as CSV):

- CSV: a header row naming the columns ``tokens`` and ``seconds`` (others are ignored), then
  one row per measurement; blank lines and lines starting with ``#`` are skipped::

      tokens,seconds
      1,0.0065
      256,0.0081
      2048,0.0410

- JSON: a list of ``{"tokens": N, "seconds": S}`` objects, or one object mapping tokens to
  seconds (``{"1": 0.0065, "256": 0.0081, "2048": 0.041}``).

``tokens`` is the number of tokens a step schedules (prompt chunk tokens plus one per decoding
request), a whole number >= 1, each at most once; ``seconds`` is that step's wall time, > 0 (e.g.
``vllm bench latency`` per batch size, or a profile of one engine step). A step of ``t`` tokens
takes the row's seconds; between rows it is interpolated linearly; past the last row it is
extrapolated from the last two rows (never falling: a negative slope counts as flat; a one-row
table is that time for every step); below the first row it takes the first row's time.

An optional ``context`` column (JSON: key) is the context length of each scheduled sequence
when the step was timed: the tokens of KV each reads, the step's own tokens included (the
simulator passes a step's KV tokens after it is scheduled, so a 512-token prefill from scratch
is looked up at context 512, a decode step at 2,048 cached tokens at 2,049). With it the
table is one table by tokens per context value (each ``(context, tokens)`` pair at most once),
and a step whose sequences hold ``kv / seqs`` context tokens on average is interpolated
between the two nearest contexts the same way (below the first: the first; past the last:
extrapolated from the last two, never falling)::

    context,tokens,seconds
    0,1,0.0065
    0,256,0.0081
    8192,1,0.0072
    8192,256,0.0240

Without it the table does not depend on context length, so a step's KV reads are whatever
the measurements included.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import InputFileError
from planner.secrets import shown_value

MAX_BYTES = 1 << 20
MAX_ROWS = 100_000


def _interpolate(xs: tuple[int, ...], ys: tuple[float, ...], x: float) -> float:
    """ys at x: linear between points, the first below them, extrapolated from the last two
    past them (never falling), one point everywhere."""
    if x <= xs[0] or len(xs) == 1:
        return ys[0] if x <= xs[0] else ys[-1]
    if x >= xs[-1]:
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
        return ys[-1] + slope * (x - xs[-1])
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True)
class StepTable:
    """Step duration by tokens scheduled in the step (and, with ``by_context``, by the context
    of its sequences), from measurements.

    Has :class:`planner.simulate.roofline.Roofline`'s ``step_s`` / ``decode_s`` so the engine
    takes either. Worked example, rows (1, 10 ms), (101, 20 ms): a 51-token step takes 15 ms, a
    201-token step 30 ms (extrapolated), and 4 decode steps of 11 requests 4 x 11 ms.

    Attributes:
        tokens: the measured tokens per step, ascending (of the first context, with
            ``by_context``).
        seconds: the measured seconds of each.
        source: where the table came from (the file name), for the report.
        by_context: ``(context, table)`` pairs by ascending context, when the file has a
            ``context`` column; empty otherwise.
    """

    tokens: tuple[int, ...]
    seconds: tuple[float, ...]
    source: str = ""
    by_context: tuple[tuple[int, StepTable], ...] = ()
    _cache: dict[int, float] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if not self.tokens or len(self.tokens) != len(self.seconds):
            raise ValueError("a step-time table needs one seconds value per tokens value")
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:], strict=False)):
            raise ValueError("step-time table tokens must be strictly ascending")
        contexts = [c for c, _ in self.by_context]
        if any(b <= a for a, b in zip(contexts, contexts[1:], strict=False)):
            raise ValueError("step-time table contexts must be strictly ascending")

    @property
    def timing(self) -> str:
        """How the report names this timing model."""
        return f"measured step times ({self.source})"

    def at(self, tokens: int, context: float | None = None) -> float:
        """Seconds for a step of ``tokens`` tokens whose sequences hold ``context`` tokens each
        on average (ignored without a context column; see the module docstring)."""
        if self.by_context and context is not None:
            return self._at_context(tokens, context)
        cached = self._cache.get(tokens)
        if cached is not None:
            return cached
        value = _interpolate(self.tokens, self.seconds, tokens)
        self._cache[tokens] = value
        return value

    def _at_context(self, tokens: int, context: float) -> float:
        contexts = tuple(c for c, _ in self.by_context)
        values = tuple(t.at(tokens) for _, t in self.by_context)
        return _interpolate(contexts, values, context)

    def step_s(self, tokens: int, kv_tokens: int, pairs: int, seqs: int = 0) -> float:
        """Seconds for a step of ``tokens`` new tokens over ``seqs`` sequences (0: one a token)
        reading ``kv_tokens`` of context."""
        if not self.by_context:
            return self.at(tokens)
        return self._at_context(tokens, kv_tokens / max(1, seqs or tokens))

    def decode_s(self, n: int, kv_tokens: int, steps: int) -> float:
        """Seconds for ``steps`` decode steps of ``n`` requests: every one schedules ``n``
        tokens, so each takes ``at(n)``; with contexts, the context of each grows by one a
        step, and between two measured contexts the time is a line in the step, summed
        exactly from its ends."""
        if not self.by_context:
            return steps * self.at(n)
        if steps <= 0:
            return 0.0
        c0 = kv_tokens / max(1, n)
        cuts = {0, steps}
        for c, _ in self.by_context:
            k = math.ceil(c - c0)
            if 0 < k < steps:
                cuts.add(k)
        points = sorted(cuts)
        total = 0.0
        for k0, k1 in zip(points, points[1:], strict=False):
            first, last = self._at_context(n, c0 + k0), self._at_context(n, c0 + k1 - 1)
            total += (k1 - k0) * (first + last) / 2
        return total


def _number(value: Any, where: str, column: str) -> float:
    if isinstance(value, bool):
        raise InputFileError(f"{where}: {column} must be a number, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        shown = shown_value(value)
        raise InputFileError(f"{where}: {column} must be a number, got {shown!r}") from None


Row = tuple[str, Any, Any, Any]  # where, tokens, seconds, context (None: no column)


def _rows_from_csv(text: str, source: str) -> list[Row]:
    lines = [
        (n, line)
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise InputFileError(f"{source}: no step times (expected a 'tokens,seconds' header)")
    header = [h.strip().lower() for h in next(csv.reader(io.StringIO(lines[0][1])))]
    if "tokens" not in header or "seconds" not in header:
        raise InputFileError(
            f"{source}: the first row must name the columns tokens and seconds, got "
            f"{lines[0][1][:80]!r}"
        )
    ti, si = header.index("tokens"), header.index("seconds")
    ci = header.index("context") if "context" in header else None
    rows: list[Row] = []
    for n, line in lines[1:]:
        cells = next(csv.reader(io.StringIO(line)))
        if len(cells) <= max(ti, si, ci or 0):
            raise InputFileError(f"{source}: line {n}: expected {len(header)} columns")
        context = cells[ci] if ci is not None else None
        rows.append((f"{source}: line {n}", cells[ti], cells[si], context))
    return rows


def _rows_from_json(text: str, source: str) -> list[Row]:
    try:
        data = files.loads_json(text, where=source)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise InputFileError(f"{source}: JSON nested too deeply") from None
    if isinstance(data, dict):
        return [(f"{source}: key {k!r}", k, v, None) for k, v in data.items()]
    if not isinstance(data, list):
        raise InputFileError(
            f"{source}: expected a list of {{tokens, seconds}} objects or a tokens -> seconds "
            "object"
        )
    rows: list[Row] = []
    for i, item in enumerate(data):
        where = f"{source}: item {i}"
        if not isinstance(item, dict) or "tokens" not in item or "seconds" not in item:
            raise InputFileError(f"{where}: expected an object with tokens and seconds")
        rows.append((where, item["tokens"], item["seconds"], item.get("context")))
    return rows


def parse_step_times(text: str, source: str, *, as_json: bool) -> StepTable:
    """A :class:`StepTable` from the text of a step-time file (see the module docstring);
    :class:`InputFileError` (one line naming the row) for anything else."""
    rows = _rows_from_json(text, source) if as_json else _rows_from_csv(text, source)
    if not rows:
        raise InputFileError(f"{source}: no step times")
    if len(rows) > MAX_ROWS:
        raise InputFileError(f"{source}: {len(rows):,} rows; at most {MAX_ROWS:,}")
    with_context = rows[0][3] is not None
    tables: dict[int, dict[int, float]] = {}
    for where, raw_tokens, raw_seconds, raw_context in rows:
        tokens = _number(raw_tokens, where, "tokens")
        seconds = _number(raw_seconds, where, "seconds")
        if not math.isfinite(tokens) or tokens != int(tokens) or tokens < 1:
            raise InputFileError(f"{where}: tokens must be a whole number >= 1, got {tokens:g}")
        if not math.isfinite(seconds) or seconds <= 0:
            raise InputFileError(f"{where}: seconds must be > 0, got {seconds:g}")
        context = 0
        if (raw_context is not None) != with_context:
            raise InputFileError(
                f"{where}: give a context for every row or for none (the first row "
                f"{'has' if with_context else 'has none'})"
            )
        if raw_context is not None:
            c = _number(raw_context, where, "context")
            if not math.isfinite(c) or c != int(c) or c < 0:
                raise InputFileError(f"{where}: context must be a whole number >= 0, got {c:g}")
            context = int(c)
        table = tables.setdefault(context, {})
        if int(tokens) in table:
            at = f" at context {context}" if with_context else ""
            raise InputFileError(f"{where}: tokens {int(tokens)} is given twice{at}")
        table[int(tokens)] = seconds

    def one(table: dict[int, float]) -> StepTable:
        keys = sorted(table)
        return StepTable(tuple(keys), tuple(table[k] for k in keys), source=source)

    if not with_context:
        return one(tables[0])
    by_context = tuple((c, one(tables[c])) for c in sorted(tables))
    first = by_context[0][1]
    return StepTable(first.tokens, first.seconds, source=source, by_context=by_context)


def load_step_times(path: str | Path) -> StepTable:
    """The step-time table in ``path`` (``.json``: JSON; otherwise CSV)."""

    source = str(path)
    text = files.read_text_file(Path(path), limit=MAX_BYTES, what="step-time table")
    return parse_step_times(text, source, as_json=Path(path).suffix.lower() == ".json")
