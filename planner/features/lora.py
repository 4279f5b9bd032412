"""LoRA (``--enable-lora``): the stacked adapter buffers vLLM counts as weights, and every
worker's CPU cache of whole adapters (:mod:`planner.lora`)."""

from __future__ import annotations

from planner.features.record import FeatureRecord, PlanContext, flags_of
from planner.lora import buffers, lora_notes

NAME = "lora"


def active(ctx: PlanContext) -> bool:
    return ctx.dep.settings.enable_lora


def contribute(ctx: PlanContext) -> FeatureRecord:
    s = ctx.dep.settings
    b = buffers(ctx.dep.spec, s)
    notes, warnings = lora_notes(ctx.dep, b)
    return FeatureRecord(
        name=NAME,
        weights_bytes=ctx.weights.lora_bytes_per_rank,
        host_ram={"lora_cpu_cache": b.max_cpu_loras * b.adapter_bytes * s.tp * s.pp * s.dp},
        flags=flags_of(ctx, "lora"),
        notes=tuple(notes),
        warnings=tuple(warnings),
        plan_fields={"lora": b},
    )
