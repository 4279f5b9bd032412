"""The bundled offline catalog of popular models (configs only, built by tools/build_catalog.py).

Names are forgiving: ``llama-3.1-8b``, ``Llama-3.1-8B`` and ``meta-llama/Llama-3.1-8B`` all
resolve to the same entry, with no network and no transformers import.
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hub_id: str
    provenance: str
    aliases: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


@functools.lru_cache(maxsize=1)
def entries() -> tuple[CatalogEntry, ...]:
    """All catalog entries, in catalog order."""
    text = resources.files("planner").joinpath("data/catalog.json").read_text(encoding="utf-8")
    return tuple(
        CatalogEntry(
            name=m["name"],
            hub_id=m["hub_id"],
            provenance=m["provenance"],
            aliases=tuple(m.get("aliases", ())),
            config=m["config"],
        )
        for m in json.loads(text)["models"]
    )


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in entries():
        for key in (entry.name, entry.hub_id, *entry.aliases):
            index.setdefault(key.lower(), entry)
    return index


def lookup(model: str) -> CatalogEntry | None:
    """The entry ``model`` names (case-insensitive name, alias or hub id), else None."""
    key = model.strip().lower()
    return _index().get(key)


def suggest(model: str, limit: int = 3) -> list[str]:
    """Close catalog names for an unknown model, for the error message."""
    key = model.strip().lower().split("/")[-1]
    names = [e.name for e in entries()]
    return difflib.get_close_matches(key, names, n=limit, cutoff=0.6)
