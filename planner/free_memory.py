"""Another process on the GPU: the ``gpu_memory_utilization`` that starts in the memory left.

vLLM measures the free memory once at start-up and refuses when it is less than
``gpu_memory_utilization x total`` (vLLM 0.11.0 ``vllm/v1/worker/gpu_worker.py:185-195``:
``if self.init_snapshot.free_memory < self.requested_memory: raise ValueError("Free memory on
device (...) on startup is less than desired GPU memory utilization ...")``; vLLM 0.33.0
``vllm/v1/worker/utils.py:761-770``, ``request_memory``, the same test against
``ceil(total x gmu)``). The highest fraction that passes it, ``floor(free / total)`` to the
hundredth, can still fail after the pool is sized: the CUDA graphs and the sampler warm-up run in
``free - requested`` (:func:`planner.budget.post_allocation`), a few hundred MiB at that
fraction. :func:`starting_gmu` follows the budget's own lower fractions until one starts.

Worked example (Llama-3.1-8B on an H100, 79.18 GiB, 59.50 GiB free, vLLM 0.11.0, 8,192
tokens): ``floor(59.50 / 79.18 x 100) / 100 = 0.75`` passes the start-up check (59.39 GiB
requested), but leaves 0.11 GiB (plus the activation peak the warm-up reuses) for graphs and
the 1,024-row sampler warm-up; the budget then offers 0.74, which starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from planner.budget import VllmCapacity

GMU = "gpu_memory_utilization"
MAX_STEPS = 8  # each step lowers the fraction by at least 0.01


def _lower_gmu(cap: VllmCapacity) -> float | None:
    """The lower fraction a refusal offers first (None: it offers none)."""
    for change in cap.start_changes:
        value = change.get(GMU)
        if isinstance(value, float) and 0 < value < cap.gpu_memory_utilization:
            return value
    return None


def starting_gmu(
    cap: VllmCapacity, capacity_at: Callable[[float], VllmCapacity]
) -> tuple[float, VllmCapacity] | None:
    """For a plan refused by vLLM's free-memory check (``cap.wont_start_term ==
    "gpu_free_memory"``): the highest fraction the budget offers that starts, and the budget
    there (``capacity_at(gmu)``); None when the refusal is another, or no fraction starts
    (one ``max_model_len`` request does not fit what is free, say)."""
    if cap.wont_start_term != "gpu_free_memory":
        return None
    gmu = _lower_gmu(cap)
    for _ in range(MAX_STEPS):
        if gmu is None:
            return None
        at = capacity_at(gmu)
        if at.fits:
            return gmu, at
        gmu = _lower_gmu(at)
    return None


def with_starting_gmu(
    cap: VllmCapacity, capacity_at: Callable[[float], VllmCapacity]
) -> VllmCapacity:
    """``cap`` whose first change is the fraction that starts (:func:`starting_gmu`), not
    the one that only passes the start-up check; ``cap`` as it is otherwise."""
    found = starting_gmu(cap, capacity_at)
    if found is None:
        return cap
    gmu, _ = found
    rest = tuple(c for c in cap.start_changes if GMU not in c)
    return replace(cap, start_changes=({GMU: gmu}, *rest))
