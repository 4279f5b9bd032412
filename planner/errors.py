"""Exceptions the library raises. Only these are shown to users without a traceback."""

from __future__ import annotations

from typing import Any, Literal


class KvplanError(Exception):
    """Expected failure; shown to the user as one `Error: ...` line, exit code 1."""

    exit_code = 1


class UsageError(KvplanError):
    """A flag value the user can fix on the command line (exit code 2, like click)."""

    exit_code = 2


class InputFileError(KvplanError):
    """A file named on the command line that cannot be read as a whole (missing, binary, too
    large, not the expected format): exit code 2, like a bad flag."""

    exit_code = 2


class ConfigError(KvplanError):
    """A model config that cannot be read or does not describe a decoder we can size."""


class ModelNotFoundError(KvplanError):
    """The model argument names no local path, catalog entry or reachable Hub repo."""


class DoesNotFitError(KvplanError):
    """A plan that cannot hold even one request.

    ``changes`` are the suggested fixes as data, one per alternative: a ``{setting: value}``
    (``{"tp": 2}``, ``{"gpu": "h200"}``), or a sentence for a fix that is no setting ("an fp8
    checkpoint"). Callers spell them their own way: a plans file says ``tp: 2`` where the
    message says ``--tensor-parallel-size 2`` (:func:`planner.deployment.render_changes`).
    """

    def __init__(
        self, message: str, *, changes: list[dict[str, object] | str] | None = None
    ) -> None:
        super().__init__(message)
        self.changes = changes or []


class WontStartError(DoesNotFitError):
    """A deployment that cannot start, with what was computed before it failed: ``refusal``
    (a :class:`planner.recommend.Refusal`: the rule that failed, the figures, the layouts) lets
    ``kvplan estimate`` print its verdict and JSON object before the ``Error:`` line."""

    def __init__(
        self,
        message: str,
        *,
        changes: list[dict[str, object] | str] | None = None,
        refusal: object = None,
    ) -> None:
        super().__init__(message, changes=changes)
        self.refusal = refusal


class WorkloadError(KvplanError):
    """A workload file (JSONL trace or YAML spec) that cannot be read or makes no requests:
    exit code 2, like any invalid file named on the command line (``-w``)."""

    exit_code = 2


class ProbeUnavailableError(KvplanError):
    """``kvplan verify`` where torch cannot be imported: the probes need it, and the fix is an
    install, not a flag (exit code 2, like a bad flag)."""

    exit_code = 2


def one_line(message: str) -> str:
    """``message`` as one printable line. A message may quote a key or value from a hostile
    file; its line breaks and other control characters are written as escapes (``\\r``), so an
    `Error:` line stays one line and cannot move the terminal's cursor."""
    if message.isprintable():
        return message
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message
    )


# What a refused setting value broke (:class:`SettingError`).
Rule = Literal["whole", "min", "max", "number", "positive", "fraction", "bool", "name"]


class SettingError(UsageError):
    """A value one setting cannot take, with the rule it broke.

    ``rule`` lets a caller that words refusals its own way do so without reading the message
    (a plans file says ``must be at least 1 (got 0)`` where the command line says ``--tp must
    be a positive integer, got 0``): ``whole`` not a whole number, ``min`` below 1, ``max``
    above :data:`MAX_COUNT`, ``number`` not a finite number, ``positive`` not above 0,
    ``fraction`` above 1, ``bool`` not true or false, ``name`` not a non-empty string.
    ``value`` is the value as it was given (``90``, not ``90.0``).
    """

    def __init__(self, message: str, *, rule: Rule, value: Any) -> None:
        super().__init__(message)
        self.rule: Rule = rule
        self.value = value
