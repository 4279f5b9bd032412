"""`kvplan models`: one row per catalog model with its cache geometry."""

from __future__ import annotations

from dataclasses import dataclass

from planner.kv_layout import estimate
from planner.model import catalog
from planner.model.config import parse_config


@dataclass(frozen=True, kw_only=True)
class ModelRow:
    name: str
    hub_id: str
    model_type: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    attention_type: str
    kinds: list[str]
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    max_model_len: int
    aliases: list[str]
    provenance: str


def list_models(match: str | None = None) -> list[ModelRow]:
    """Every catalog model, with vLLM's KV bytes per token at TP 1 and ``--kv-cache-dtype auto``,
    by family, then size (:func:`planner.model.catalog.sort_key`).

    Args:
        match: keep only models whose name, hub id or family contains it (any case).
    """
    rows = []
    needle = (match or "").strip().lower()
    for entry in sorted(catalog.entries(), key=lambda e: catalog.sort_key(e.name)):
        family = catalog.family_and_size(entry.name)[0]
        if needle and not any(
            needle in text.lower() for text in (entry.name, entry.hub_id, family)
        ):
            continue
        spec = parse_config(entry.config, name=entry.hub_id, source="catalog")
        est = estimate(spec, batch_sizes=())
        rows.append(
            ModelRow(
                name=entry.name,
                hub_id=entry.hub_id,
                model_type=spec.model_type,
                num_layers=spec.num_layers,
                num_kv_heads=spec.num_kv_heads,
                head_dim=spec.head_dim,
                attention_type=spec.attention_type,
                kinds=list(spec.kinds),
                kv_bytes_per_token=est.kv_bytes_per_token,
                state_bytes_per_sequence=est.state_bytes_per_sequence,
                max_model_len=spec.max_model_len,
                aliases=list(entry.aliases),
                provenance=entry.provenance,
            )
        )
    return rows
