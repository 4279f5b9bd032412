"""The CPU KV tier (``--kv-offloading-size``, ``--kv-offloading-backend``): the blocks it
holds beside the GPU pool and the host RAM it pins (:mod:`planner.offload`)."""

from __future__ import annotations

from planner.features.record import FeatureRecord, PlanContext, flags_of
from planner.offload import kv_tier

NAME = "kv_offload"


def active(ctx: PlanContext) -> bool:
    return ctx.dep.settings.kv_offloading_size is not None


def contribute(ctx: PlanContext) -> FeatureRecord:
    s, est = ctx.dep.settings, ctx.est
    tier = kv_tier(est, ctx.cap, s)
    notes: list[str] = []
    warnings: list[str] = []
    if tier is not None and tier.backend == "lmcache":
        notes.append(
            "--kv-offloading-backend lmcache: the CPU tier's capacity is the LMCache server's "
            "own setting (vLLM does not pass --kv-offloading-size on); host RAM here counts "
            "none of it"
        )
    elif tier is not None and tier.mirrors_only:
        warnings.append(
            f"--kv-offloading-size {s.kv_offloading_size:g}: the CPU tier holds "
            f"{tier.cpu_blocks:,} blocks, no more than the GPU pool's {tier.gpu_blocks:,}, so it "
            "only mirrors what the GPU already holds (vLLM's recipes: size it above the GPU "
            "pool)"
        )
    if tier is not None and any(g.is_state for g in (est.vllm.groups if est.vllm else [])):
        notes.append(
            "KV offloading on a hybrid model: vLLM splits the CPU tier per KV-cache group "
            "(vllm#56871); the token figure is blocks x block size"
        )
    # the native tier is each DP engine's own; LMCache's lives in its server
    native = tier is not None and tier.backend == "native"
    return FeatureRecord(
        name=NAME,
        host_ram={"kv_offload": tier.size_bytes * s.dp if tier is not None and native else 0},
        flags=flags_of(ctx, names=("kv_offloading_size", "kv_offloading_backend")),
        notes=tuple(notes),
        warnings=tuple(warnings),
        plan_fields={"kv_tier": tier},
    )
