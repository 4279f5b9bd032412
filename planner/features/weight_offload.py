"""Offloading weights to the CPU (``--cpu-offload-gb``): the bytes moved off each GPU, pinned in
host RAM, and whether the release offloads at all (:mod:`planner.offload`)."""

from __future__ import annotations

from planner.features.record import FeatureRecord, PlanContext, flags_of
from planner.offload import offload_caveat

NAME = "weight_offload"


def active(ctx: PlanContext) -> bool:
    return bool(ctx.dep.settings.cpu_offload_gb)


def contribute(ctx: PlanContext) -> FeatureRecord:
    caveat = offload_caveat(ctx.dep.settings)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    if caveat is not None:
        text, is_warning = caveat
        warnings, notes = ((text,), ()) if is_warning else ((), (text,))
    return FeatureRecord(
        name=NAME,
        weights_bytes=-ctx.weights.offloaded_bytes_per_rank,
        host_ram={"pinned_weights": ctx.weights.offloaded_bytes},
        flags=flags_of(ctx, names=("cpu_offload_gb",)),
        notes=notes,
        warnings=warnings,
    )
