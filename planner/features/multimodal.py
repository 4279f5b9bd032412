"""A multimodal model's tower (:mod:`planner.multimodal`): the tower's weights, the encoder's
share of vLLM's profile run, the processor caches in host RAM, and the levers that buy KV
back (video off, one image per prompt, smaller images, text only)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.budget import VllmCapacity, mm_profile
from planner.deployment import Deployment, as_flags
from planner.errors import UsageError
from planner.features.record import Capacity, FeatureRecord, PlanContext, flags_of
from planner.kv_layout import estimate
from planner.multimodal import MMLimits, limits_of, parse_processor_kwargs, tokens_per_item
from planner.offload import is_multimodal, mm_processor_cache_bytes
from planner.weights import for_deployment

NAME = "multimodal"


@dataclass(frozen=True, kw_only=True)
class MMLever:
    """One multimodal setting turned down and what it buys (JSON ``mm.levers[]``): the KV
    pool in tokens with it, and the tokens gained over the user's settings."""

    change: str
    changes: dict[str, object]
    kv_cache_size_tokens: int
    kv_tokens_gained: int
    max_concurrency: float
    num_gpu_blocks: int
    fits: bool


def active(ctx: PlanContext) -> bool:
    return ctx.dep.spec.vision is not None or is_multimodal(ctx.dep)


def contribute(ctx: PlanContext) -> FeatureRecord:
    mm = mm_profile(ctx.at_length, ctx.est, ctx.weights)
    levers = levers_of(ctx.at_length, ctx.cap, ctx.capacity) if mm is not None else []
    return FeatureRecord(
        name=NAME,
        weights_bytes=mm.tower_weights_bytes if mm is not None else 0,
        activation_bytes=mm.activation_bytes if mm is not None else 0,
        host_ram={"mm_processor_cache": mm_processor_cache_bytes(ctx.dep)},
        flags=flags_of(ctx, "multimodal"),
        notes=tuple(mm.notes) if mm is not None else (),
        plan_fields={"mm": mm, "mm_levers": levers},
    )


def levers_of(dep: Deployment, cap: VllmCapacity, capacity: Capacity) -> list[MMLever]:
    """A multimodal model's levers, each planned as its own deployment: video off (while it
    is on), one image per prompt, a smaller image (Qwen-VL ``max_pixels`` of 1,280 tokens),
    and text only (``--language-model-only``); those that buy KV tokens, most first."""
    s, tower = dep.settings, dep.spec.vision
    if tower is None or s.language_model_only:
        return []
    limits = limits_of(tower, s)
    if not any(limits.values()):
        return []
    given = dict(s.limit_mm_per_prompt.counts) if s.limit_mm_per_prompt else {}
    options = dict(s.limit_mm_per_prompt.options) if s.limit_mm_per_prompt else {}

    def limited(**counts: int) -> MMLimits:
        merged = {**given, **counts}  # the user's limits, with this one changed
        kept = tuple((m, o) for m, o in options.items() if merged.get(m))
        return MMLimits(counts=tuple(merged.items()), options=kept)

    changes: list[dict[str, object]] = []
    if limits.get("video"):
        changes.append({"limit_mm_per_prompt": limited(video=0)})
    if limits.get("image", 0) > 1:
        changes.append({"limit_mm_per_prompt": limited(image=1)})
    if tower.unit:
        found = tokens_per_item(tower, s, cap.max_model_len).tokens.get("image")
        smaller = 1280 * tower.unit * tower.unit  # Qwen's documented 1,280-token image
        if found is not None and found > 1280:
            kwargs = dict(s.mm_processor_kwargs.data) if s.mm_processor_kwargs else {}
            kwargs["max_pixels"] = smaller
            changes.append({"mm_processor_kwargs": parse_processor_kwargs(kwargs)})
    changes.append({"language_model_only": True})
    out = []
    for change in changes:
        alt = dep.with_settings(**change)
        try:
            e = estimate(alt.spec, alt.settings, alt.gpu, batch_sizes=())
            c = capacity(alt, e, for_deployment(alt))
        except UsageError:
            continue
        gained = c.kv_cache_size_tokens - cap.kv_cache_size_tokens
        if gained <= 0 and c.fits == cap.fits:
            continue
        out.append(
            MMLever(
                change=as_flags(change),
                changes={
                    k: (json.loads(v.as_json()) if hasattr(v, "as_json") else v)
                    for k, v in change.items()
                },
                kv_cache_size_tokens=c.kv_cache_size_tokens,
                kv_tokens_gained=gained,
                max_concurrency=round(c.max_concurrency, 2),
                num_gpu_blocks=c.num_gpu_blocks,
                fits=c.fits,
            )
        )
    return out
