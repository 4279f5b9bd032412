"""The offload sub-config: vLLM's rules for ``--cpu-offload-gb`` and the CPU KV tier
(``vllm/config/offload.py``, ``cache.py``); what they cost is :mod:`planner.offload`'s."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.config import fields as fields_
from planner.errors import SettingError, UsageError
from planner.model.specs import Engine
from planner.units import MAX_COUNT

if TYPE_CHECKING:
    from planner.deployment import ServeSettings


def check_offload(s: ServeSettings) -> None:
    """vLLM's offload and KV-tier rules (``vllm/config/offload.py``, ``cache.py``)."""
    for flag, value in (
        ("--cpu-offload-gb", s.cpu_offload_gb),
        ("--kv-offloading-size", s.kv_offloading_size),
    ):
        if value is None:
            continue
        finite = isinstance(value, int | float) and not isinstance(value, bool)
        if not (finite and math.isfinite(value) and 0 <= value <= MAX_COUNT):
            raise SettingError(
                f"{flag} must be a number of GiB >= 0, got {value!r}",
                rule="number",
                value=value,
            )
    if s.kv_offloading_size is not None and s.kv_offloading_size <= 0:
        raise SettingError(
            f"--kv-offloading-size must be positive (GiB), got {s.kv_offloading_size!r}",
            rule="positive",
            value=s.kv_offloading_size,
        )
    if s.kv_offloading_backend not in fields_.KV_OFFLOADING_BACKENDS:
        raise UsageError(
            "--kv-offloading-backend must be one of "
            f"{', '.join(fields_.KV_OFFLOADING_BACKENDS)}, got {s.kv_offloading_backend!r}"
        )
    if s.kv_offloading_backend != "native" and s.kv_offloading_size is None:
        raise UsageError(
            "--kv-offloading-backend needs --kv-offloading-size (vLLM turns the KV tier "
            "on only when a size is given)"
        )
    offload = s.cpu_offload_gb or s.kv_offloading_size is not None
    if offload and s.engine is not Engine.VLLM:
        raise UsageError(
            "--cpu-offload-gb and --kv-offloading-size are sized for vLLM only; drop them "
            "or use --engine vllm"
        )
