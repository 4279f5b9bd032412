"""What a plan predicts, and the plan files ``kvplan verify --plan`` reads. No torch here.

The prediction mirrors vLLM 0.33's own arithmetic (ENGINES.md section 1.2, 1.5, 1.6)::

    available_kv         = budget - non_kv          # non_kv: weights + buffers + non-torch
                                                    #         + activation peak of the profile
    num_gpu_blocks       = available_kv // bytes_per_block
    max_concurrency      = num_gpu_blocks / blocks_per_request
    kv_cache_size_tokens = int(max_concurrency * max_model_len)

:func:`predict_num_gpu_blocks` is where a measured budget enters (CPU, or ``--memory-budget``).
On CUDA without ``--memory-budget`` the claim is the planner's own
(:func:`planner_num_gpu_blocks`, exactly what ``kvplan estimate --gpu`` prints), and a plan
file's ``num_gpu_blocks`` is used as is.

Worked example (Qwen3-0.6B, bf16, block 16, 6 GiB budget): bytes per block 28 layers x 16 x
8 heads x (128 + 128) x 2 B = 1,835,008; with 1,632,087,654 B of non-KV memory, available
= 6,442,450,944 - 1,632,087,654 = 4,810,363,290 B -> 2,621 blocks; at max_model_len 4,096
(256 blocks per request) that is 10.24 requests, int(2,621 / 256 x 4,096) = 41,936 tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import ConfigError, DoesNotFitError, KvplanError, UsageError


class PlanNotMetError(KvplanError):
    """The measured frontier is below the plan by more than the tolerance (exit code 3)."""

    exit_code = 3


@dataclass(frozen=True)
class Figures:
    """The four figures a plan claims and the probe measures (the JSON objects
    ``predicted`` and ``measured``)."""

    num_gpu_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    peak_bytes: int


def predict_num_gpu_blocks(
    *, memory_budget_bytes: int, non_kv_bytes: int, bytes_per_block: int
) -> int:
    """Blocks that fit in the budget after everything that is not KV cache.

    Args:
        memory_budget_bytes: what the engine may use (vLLM: ``ceil(total * utilization)``).
        non_kv_bytes: weights, persistent buffers, non-torch memory and the activation peak.
        bytes_per_block: one block id across every KV-cache group (``vllm.bytes_per_block``).

    Returns:
        ``num_gpu_blocks``, 0 when nothing is left for the cache.
    """
    return max(0, (memory_budget_bytes - non_kv_bytes) // bytes_per_block)


def planner_num_gpu_blocks(
    spec: Any, est: Any, *, total_bytes: int, gpu_memory_utilization: float
) -> int:
    """The planner's own claim for a device of ``total_bytes``: exactly what
    ``kvplan estimate --gpu`` reports (weights from the planner's loader, activation, non-torch
    and CUDA-graph estimates from :mod:`planner.budget`). Used on CUDA, where the claim can be
    tested against the real allocator."""
    from planner.budget import activation_peak_bytes, vllm_capacity
    from planner.model.load import with_headers
    from planner.weights import per_rank

    weights = per_rank(
        with_headers(spec, offline=True),
        tp=est.tensor_parallel_size,
        pp=est.pipeline_parallel_size,
    )
    cap = vllm_capacity(
        est,
        estimate_at=lambda n: est,
        gpu_memory_bytes=total_bytes,
        weights_bytes=weights.bytes_per_rank,
        activation_bytes=activation_peak_bytes(spec, est.vllm.max_num_batched_tokens),
        gpu_memory_utilization=gpu_memory_utilization,
    )
    return int(cap.num_gpu_blocks)


def capacity(
    num_blocks: int, *, blocks_per_request: int, max_model_len: int, peak_bytes: int
) -> Figures:
    """vLLM's capacity report for ``num_blocks`` (``get_max_concurrency_for_kv_cache_config``
    and ``get_kv_cache_capacity``)."""
    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    return Figures(
        num_gpu_blocks=num_blocks,
        kv_cache_size_tokens=int(concurrency * max_model_len),
        max_concurrency=round(concurrency, 4),
        peak_bytes=peak_bytes,
    )


def error_pct(predicted: Figures, measured: Figures) -> dict[str, float | None]:
    """``(measured - predicted) / predicted`` in percent for each figure (None if 0)."""
    out: dict[str, float | None] = {}
    for name in ("num_gpu_blocks", "kv_cache_size_tokens", "max_concurrency", "peak_bytes"):
        p, m = getattr(predicted, name), getattr(measured, name)
        out[name] = round((m - p) / p * 100, 3) if p else None
    return out


def check_one_request(
    *, num_blocks: int, blocks_per_request: int, bytes_per_block: int, max_model_len: int
) -> None:
    """vLLM refuses to start when one request at ``max_model_len`` does not fit
    (``_check_enough_kv_cache_memory``; the null block is not usable)."""
    if num_blocks - 1 >= blocks_per_request:
        return
    need = blocks_per_request * bytes_per_block
    have = max(0, num_blocks - 1) * bytes_per_block
    raise DoesNotFitError(
        f"one {max_model_len:,}-token request needs {blocks_per_request:,} blocks "
        f"({need:,} B) but only {max(0, num_blocks - 1):,} usable blocks ({have:,} B) fit after "
        "weights and activations; raise --memory-budget / --gpu-memory-utilization or lower "
        "--max-model-len"
    )


def check_tolerance(tolerance_pct: float) -> float:
    if not 0 <= tolerance_pct < 100:
        raise UsageError(f"--tolerance must be a percentage in [0, 100), got {tolerance_pct}")
    return tolerance_pct


@dataclass(frozen=True)
class PlanFile:
    """The serving settings a saved plan (``kvplan estimate --json``) fixes."""

    model: str
    source: str
    engine: str
    tensor_parallel_size: int
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    bytes_per_block: int | None = None
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float | None = None
    gpu_memory_bytes: int | None = None


MAX_PLAN_BYTES = 1 << 20  # a plan is a few KiB
REQUIRED_KEYS = (
    "model",
    "engine",
    "tensor_parallel_size",
    "kv_cache_dtype",
    "block_size",
    "max_model_len",
)


def read_plan(path: str | Path) -> PlanFile:
    """Read the JSON ``kvplan estimate --json`` prints (later versions add ``gpu`` and
    ``num_gpu_blocks``; whatever is present is used).

    Args:
        path: the plan file.

    Returns:
        The :class:`PlanFile`.
    """
    from planner.files import read_text_file

    label = str(path)
    text = read_text_file(
        Path(path),
        limit=MAX_PLAN_BYTES,
        what="kvplan estimate --json plan",
        error=lambda message: UsageError(f"--plan {message}"),
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--plan {label} is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "save it with kvplan estimate MODEL --json > plan.json"
        ) from None
    except RecursionError:
        raise ConfigError(f"--plan {label}: JSON nested too deeply for a plan") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--plan {label} must hold a JSON object from kvplan estimate --json")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ConfigError(
            f"--plan {label} lacks {', '.join(missing)}; is it the output of "
            "kvplan estimate --json?"
        )
    vllm = data.get("vllm")
    if not isinstance(vllm, dict):
        vllm = {}
    gpu = data.get("gpu")
    gpu_bytes = gpu.get("memory_bytes") if isinstance(gpu, dict) else None
    source = str(data.get("source") or "")
    if source.startswith("catalog: "):
        source = source.removeprefix("catalog: ")
    elif source.startswith("hub:"):
        source = source.removeprefix("hub:").split("@")[0]
    return PlanFile(
        model=str(data["model"]),
        source=source or str(data["model"]),
        engine=str(data["engine"]),
        tensor_parallel_size=_int(data, "tensor_parallel_size", label),
        kv_cache_dtype=str(data["kv_cache_dtype"]),
        block_size=_int(data, "block_size", label),
        max_model_len=_int(data, "max_model_len", label),
        max_num_batched_tokens=_opt_int(vllm.get("max_num_batched_tokens")),
        max_num_seqs=_opt_int(vllm.get("max_num_seqs")),
        bytes_per_block=_opt_int(vllm.get("bytes_per_block")),
        num_gpu_blocks=_opt_int(data.get("num_gpu_blocks")),
        gpu_memory_utilization=_opt_float(data.get("gpu_memory_utilization")),
        gpu_memory_bytes=_opt_int(gpu_bytes),
    )


def _int(data: dict[str, Any], key: str, label: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--plan {label}: {key} must be a positive integer, got {value!r}")
    return value


def _opt_int(value: Any) -> int | None:
    """An optional count: a non-negative int, else absent (the flags' values apply)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _opt_float(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None
