"""vLLM >= 0.34's extensible KV cache (``--disable-extensible-kv-cache`` turns it off): the pool
sized after warm-up and CUDA-graph capture from the memory measured then
(:class:`planner.budget.MeasuredSizing`), and a plan that names the flag for a release without
it."""

from __future__ import annotations

from planner.features.record import FeatureRecord, PlanContext
from planner.units import format_gib

NAME = "measured_pool"


def active(ctx: PlanContext) -> bool:
    s = ctx.dep.settings
    return s.measured_kv_sizing or s.disable_extensible_kv_cache


def contribute(ctx: PlanContext) -> FeatureRecord:
    s, cap = ctx.dep.settings, ctx.cap
    version = s.vllm_version or "this release"
    notes: list[str] = []
    warnings: list[str] = []
    flags: tuple[str, ...] = ()
    if cap.measured_margin_bytes is not None:
        notes.append(
            f"vLLM {version} sizes the KV pool after warm-up and CUDA-graph capture from the "
            f"memory it measures (its extensible KV cache): gpu_memory_utilization "
            f"{cap.gpu_memory_utilization:g} is a cap, and it keeps the activation peak, the "
            f"graph estimate and a margin of {format_gib(cap.measured_margin_bytes)} GiB free "
            "(--disable-extensible-kv-cache sizes it from the profile run as before)"
        )
    if s.disable_extensible_kv_cache:
        if s.rules.extensible_kv_cache:
            flags = ("--disable-extensible-kv-cache",)
        else:
            warnings.append(
                f"--disable-extensible-kv-cache: vLLM {version} has no extensible KV cache "
                "(0.34 on); it changes nothing, and the command leaves it out"
            )
    return FeatureRecord(name=NAME, flags=flags, notes=tuple(notes), warnings=tuple(warnings))
