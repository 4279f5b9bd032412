"""What a plan predicts, the plan files ``kvplan verify --plan`` reads, and the request and
result types of ``kvplan verify``. No torch here: the CLI parses and checks a request, and
render prints a result, without importing it.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.deployment import ServeSettings
from planner.errors import ConfigError, DoesNotFitError, KvplanError, UsageError
from planner.model.specs import KVDtype
from planner.units import GIB, MIB, fmt_bytes

if TYPE_CHECKING:
    from planner.deployment import Deployment
    from planner.kv_layout import KVEstimate, VllmLayout

MAX_DECODE_STEPS = 1024  # the planned run proves the pool; more steps only take longer
DEFAULT_CHUNK_BYTES = 32 << 20  # the most extra memory one attention chunk may take


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


def planner_num_gpu_blocks(dep: Deployment, est: KVEstimate) -> int:
    """The planner's own claim for ``dep`` on its GPU: exactly what ``kvplan estimate --gpu``
    reports (weights from the fetched model, activation, non-torch and CUDA-graph estimates
    from :func:`planner.budget.vllm_budget`). Used on CUDA, where the claim can be tested
    against the real allocator."""
    from planner.budget import vllm_budget
    from planner.weights import for_deployment

    weights = for_deployment(dep)  # as every command weighs it (placement, rotary cache, ...)
    return int(vllm_budget(dep, est, weights, estimate_at=lambda n: est).num_gpu_blocks)


def capacity(
    num_blocks: int, *, layout: VllmLayout, blocks_per_request: int, peak_bytes: int
) -> Figures:
    """vLLM's capacity report for ``num_blocks`` (``get_max_concurrency_for_kv_cache_config``
    and its "GPU KV cache size": :func:`planner.budget.logged_kv_tokens`)."""
    from planner.budget import logged_kv_tokens

    concurrency = num_blocks / blocks_per_request if blocks_per_request else 0.0
    return Figures(
        num_gpu_blocks=num_blocks,
        kv_cache_size_tokens=logged_kv_tokens(num_blocks, layout),
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
    from planner import files

    label = str(path)
    text = files.read_text_file(
        Path(path),
        limit=MAX_PLAN_BYTES,
        what="kvplan estimate --json plan",
        error=lambda message: UsageError(f"--plan {message}"),
    )
    try:
        data = files.loads_json(text, where=f"--plan {label}", error=ConfigError)
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


# --------------------------------------------------------------------------- kvplan verify


@dataclass(frozen=True)
class VerifyRequest:
    """Everything ``kvplan verify`` fixes: the deployment's serve settings (the same
    :class:`~planner.deployment.ServeSettings` ``kvplan estimate`` plans with) and how to
    probe them."""

    settings: ServeSettings = field(default_factory=ServeSettings)
    device: str = "cpu"
    memory_budget_bytes: int | None = None
    max_memory_bytes: int | None = None
    weights_bytes: int | None = None
    weights_buffer: bool = False
    tolerance_pct: float = 2.0
    num_gpu_blocks: int | None = None
    decode_steps: int = 2
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES
    all_layers_profile: bool | None = None
    expected_bytes_per_block: int | None = None

    def with_plan(self, plan: PlanFile) -> VerifyRequest:
        """The serving settings of a saved plan over these flags (the plan is the claim)."""
        s = self.settings
        settings = replace(
            s,
            tp=plan.tensor_parallel_size,
            kv_cache_dtype=KVDtype.parse(plan.kv_cache_dtype),
            block_size=plan.block_size,
            max_model_len=plan.max_model_len,
            max_num_batched_tokens=plan.max_num_batched_tokens or s.max_num_batched_tokens,
            max_num_seqs=plan.max_num_seqs or s.max_num_seqs,
            gpu_memory_utilization=plan.gpu_memory_utilization or s.gpu_memory_utilization,
        )
        return replace(
            self,
            settings=settings,
            num_gpu_blocks=plan.num_gpu_blocks,
            expected_bytes_per_block=plan.bytes_per_block,
        )


def check_request(req: VerifyRequest) -> None:
    """Refuse a request whose flags cannot make a probe, before anything is loaded: the
    CLI calls it before it imports torch, :func:`probes.probe.verify` again."""
    check_tolerance(req.tolerance_pct)
    if not 1 <= req.decode_steps <= MAX_DECODE_STEPS:
        raise UsageError(
            f"--decode-steps must be from 1 to {MAX_DECODE_STEPS:,} (each is a decode step of "
            f"every sequence through every layer), got {req.decode_steps:,}"
        )
    kind, _, index = req.device.partition(":")
    if kind not in ("cpu", "cuda") or not (index == "" or (index.isascii() and index.isdigit())):
        raise UsageError(f"--device {req.device!r}: use cpu or cuda (cuda:N for one device)")
    if req.device.startswith("cpu") and req.memory_budget_bytes is None:
        raise UsageError(
            "--device cpu needs --memory-budget SIZE (e.g. 6GiB): a CPU has no device memory "
            "to plan against"
        )
    for name, value in (
        ("--memory-budget", req.memory_budget_bytes),
        ("--max-memory", req.max_memory_bytes),
        ("--weights-bytes", req.weights_bytes),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be positive, got {value:,} B")
    host = host_memory_available() if req.device.startswith("cpu") else None
    budget = req.memory_budget_bytes
    if host is not None and budget is not None and budget > host:
        raise UsageError(
            f"--memory-budget {fmt_bytes(budget)} is more than this host can allocate "
            f"({fmt_bytes(host)} available): --device cpu probes in host memory; pass "
            f"--memory-budget {host // GIB}GiB or less"
        )


def check_device_free(req: VerifyRequest, free_bytes: int, total_bytes: int) -> None:
    """Refuse a CUDA probe whose budget is more than the device has free, before anything is
    allocated: one line with what was asked, what is free and what to change.

    The budget is what :func:`probes.probe.verify` caps the probe at: ``--memory-budget``,
    else ``ceil(total x gpu_memory_utilization)``, under ``--max-memory``. vLLM refuses the
    same way at start-up, "Free memory on device (free/total GiB) on startup is less than
    desired GPU memory utilization" (``v1/worker/gpu_worker.py`` 0.11.0:185-195); the probe
    would instead run out of memory part-way and report a frontier below the plan.
    """
    gmu = req.settings.gmu
    budget = req.memory_budget_bytes or math.ceil(total_bytes * gmu)
    limit = min(budget, req.max_memory_bytes or budget)
    if limit <= free_bytes:
        return
    fits = f"{free_bytes // GIB}GiB" if free_bytes >= GIB else f"{free_bytes // MIB}MiB"
    if req.max_memory_bytes is not None and req.max_memory_bytes < budget:
        asked, change = "--max-memory", f"lower --max-memory to {fits} or less"
    elif req.memory_budget_bytes is not None:
        asked, change = "--memory-budget", f"pass --memory-budget {fits} or less"
    else:
        asked = f"gpu_memory_utilization {gmu:g} of {fmt_bytes(total_bytes)}"
        lower = math.floor(free_bytes / total_bytes * 100) / 100 if total_bytes else 0.0
        while lower > 0 and math.ceil(total_bytes * lower) > free_bytes:
            lower = round(lower - 0.01, 2)
        if lower <= 0:
            change = f"pass --memory-budget {fits} or less"
        elif req.num_gpu_blocks is not None:  # --plan: the plan fixes the utilization
            change = f"plan again with --gpu-memory-utilization {lower:g} or less"
        else:
            change = f"lower --gpu-memory-utilization to {lower:g} or less"
    held = max(0, total_bytes - free_bytes)
    raise UsageError(
        f"--device {req.device}: the probe's budget, {fmt_bytes(limit)} ({asked}), is more "
        f"than the device has free, {fmt_bytes(free_bytes)} ({fmt_bytes(held)} held by other "
        f"processes and this one's CUDA context); {change}, or free the GPU"
    )


def host_memory_available() -> int | None:
    """Bytes the host can allocate now (``MemAvailable`` of /proc/meminfo; else its physical
    memory), None where neither is known."""
    import os

    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f.read(1 << 16).decode("ascii", "replace").splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class Trial:
    """One allocation attempt: pool size, outcome, and memory before/after."""

    num_blocks: int
    fits: bool
    peak_bytes: int
    allocated_after_bytes: int
    error: str | None = None


@dataclass(frozen=True)
class MemoryReport:
    """Where the budget went, in bytes (device memory readings where the device has them)."""

    budget_bytes: int
    limit_bytes: int
    weights_bytes: int
    persistent_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    non_kv_bytes: int
    available_kv_bytes: int
    profile_peak_bytes: int
    planned_run_peak_bytes: int | None
    free_bytes_after_profile: int
    free_bytes_in_planned_run: int | None
    baseline_bytes: int
    final_allocated_bytes: int


@dataclass(frozen=True)
class PlannedRun:
    """Step 5: the planned pool with sequences decoding in it."""

    ran: bool
    num_sequences: int
    full_length_sequences: int
    decode_steps: int
    error: str | None = None


@dataclass
class ProbeResult:
    """Predicted vs measured for one model on one device (``kvplan verify --json``)."""

    model: str
    device: str
    engine: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    bytes_per_block: int
    pool_bytes_per_block: int
    blocks_per_request: int
    predicted: Figures
    measured: Figures
    error_pct: dict[str, float | None]
    tolerance_pct: float
    passed: bool
    memory: MemoryReport
    planned_run: PlannedRun
    trials: list[Trial]
    oom_recovered: bool
    prediction_source: str
    weights_mode: str
    page_mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Measurement:
    tokens: int
    tensor_bytes: int
    storage_bytes: int


@dataclass
class CacheCheck:
    """One config's cross-check (``status``: ok, mismatch, skipped or error)."""

    model: str
    model_type: str
    status: str
    reason: str = ""
    cache_class: str = ""
    num_layers_built: int = 0
    shrunk: dict[str, Any] = field(default_factory=dict)
    predicted_bytes_per_token: int = 0
    measured_bytes_per_token: int = 0
    predicted_bytes_per_sequence: dict[int, int] = field(default_factory=dict)
    measured_tensor_bytes: dict[int, int] = field(default_factory=dict)
    measured_storage_bytes: dict[int, int] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    storage_excess: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"
