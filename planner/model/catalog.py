"""The bundled offline catalog of popular models (configs only, built by tools/build_catalog.py).

Names are forgiving: ``llama-3.1-8b``, ``Llama-3.1-8B`` and ``meta-llama/Llama-3.1-8B`` all
resolve to the same entry, with no network and no transformers import.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any


@dataclass(frozen=True, kw_only=True)
class CatalogEntry:
    name: str
    hub_id: str
    provenance: str
    aliases: tuple[str, ...] = ()
    variants: tuple[tuple[str, str], ...] = ()  # (hub id, short name) of same-geometry variants
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # a multimodal model's preprocessor_config.json (the keys that size an item), when shared
    preprocessor: dict[str, Any] | None = field(default=None, compare=False, hash=False, repr=False)


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
            variants=tuple((v["hub_id"], v["name"]) for v in m.get("variants", ())),
            config=m["config"],
            preprocessor=m.get("preprocessor"),
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


@functools.lru_cache(maxsize=1)
def _variant_index() -> dict[str, tuple[CatalogEntry, str]]:
    index: dict[str, tuple[CatalogEntry, str]] = {}
    for entry in entries():
        for hub_id, name in entry.variants:
            for key in (hub_id, name):
                index.setdefault(key.lower(), (entry, hub_id))
    return index


def resolve(model: str) -> tuple[CatalogEntry, str, str] | None:
    """The entry ``model`` names, a note when it is a variant the catalog stands in for, and
    the hub id to serve: the variant's own (``meta-llama/Llama-3.1-8B-Instruct``: its weights
    are what the user deploys; only the geometry is the entry's), else the entry's.

    A variant (``llama-3.1-8b-instruct``, ``meta-llama/Llama-3.1-8B-Instruct``) resolves only
    when tools/build_catalog.py checked that its layers, heads, KV heads, head size, hidden
    size, vocabulary, context length and dtype equal the entry's; the note says so.
    """
    entry = lookup(model)
    if entry is not None:
        key = model.strip().lower()
        if key in (entry.name.lower(), entry.hub_id.lower()):
            return entry, "", entry.hub_id
        # a short alias (qwen2.5-7b): the entry is one variant of that name; say which
        note = f"{model.strip()} is planned as {entry.hub_id} (kvplan's catalog entry {entry.name})"
        return entry, note, entry.hub_id
    found = _variant_index().get(model.strip().lower())
    if found is None:
        return None
    entry, hub_id = found
    note = (
        f"{hub_id} is not in the catalog; planning it with {entry.name}'s config "
        f"({entry.hub_id}), which has the same layers, heads, KV heads, head size, hidden size, "
        "vocabulary, context and dtype"
    )
    return entry, note, hub_id


# "8b", "1.5b", "8x7b", "0.6b", "17b-16e": the parameter count in a model name.
_SIZE = re.compile(r"(?:^|-)(\d+x)?(\d+(?:\.\d+)?)b(?=-|$)")
_VARIANT_WORDS = {"instruct", "it", "chat", "hf", "base", "thinking", "bf16", "fp8", "nvfp4"}


def family_and_size(name: str) -> tuple[str, float | None]:
    """A model name's family and parameter count in billions: ``llama-3.1-8b-instruct`` ->
    (``llama-3.1``, 8.0); ``mixtral-8x7b-v0.1`` -> (``mixtral``, 56.0); ``deepseek-v3`` ->
    (``deepseek-v3``, None)."""
    stem = name.strip().lower().split("/")[-1].removeprefix("meta-")
    match = _SIZE.search(stem)
    if match is None:
        words = [w for w in stem.split("-") if w not in _VARIANT_WORDS]
        return "-".join(words) or stem, None
    experts = int(match.group(1)[:-1]) if match.group(1) else 1
    return stem[: match.start()], experts * float(match.group(2))


def sort_key(name: str) -> tuple[str, float, str]:
    """Catalog order: family, then size (sizeless last), then name."""
    family, size = family_and_size(name)
    return family, float("inf") if size is None else size, name


def suggest(model: str, limit: int = 3) -> list[str]:
    """Close catalog names (hub ids for a hub id) for an unknown model, for the error message:
    the same family and size first, then the same family, then the rest by similarity; a
    different size never comes before the same size."""
    text = model.strip()
    as_hub = "/" in text
    key = text.lower() if as_hub else text.lower().split("/")[-1]
    family, size = family_and_size(key)
    scored: list[tuple[int, float, str]] = []
    for entry in entries():
        names = [(entry.hub_id, entry.name)] + [(h, n) for h, n in entry.variants]
        for hub_id, name in names:
            shown = hub_id if as_hub else name
            ratio = difflib.SequenceMatcher(None, key, shown.lower()).ratio()
            fam, sz = family_and_size(name)
            rank = 2
            if fam == family and family:
                rank = 0 if sz == size else 1
            if rank == 2 and ratio < 0.6:
                continue
            if rank < 2 and sz is not None and size is not None and sz != size and ratio < 0.6:
                continue
            scored.append((rank, -ratio, shown))
    scored.sort()
    best = min((r for r, _, _ in scored), default=2)
    out: list[str] = []
    for rank, _, shown in scored:
        if shown in out or (best == 0 and rank > 0 and len(out) >= 1):
            continue
        out.append(shown)
    return out[:limit]
