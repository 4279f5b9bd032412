"""Where a model's config comes from: a local config.json or folder, the bundled catalog, or the
Hub (:func:`load_model_spec`), read bounded and with one-line errors (:func:`read_json_config`),
and the processor configs beside it; :mod:`planner.model.config` parses what it finds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import ConfigError, ModelNotFoundError
from planner.model import catalog
from planner.model.config import CONFIG_MAX_BYTES, HUB_ID, MAX_HUB_ID, parse_config
from planner.model.hub import RepoMissingError, download_config, download_optional
from planner.model.specs import (
    ModelSpec,
)
from planner.notes import say


def read_json_config(path: Path, name: str | None = None) -> dict[str, Any]:
    """Read one config.json with one-line errors for the usual mistakes."""
    label = name or str(path)

    def error(message: str) -> ConfigError:  # the reader's words, under the config's name
        return ConfigError(message.replace(str(path), label, 1))

    if not path.exists():
        raise ModelNotFoundError(f"cannot read {label}: No such file or directory")
    raw = files.read_bytes(path, limit=CONFIG_MAX_BYTES, what="config.json", error=error)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {label}: {exc}") from None
    if not text.strip():
        raise ConfigError(f"{label} is empty; expected a model's config.json")
    try:
        data = files.loads_json(text, where=label, error=error)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{label} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label} must hold a JSON object, not {type(data).__name__}")
    return data


def load_model_spec(
    model: str,
    *,
    revision: str | None = None,
    offline: bool | None = None,
) -> ModelSpec:
    """Resolve ``model`` and parse its config.

    Args:
        model: a local directory or config.json, a catalog name (``llama-3.1-8b``), or a Hub id
            (``meta-llama/Llama-3.1-8B``). A Hub id that is in the catalog resolves offline unless
            ``revision`` asks for a specific Hub revision.
        revision: Hub branch, tag or commit.
        offline: force ``local_files_only`` for the Hub (default: ``HF_HUB_OFFLINE``).

    Returns:
        The parsed :class:`ModelSpec`.
    """
    if not model or not model.strip():
        raise ModelNotFoundError("no model given; pass a catalog name, hub id or path")
    path = _expand(model)
    if _exists(path) or model.startswith((".", "/", "~")) or model.endswith(".json"):
        return _load_local(path, model)
    found = catalog.resolve(model)
    if found is not None and revision is None:
        entry, note, served = found

        say(note)  # a same-geometry variant: say which entry stands in for it
        # the variant keeps its own name (commands serve it); the geometry is the entry's
        source = f"catalog: {entry.name}" + (" (same geometry)" if note else "")
        return parse_config(
            entry.config, name=served, source=source, preprocessor=entry.preprocessor
        )
    if found is not None:
        model = found[2]  # a catalog name or variant with --revision: that revision, Hub
    if HUB_ID.match(model) and len(model) <= MAX_HUB_ID:
        try:
            config_path = download_config(model, revision=revision, offline=offline)
        except RepoMissingError as exc:
            hint = catalog.suggest(model)
            if not hint:
                raise
            raise ModelNotFoundError(
                f"unknown model {model!r}: {exc.reason}; did you mean {', '.join(hint)}?"
            ) from None
        raw = read_json_config(config_path, f"{model}/config.json")
        label = f"hub:{model}" + (f"@{revision}" if revision else "")
        pre, video = None, None
        if isinstance(raw.get("vision_config"), Mapping):
            for filename in PROCESSOR_FILES:
                download_optional(model, filename, revision=revision, offline=offline)
            pre, video = processor_configs(raw, config_path.parent)
        return parse_config(
            raw, name=model, source=label, preprocessor=pre, video_preprocessor=video
        )
    hint = catalog.suggest(model)
    raise ModelNotFoundError(
        f"unknown model {_short_path(model)!r}: not a local path, catalog name or hub id "
        "(org/name)"
        + (
            f"; did you mean {', '.join(hint)}?"
            if hint
            else "; `kvplan models` lists the catalog, or pass a folder with its config.json"
        )
    )


def _short_path(model: str) -> str:
    """A model argument as messages show it: a 5,000-character one is not repeated whole."""
    return model if len(model) <= 200 else f"{model[:100]}...({len(model):,} characters)"


def _expand(model: str) -> Path:
    """``~`` expanded where it can be (``~nosuchuser/x`` stays as written)."""
    try:
        return Path(model).expanduser()
    except RuntimeError:
        return Path(model)


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a name the OS refuses (too long, NUL byte) does not."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _load_local(path: Path, model: str) -> ModelSpec:
    if not _exists(path):
        raise ModelNotFoundError(f"no such file or directory: {_short_path(model)}")
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.exists() or config_path.is_dir():  # a FIFO or device: the reader says
        raise ModelNotFoundError(f"{model} has no config.json")
    raw = read_json_config(config_path, str(config_path))
    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name:
        name = config_path.resolve().parent.name
    pre, video = processor_configs(raw, config_path.parent)
    return parse_config(
        raw,
        name=name,
        source=str(config_path),
        label=str(config_path),
        preprocessor=pre,
        video_preprocessor=video,
    )


PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json")


def processor_configs(
    raw: Mapping[str, Any], folder: Path
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A multimodal config's ``preprocessor_config.json`` and ``video_preprocessor_config.json``
    beside it (None each where absent or unreadable: the tokens per item are then asked for)."""
    if not isinstance(raw.get("vision_config"), Mapping):
        return None, None
    found: list[dict[str, Any] | None] = []
    for filename in PROCESSOR_FILES:
        path = folder / filename
        try:
            found.append(read_json_config(path, str(path)) if path.is_file() else None)
        except (ConfigError, ModelNotFoundError):
            found.append(None)
    return found[0], found[1]
