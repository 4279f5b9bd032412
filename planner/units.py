"""Sizes in and out: size strings from the command line (plain bytes or an explicit unit, never
a guess) and byte counts shown in binary units.

``6.51GiB``, ``80GB``, ``512MiB``, ``1073741824`` parse; ``80G`` is refused because it could mean
GiB (2^30) or GB (10^9) and the two differ by 7 %.
"""

from __future__ import annotations

import math
import re

from planner.errors import UsageError
from planner.secrets import shown_value

UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
MAX_SIZE_BYTES = 1 << 60  # 1 EiB: no GPU, node or budget comes near it
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def parse_size(text: str, *, flag: str = "size", unit_required: bool = False) -> int:
    """Bytes in ``text``: an integer, or a number with B/KB/MB/GB/TB/KiB/MiB/GiB/TiB.

    Args:
        text: the user's string.
        flag: the option name, for the error message.
        unit_required: refuse a bare number other than 0 (a flag or plans-file string, where
            ``24`` meant 24 GiB, not 24 bytes).

    Returns:
        Integer bytes (rounded down).
    """
    match = _SIZE.match(str(text))
    if not match:
        raise UsageError(
            f"{flag} {_short(str(text))} is not a size; write bytes or e.g. 24GiB, 80GB, 512MiB"
        )
    number, unit = match.group(1), match.group(2).lower()
    if unit in ("k", "m", "g", "t"):
        raise UsageError(
            f"{flag} {_short(text)} is ambiguous: say {number}{unit.upper()}iB (2^30-style) or "
            f"{number}{unit.upper()}B (10^9-style)"
        )
    if unit and unit not in UNITS:
        raise UsageError(
            f"{flag} {_short(text)}: unknown unit {match.group(2)!r}; use GiB, GB, MiB ..."
        )
    if not unit and "." in number:
        raise UsageError(f"{flag} {_short(text)}: a plain number is bytes and must be whole")
    if not unit:
        value = int(number) if len(number) <= 30 else MAX_SIZE_BYTES + 1
    else:
        scaled = float(number) * UNITS[unit]
        value = int(scaled) if math.isfinite(scaled) else MAX_SIZE_BYTES + 1
    if value > MAX_SIZE_BYTES:
        raise UsageError(
            f"{flag} {_short(text)} is too large (at most 1 EiB = {MAX_SIZE_BYTES:,} B)"
        )
    if unit_required and not unit and value:  # "--gpu-memory 24" is not 24 bytes
        raise UsageError(
            f"{flag} {_short(text)}: add a unit (GiB, GB), e.g. {number}GiB; a bare number "
            "would be bytes"
        )
    return value


def _short(text: str) -> str:
    return repr(shown_value(text))  # redacted before it is cut


def fmt_bytes(n: int) -> str:
    """Binary units, named as such: ``16.00 GiB``, ``128.0 KiB``, ``576 B``."""
    if abs(n) >= 1 << 80:  # past a float's exact range (and any real memory): exact bytes
        return f"{n:,} B"
    if n >= GIB:
        return f"{n / GIB:,.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:,.2f} MiB"
    if n >= KIB:
        return f"{n / KIB:,.1f} KiB"
    return f"{n:,} B"


def format_gib(n: int) -> str:
    """Bytes as GiB with 2 decimals and no unit, the way vLLM's ``format_gib`` logs them
    (``Available KV cache memory: 51.38 GiB``)."""
    return f"{round(n / GIB, 2):.2f}"


# Token counts, lengths, sequences and parallel sizes above 2^40 describe no deployment; the
# bound keeps every byte product exact in a float for the renderers.
MAX_COUNT = 1 << 40
