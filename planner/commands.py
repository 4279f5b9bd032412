"""Ready-to-paste engine commands for a plan, each flag spelled as that engine's parser takes it."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.recommend import Recommended

_SGLANG_KV = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
# vLLM's --kv-cache-dtype spells the 16-bit caches out (CacheConfig: bfloat16, float16).
_VLLM_KV = {"bf16": "bfloat16", "fp16": "float16"}


def engine_commands(
    model: str,
    rec: Recommended,
    *,
    tp: int,
    pp: int,
    kv_cache_dtype: str,
    mem_fraction: str,
    settings: ServeSettings | None = None,
    vllm_default_max_num_seqs: int | None = None,
) -> dict[str, str]:
    """Ready-to-paste launch commands, flags spelled as each engine accepts them. The vLLM
    command carries every setting the plan assumed that is not vLLM's default (``settings``):
    a fixed KV pool as ``--kv-cache-memory-bytes <bytes>`` (instead of the utilisation), the
    token budget, eager mode, prefix caching off. ``--max-num-seqs`` is left out only when
    the plan keeps vLLM's own default (``vllm_default_max_num_seqs``, which depends on the GPU)
    and the user gave none."""
    vllm = ["vllm", "serve", model, "--tensor-parallel-size", str(tp)]
    if pp > 1:
        vllm += ["--pipeline-parallel-size", str(pp)]
    vllm += ["--max-model-len", str(rec.max_model_len)]
    # vLLM's default max_num_seqs is left to vLLM (it depends on the GPU); any other is passed
    if (
        rec.max_num_seqs != vllm_default_max_num_seqs
        or rec.basis != "engine_default"
        or (settings is not None and settings.max_num_seqs is not None)
    ):
        vllm += ["--max-num-seqs", str(rec.max_num_seqs)]
    if settings is not None and settings.kv_cache_memory_bytes is not None:
        vllm += ["--kv-cache-memory-bytes", str(settings.kv_cache_memory_bytes)]
    else:
        vllm += ["--gpu-memory-utilization", str(rec.gpu_memory_utilization)]
    vllm += ["--block-size", str(rec.block_size)]
    if kv_cache_dtype != "auto":
        vllm += ["--kv-cache-dtype", _VLLM_KV.get(kv_cache_dtype, kv_cache_dtype)]
    if settings is not None:
        if settings.max_num_batched_tokens is not None:
            vllm += ["--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
        if settings.enforce_eager:
            vllm += ["--enforce-eager"]
        if not settings.enable_prefix_caching:
            vllm += ["--no-enable-prefix-caching"]
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp", str(tp)]
    if pp > 1:
        sglang += ["--pp", str(pp)]
    sglang += [
        "--context-length",
        str(rec.max_model_len),
        "--max-running-requests",
        str(rec.max_num_seqs),
        "--mem-fraction-static",
        mem_fraction,
    ]
    if kv_cache_dtype in _SGLANG_KV:
        sglang += ["--kv-cache-dtype", _SGLANG_KV[kv_cache_dtype]]
    trt = ["trtllm-serve", model, "--tp_size", str(tp)]
    if pp > 1:
        trt += ["--pp_size", str(pp)]
    trt += [
        "--max_seq_len",
        str(rec.max_model_len),
        "--max_batch_size",
        str(rec.max_num_seqs),
        "--kv_cache_free_gpu_memory_fraction",
        "0.9",
    ]
    return {
        name: shlex.join(args)
        for name, args in (("vllm", vllm), ("sglang", sglang), ("trtllm", trt))
    }
