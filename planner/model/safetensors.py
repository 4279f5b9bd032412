"""Reading one safetensors file's header (never its tensors): the fetch stage's part of weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import ConfigError

MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (reads at most the header, never tensors)."""
    try:
        with files.open_input(path, "safetensors file", ConfigError) as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ConfigError(f"{path} is not a safetensors file (too short)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER_BYTES:
                raise ConfigError(f"{path}: safetensors header of {length:,} bytes is implausible")
            text = fh.read(length).decode("utf-8")
        header = files.loads_json(text, where=f"{path} (header)", error=ConfigError)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ConfigError(f"{path}: safetensors header is not valid JSON") from None
    except RecursionError:
        raise ConfigError(f"{path}: safetensors header is nested too deeply") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: safetensors header is not a JSON object")
    return header
