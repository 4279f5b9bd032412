"""What a GPU can run, so that no suggestion names what it cannot: an fp8 KV cache, an fp8
checkpoint, an engine. Decided from the catalog's facts (``planner/data/gpus.json``: vendor,
compute capability or gfx target); a GPU known only by its memory gets the benefit of the doubt.
"""

from __future__ import annotations

from planner.gpus import Gpu
from planner.model.specs import Engine


def _capability(gpu: Gpu | None) -> tuple[int, int] | None:
    """An NVIDIA GPU's compute capability (None for AMD or a GPU known only by memory)."""
    return None if gpu is None else gpu.cuda_capability


def fp8_kv_refusal(gpu: Gpu | None) -> str | None:
    """Why vLLM has no fp8 KV cache on ``gpu`` (None: it has one). vLLM 0.33.0's CUDA
    backends: Triton refuses fp8 KV below compute capability 8.9 ("native FP8 (fp8e4nv)
    requires SM89+", ``vllm/v1/attention/backends/triton_attn.py:510-523``), FlashInfer runs
    from 8.0 (``flashinfer.py:696-702``), FlashAttention stores fp8 KV only on 9.x and 10.x
    (``fa_utils.py:306-312``); below 8.0 (T4, V100) none does. ROCm's backends take it."""
    cc = _capability(gpu)
    if cc is None or cc >= (8, 0):
        return None
    assert gpu is not None
    return (
        f"vLLM has no fp8 KV cache on {gpu.name} (compute capability {cc[0]}.{cc[1]}): "
        "FlashInfer needs 8.0, Triton 8.9"
    )


def runs_fp8_weights(gpu: Gpu | None) -> bool:
    """Whether vLLM serves an fp8 checkpoint on ``gpu``: natively from compute capability 8.9,
    as weight-only FP8 Marlin on 8.0-8.6 (vLLM's ``fp8.py`` falls back to Marlin below 8.9;
    Marlin needs 8.0); on AMD, ROCm's fp8 path. Unknown GPUs are given the benefit of the
    doubt."""
    cc = _capability(gpu)
    return cc is None or cc >= (8, 0)


def engine_refusal(engine: Engine, gpu: Gpu | None) -> str | None:
    """Why ``engine`` does not run on ``gpu`` (None: it does): TensorRT-LLM is built for
    NVIDIA GPUs only (CUDA and NVIDIA's kernels; no ROCm build)."""
    if engine is Engine.TRTLLM and gpu is not None and gpu.vendor == "amd":
        return f"TensorRT-LLM runs on NVIDIA GPUs only, not on {gpu.name} (AMD)"
    return None
