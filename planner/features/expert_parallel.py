"""Expert parallelism over more than one GPU (``--enable-expert-parallel``): the all-to-all
backend's buffer outside torch's allocator (:func:`planner.budget.all2all_buffer_bytes`)."""

from __future__ import annotations

from planner.budget import all2all_buffer_bytes
from planner.features.record import FeatureRecord, PlanContext, flags_of

NAME = "expert_parallel"


def active(ctx: PlanContext) -> bool:
    s = ctx.dep.settings
    return s.enable_expert_parallel and s.gpus > 1


def contribute(ctx: PlanContext) -> FeatureRecord:
    backend = ctx.dep.settings.all2all_backend
    if backend.startswith("deepep"):
        note = (
            f"{backend}: 1 GiB of DeepEP NVLink buffer per GPU is counted in "
            "non-torch memory (VLLM_DEEPEP_BUFFER_SIZE_MB); across nodes an RDMA buffer "
            "comes on top: keep it free with --headroom"
        )
    else:
        note = (
            f"expert parallelism with --all2all-backend {backend}: no all-to-all "
            "buffer counted; DeepEP backends reserve 1 GiB per GPU (--all2all-backend "
            "deepep_high_throughput counts it)"
        )
    return FeatureRecord(
        name=NAME,
        non_torch_bytes=all2all_buffer_bytes(backend, True),
        flags=flags_of(ctx, names=("enable_expert_parallel", "all2all_backend", "enable_eplb")),
        notes=(note,),
    )
