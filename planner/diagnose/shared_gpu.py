"""Another process on the GPU, as a vLLM log shows it: plan with the memory that was free.

vLLM states the free memory it measured at start-up in its refusal, ``Free memory on device
(60.87/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB)``
(vLLM 0.11.0 ``vllm/v1/worker/gpu_worker.py:185-195``; 0.33.0 ``vllm/v1/worker/utils.py:
761-770`` names the device, ``on device cuda:0 (...)``), and in 0.11's ``--kv-cache-memory``
line (``gpu_worker.py:373``). More than :data:`HELD_BYTES` missing from the total is another
process. The plan then runs with ``gpu_free_memory_bytes`` (``--gpu-free-memory``): the logged
free memory plus the CUDA context vLLM had created before it measured
(:data:`planner.budget.CUDA_CONTEXT_BYTES`), so the budget's start-up figure is the log's; and
the finding says what starts in it (:func:`what_fits`).

Worked example (the log above on an H100, vLLM 0.11.0): 79.19 - 60.87 = 18.32 GiB held;
``floor(60.87 / 79.19 x 100) / 100 = 0.76`` passes vLLM's start-up check, and the plan follows
the budget's lower fractions until the graphs and the sampler warm-up fit after the pool
(:func:`planner.free_memory.starting_gmu`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from planner.budget import CUDA_CONTEXT_BYTES
from planner.diagnose.log_figures import BootLog
from planner.diagnose.settings import PlanSettings
from planner.plan_types import WONT_START
from planner.units import GIB, format_gib

if TYPE_CHECKING:
    from planner.diagnose.findings import Finding
    from planner.plan_types import Plan

HELD_BYTES = GIB  # a CUDA context and the driver take about half of it: more is another process


def held_by_others(log: BootLog) -> int | None:
    """Bytes missing from the log's free memory at start-up beyond :data:`HELD_BYTES` (the
    whole gap, ``total - free``); None when the log states none or the GPU was idle."""
    free, total = log.startup_free_bytes, log.total_gpu_bytes
    if free is None or not total or total - free <= HELD_BYTES:
        return None
    return total - free


def with_free_memory(log: BootLog, settings: PlanSettings) -> PlanSettings:
    """``settings`` planned with the free memory the log states when another process held
    the GPU (``gpu_free_memory_bytes``, with its source); as they are when the GPU was idle
    or the command line gives its own."""
    if settings.serve.gpu_free_memory_bytes is not None or held_by_others(log) is None:
        return settings
    assert log.startup_free_bytes is not None
    free = log.startup_free_bytes + CUDA_CONTEXT_BYTES
    line = log.lines.get("startup_free_bytes", 0)
    return replace(
        settings,
        serve=settings.serve.but(gpu_free_memory_bytes=free),
        stated={**settings.stated, "gpu_free_memory_bytes": free},
        sources={
            **settings.sources,
            "gpu_free_memory_bytes": (
                f"log line {line} + {format_gib(CUDA_CONTEXT_BYTES)} GiB of CUDA context"
            ),
        },
    )


def what_fits(finding: Finding, p: Plan | None, plan_at: Callable[[float], Plan | None]) -> Finding:
    """The ``gpu-shared`` finding with what starts in the free memory: the fraction (the
    plan's own, when it starts; else the one :func:`planner.free_memory.starting_gmu` found,
    planned again with ``plan_at``) and the KV pool there. As it is when nothing starts."""
    if p is None:
        return finding
    fitted: Plan | None = p
    if p.outcome == WONT_START:
        gmu = next(
            (
                c["gpu_memory_utilization"]
                for c in p.vllm.start_changes
                if "gpu_memory_utilization" in c
            ),
            None,
        )
        fitted = (
            plan_at(float(gmu))
            if isinstance(gmu, float) and p.vllm.wont_start_term == "gpu_free_memory"
            else None
        )
    if fitted is None or fitted.outcome == WONT_START:
        return finding
    cap = fitted.vllm
    data = {
        **finding.data,
        "starting_gpu_memory_utilization": cap.gpu_memory_utilization,
        "starting_kv_cache_bytes": cap.available_kv_bytes,
        "starting_kv_cache_tokens": cap.kv_cache_size_tokens,
        "starting_max_concurrency": round(cap.max_concurrency, 2),
    }
    pool = (
        f"a KV pool of {format_gib(cap.available_kv_bytes)} GiB, "
        f"{cap.kv_cache_size_tokens:,} tokens, {cap.max_concurrency:.2f}x "
        f"max_model_len {cap.max_model_len:,}"
    )
    fix = [f for f in finding.fix if not f.startswith("gpu_memory_utilization ")]
    if p.outcome == WONT_START:
        fix.insert(
            0,
            f"gpu_memory_utilization {cap.gpu_memory_utilization:g} (starts in the free "
            f"memory: {pool})",
        )
    return replace(finding, data=data, fix=fix)
