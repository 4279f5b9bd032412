"""The multimodal sub-config: the limits, processor overrides and tower mode a user sets
(vLLM's ``MultiModalConfig``), parsed and checked; what they cost is :mod:`planner.multimodal`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner.errors import UsageError
from planner.files import loads_json

# vLLM's default item limit per prompt for a modality nobody limits (MultiModalConfig).
DEFAULT_LIMIT = 999
MODES = ("weights", "data")


def _json_object(value: Any, flag: str, example: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = loads_json(value, where=flag, error=UsageError, line=None)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{flag} must be JSON, e.g. '{example}' ({exc.msg})") from None
    if not isinstance(value, Mapping):
        raise UsageError(f"{flag} must be a JSON object, e.g. '{example}'")
    return {str(k): v for k, v in value.items()}


def _count(value: Any, what: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 1 << 40:
        above = "a whole number >= 0" if minimum == 0 else "a positive whole number"
        raise UsageError(f"{what} must be {above}, got {value!r}")
    return value


_LIMIT_OPTIONS = {
    "image": ("count", "width", "height"),
    "video": ("count", "num_frames", "width", "height"),
    "audio": ("count", "length"),
}


@dataclass(frozen=True, kw_only=True)
class MMLimits:
    """``--limit-mm-per-prompt`` as vLLM takes it: items per prompt by modality, in the legacy
    form ``{"image": 2, "video": 0}`` or with dummy-data options
    ``{"video": {"count": 1, "num_frames": 32, "width": 512, "height": 512}}``
    (``MultiModalConfig.limit_per_prompt``; options that make the profiled dummy items smaller
    are kept for the command, and kvplan's figures stay those of the largest item)."""

    counts: tuple[tuple[str, int], ...]
    options: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    def count(self, modality: str) -> int:
        return dict(self.counts).get(modality, DEFAULT_LIMIT)

    def as_json(self) -> str:
        opts = dict(self.options)
        data: dict[str, Any] = {}
        for modality, count in self.counts:
            extra = dict(opts.get(modality, ()))
            data[modality] = {"count": count, **extra} if extra else count
        return json.dumps(data, separators=(",", ":"))


def parse_limits(value: Any) -> MMLimits:
    """An :class:`MMLimits` from vLLM's JSON (a string, or a mapping from a plans file)."""
    if isinstance(value, MMLimits):
        return value
    flag = "--limit-mm-per-prompt"
    data = _json_object(value, flag, '{"image":2,"video":0}')
    counts: list[tuple[str, int]] = []
    options: list[tuple[str, tuple[tuple[str, int], ...]]] = []
    for modality, item in data.items():
        if isinstance(item, Mapping):
            allowed = _LIMIT_OPTIONS.get(modality, ("count",))
            unknown = sorted(set(map(str, item)) - set(allowed))
            if unknown:
                raise UsageError(
                    f"{flag}: {modality} takes {', '.join(allowed)}, not {', '.join(unknown)}"
                )
            count = _count(item.get("count", DEFAULT_LIMIT), f"{flag} {modality} count")
            extra = tuple(
                (str(k), _count(v, f"{flag} {modality} {k}", minimum=1))
                for k, v in item.items()
                if k != "count"
            )
            if extra:
                options.append((modality, extra))
        else:
            count = _count(item, f"{flag} {modality}")
        counts.append((modality, count))
    return MMLimits(counts=tuple(counts), options=tuple(options))


@dataclass(frozen=True, kw_only=True)
class MMProcessorKwargs:
    """``--mm-processor-kwargs``: the processor overrides vLLM forwards, as canonical JSON.
    kvplan reads the size ones: ``max_pixels`` / ``min_pixels`` (or ``size.longest_edge`` /
    ``shortest_edge``), flat or under ``images_kwargs`` / ``videos_kwargs``; Gemma 3's
    ``do_pan_and_scan`` / ``pan_and_scan_max_num_crops``; Llama 4's ``max_patches``."""

    text: str

    @property
    def data(self) -> dict[str, Any]:
        loaded = json.loads(self.text)
        assert isinstance(loaded, dict)
        return loaded

    def as_json(self) -> str:
        return self.text


def parse_processor_kwargs(value: Any) -> MMProcessorKwargs:
    if isinstance(value, MMProcessorKwargs):
        return value
    data = _json_object(value, "--mm-processor-kwargs", '{"max_pixels":1003520}')
    return MMProcessorKwargs(text=json.dumps(data, separators=(",", ":"), sort_keys=True))


@dataclass(frozen=True, kw_only=True)
class MMTokens:
    """``--mm-tokens-per-item`` (kvplan's): the largest item's tokens when kvplan cannot derive
    them, one number for every modality or JSON by modality (``{"image":1280,"video":8192}``)."""

    every: int | None = None
    by_modality: tuple[tuple[str, int], ...] = ()

    def get(self, modality: str) -> int | None:
        return dict(self.by_modality).get(modality, self.every)

    def as_json(self) -> str:
        if self.every is not None:
            return str(self.every)
        return json.dumps(dict(self.by_modality), separators=(",", ":"))


def parse_tokens(value: Any) -> MMTokens:
    if isinstance(value, MMTokens):
        return value
    flag = "--mm-tokens-per-item"
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdecimal()):
        return MMTokens(every=_count(int(value), flag, minimum=1))
    data = _json_object(value, flag, '{"image":1280}')
    return MMTokens(
        by_modality=tuple((m, _count(n, f"{flag} {m}", minimum=1)) for m, n in data.items())
    )


def check_mode(mode: str) -> str:
    text = str(mode).strip().lower()
    if text not in MODES:
        raise UsageError(f"--mm-encoder-tp-mode must be weights or data, got {mode!r}")
    return text
