"""The other engines' pools, as each sizes it (:class:`EngineCapacity`): SGLang's
mem_fraction_static and max_running_requests, TensorRT-LLM's free-memory fraction,
transformers' naive contiguous cache; vLLM's is :func:`planner.budget.vllm_budget`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.kv_layout import KVEstimate
from planner.units import GIB, MIB

if TYPE_CHECKING:
    pass
from planner.budget import non_torch_bytes


@dataclass(frozen=True)
class EngineCapacity:
    """Capacity under SGLang, TensorRT-LLM or transformers, with the knob each engine uses."""

    engine: str
    setting: str  # e.g. "mem_fraction_static=0.83"
    fraction: float | None  # the number in ``setting`` (None: transformers has no knob)
    available_kv_bytes: int
    max_total_tokens: int
    max_running_requests: int
    max_concurrency: float
    note: str


def sglang_mem_fraction_static(
    gpu_memory_bytes: int, tp: int = 1, pp: int = 1, mla: bool = False
) -> float:
    """SGLang 0.5.23 ``handle_gpu_memory_settings`` default (ENGINES.md §2.3).

    Example: H100 reporting 81,559 MiB, TP 1, non-MLA -> reserved 13,904 MiB -> 0.83.
    """
    gpu_mib = gpu_memory_bytes / MIB
    gib = gpu_mib / 1024
    if gib < 20:
        chunk, max_bs = 2048, 8
    elif gib < 35:
        chunk, max_bs = 4096, 48 if tp < 4 else 160
    elif gib < 60:
        chunk, max_bs = 4096, 32 if tp < 4 else 160
    elif gib < 160:
        chunk, max_bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, max_bs = 16384, 512
    activation_tokens = max(chunk, 2048)
    # NOTE: ~58 prefill graph sizes at 8 MiB each for non-MLA models (SGLang's H100 example).
    graphs = 2 * max_bs + (1536 if mla else 8 * 58)
    reserved = 512 + 1.5 * activation_tokens + tp * pp / 8 * 1024 + graphs
    if gib > 60:
        reserved = max(reserved, 10240)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def sglang_capacity(
    est: KVEstimate,
    *,
    gpu_memory_bytes: int,
    weights_bytes: int,
    mem_fraction_static: float | None = None,
    context_len: int | None = None,
) -> EngineCapacity:
    """SGLang: KV = free_before_weights * mem_fraction_static - weights (ENGINES.md §2.1)."""
    mla = est.attention_type == "MLA"
    mfs = mem_fraction_static or sglang_mem_fraction_static(
        gpu_memory_bytes, est.tensor_parallel_size, est.pipeline_parallel_size, mla
    )
    free_before = gpu_memory_bytes - GIB // 2  # CUDA context and NCCL before the weights load
    available = int(free_before * mfs) - weights_bytes
    cell = est.kv_bytes_per_token
    tokens = max(0, available // cell) if cell and available > 0 else 0
    tokens -= tokens % max(est.block_size, 1)
    length = context_len or est.max_model_len
    estimated = min(max(int(tokens / length * 512), 2048), 4096)
    running = min(estimated, tokens // 2)
    return EngineCapacity(
        engine="sglang",
        setting=f"mem_fraction_static={mfs}",
        fraction=mfs,
        available_kv_bytes=available,
        max_total_tokens=tokens,
        max_running_requests=running,
        max_concurrency=tokens / length if length else 0.0,
        note="max_total_num_tokens = (free x mem_fraction_static - weights) // cell size",
    )


def trtllm_capacity(
    est: KVEstimate,
    *,
    gpu_memory_bytes: int,
    weights_bytes: int,
    activation_bytes: int,
    free_gpu_memory_fraction: float = 0.9,
) -> EngineCapacity:
    """TRT-LLM: the fraction applies to memory left after weights and activations (§3.2)."""
    free = (
        gpu_memory_bytes
        - weights_bytes
        - activation_bytes
        - non_torch_bytes(est.tensor_parallel_size, est.pipeline_parallel_size)
    )
    available = int(max(0, free) * free_gpu_memory_fraction)
    per_token = est.kv_bytes_per_token
    tokens = available // per_token if per_token else 0
    blocks = tokens // est.block_size
    per_seq = max(1, -(-est.kv_bytes_per_sequence // max(1, est.block_size * per_token)))
    return EngineCapacity(
        engine="trtllm",
        setting=f"free_gpu_memory_fraction={free_gpu_memory_fraction}",
        fraction=free_gpu_memory_fraction,
        available_kv_bytes=available,
        max_total_tokens=blocks * est.block_size,
        max_running_requests=blocks // per_seq,
        max_concurrency=blocks / per_seq,
        note=f"{blocks:,} blocks of {est.block_size} tokens",
    )


def hf_capacity(
    est: KVEstimate, *, gpu_memory_bytes: int, weights_bytes: int, activation_bytes: int
) -> EngineCapacity:
    """transformers ``generate`` with a contiguous cache pre-allocated at max length."""
    available = gpu_memory_bytes - weights_bytes - activation_bytes
    per_seq = est.request_bytes
    batch = available // per_seq if per_seq and available > 0 else 0
    return EngineCapacity(
        engine="hf",
        setting="contiguous cache, max_cache_len = max_model_len",
        fraction=None,
        available_kv_bytes=available,
        max_total_tokens=batch * est.max_model_len,
        max_running_requests=batch,
        max_concurrency=float(batch),
        note="every sequence reserves max_model_len tokens up front (the naive baseline)",
    )
