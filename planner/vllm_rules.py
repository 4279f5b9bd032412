"""What changes with the vLLM release: the defaults and rules kvplan's budget follows per
version (``--vllm-version``; ``diagnose`` reads the version from the log).

Each :class:`VllmRules` row holds from its ``since`` release until the next row; the newest
row is what kvplan assumes when no version is given. Read in vLLM's released sources
(0.8.5-0.33.0):

- ``default_gmu``: ``CacheConfig.gpu_memory_utilization``: 0.9 through 0.19.1, 0.92 from
  0.20.0 (``vllm/config/cache.py``);
- ``subtracts_cuda_graphs``: ``Worker.determine_available_memory`` subtracts the profiled
  CUDA-graph estimate from the KV budget by default from 0.20.0
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` "1" in ``envs.py``; opt-in in 0.18-0.19, and
  vLLM's own log text says "default since v0.21.0"); before, graphs were captured after the
  KV cache was sized and cost it nothing;
- ``a100_small``: A100s take the small-GPU batch defaults whatever their memory, from 0.9.0
  (``"a100" not in device_name``, PR #17885);
- ``large_gpu_tier``: GPUs of >= 160 GiB get their own (largest) batch defaults, from 0.28.0;
- ``one_line_capacity_log``: "GPU KV cache size: N tokens, Maximum concurrency for L tokens
  per request: X.XXx" is one line from 0.28.0 (``update_kv_cache_capacity``), two before.

The scheduler rules :mod:`planner.simulate` replays (``SimConfig`` takes them from here):

- ``async_scheduling``: ``SchedulerConfig.async_scheduling`` defaults to None from 0.14.0,
  which ``VllmConfig.__post_init__`` (``vllm/config/vllm.py``) turns on unless the runner is
  ``pooling`` (0.33), pipeline parallelism, a non-EAGLE speculator or an executor without
  support rules it out; through 0.13.0 it defaulted to False. The scheduler then plans step
  ``s + 1`` before step ``s``'s output is processed (``EngineCore.step_with_batch_queue``);
- ``reserve_full_isl``: ``SchedulerConfig.scheduler_reserve_full_isl``, True by default from
  0.19.0 (absent through 0.18.0): ``Scheduler.schedule`` admits a waiting or preempted request
  only when ``KVCacheManager.can_fit_full_sequence`` (0.19-0.32; from 0.33
  ``allocate_slots(full_sequence_must_fit=True)``) finds free blocks for all of its
  ``num_tokens``, not just the first chunk;
- ``prepend_uncached_free``: ``BlockPool.free_blocks`` puts freed blocks without a block
  hash (every block when prefix caching is off) at the front of the free queue
  (``FreeKVCacheBlockQueue.prepend_n``), cached ones at the back, from 0.24.0 (0.22.0 appended
  all of them; 0.23 was not checked).

The batch defaults themselves (``EngineArgs.get_batch_defaults``, 0.33), by usage context —
``vllm serve`` (``OPENAI_API_SERVER``) or the ``LLM`` class (``LLM_CLASS``):

=================================  ====================  ====================
GPU                                ``vllm serve``        ``LLM`` class
=================================  ====================  ====================
>= 160 GiB (B200, B300)            16,384 / 1,024        16,384 / 1,024
>= 70 GiB, not an A100 (H100/H200) 8,192 / 1,024         16,384 / 1,024
otherwise (and A100s, unknown)     2,048 / 256           8,192 / 256
=================================  ====================  ====================

(max_num_batched_tokens / max_num_seqs). Then vLLM caps the token budget at
``max_num_seqs x max_model_len`` and ``max_num_seqs`` at the token budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.errors import UsageError

GIB = 1 << 30
Entrypoint = Literal["serve", "llm"]
Runner = Literal["generate", "pooling"]
ENTRYPOINTS: tuple[Entrypoint, ...] = ("serve", "llm")
RUNNERS: tuple[Runner, ...] = ("generate", "pooling")


@dataclass(frozen=True)
class VllmRules:
    """The version-dependent rules of one range of vLLM releases (see the module docstring)."""

    since: tuple[int, ...]
    default_gmu: float
    subtracts_cuda_graphs: bool
    a100_small: bool
    large_gpu_tier: bool
    one_line_capacity_log: bool
    async_scheduling: bool = False
    reserve_full_isl: bool = False
    prepend_uncached_free: bool = False

    @property
    def name(self) -> str:
        return ".".join(str(p) for p in self.since)


# Oldest first: the first release where each rule holds (module docstring). kvplan models the
# V1 engine only, which 0.8 made the default.
_ASYNC = {"async_scheduling": True}
_ISL = {**_ASYNC, "reserve_full_isl": True}
_PREPEND = {**_ISL, "prepend_uncached_free": True}
RULES: tuple[VllmRules, ...] = (
    VllmRules((0, 8, 5), 0.9, False, False, False, False),
    VllmRules((0, 9, 0), 0.9, False, True, False, False),
    VllmRules((0, 14, 0), 0.9, False, True, False, False, **_ASYNC),
    VllmRules((0, 19, 0), 0.9, False, True, False, False, **_ISL),
    VllmRules((0, 20, 0), 0.92, True, True, False, False, **_ISL),
    VllmRules((0, 24, 0), 0.92, True, True, False, False, **_PREPEND),
    VllmRules((0, 28, 0), 0.92, True, True, True, True, **_PREPEND),
)
NEWEST_VERSION = "0.33.0"  # the newest release whose sources kvplan was checked against
NEWEST = RULES[-1]


def parse_version(text: str) -> tuple[int, ...]:
    """A release as a tuple: ``"0.10.1.1"`` -> (0, 10, 1, 1), ``"v0.33.0"`` -> (0, 33, 0),
    ``"0.11.0rc2"`` -> (0, 11, 0)."""
    raw = text.strip().lower().removeprefix("v")
    parts: list[int] = []
    for piece in raw.split(".")[:4]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):  # "0rc2", "0+cu128": the rest is a pre/local tag
            break
    if len(parts) < 2:
        raise UsageError(f"--vllm-version: not a vLLM version: {text!r} (e.g. 0.33.0)")
    return tuple(parts)


def refuse_unmodelled(version: str | None) -> None:
    """Refuse a ``--vllm-version`` older than the oldest release kvplan models (the V1 engine,
    from 0.8.5): its V0 engine sizes the cache by other rules, so a plan would print V1 log
    lines for it. A boot log of such a release is still read (``kvplan diagnose``)."""
    if version is None:
        return
    oldest = RULES[0]
    if parse_version(version) < oldest.since:
        raise UsageError(
            f"--vllm-version {version}: kvplan models vLLM's V1 engine from {oldest.name} "
            f"on; give --vllm-version {oldest.name} or newer"
        )


def rules_for(version: str | None) -> VllmRules:
    """The rules of ``version`` (the newest kvplan knows when None). A version older than
    the oldest row gets the oldest row; a newer one the newest."""
    if version is None:
        return NEWEST
    wanted = parse_version(version)
    chosen = RULES[0]
    for rules in RULES:
        if rules.since <= wanted:
            chosen = rules
    return chosen


def batch_defaults(
    rules: VllmRules,
    *,
    gpu_memory_bytes: int | None,
    is_a100: bool,
    entrypoint: Entrypoint = "serve",
) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) defaults for a GPU of
    ``gpu_memory_bytes`` (None: no GPU known, vLLM's small defaults), before the caps."""
    llm = entrypoint == "llm"
    memory = gpu_memory_bytes or 0
    if rules.large_gpu_tier and memory >= 160 * GIB:
        return 16384, 1024
    if memory >= 70 * GIB and not (is_a100 and rules.a100_small):
        return (16384 if llm else 8192), 1024
    return (8192 if llm else 2048), 256
