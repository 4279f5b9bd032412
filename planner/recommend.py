"""Recommendations for one model on one GPU: what vLLM will report, what to set, and why.

:func:`plan` ties the pieces together: weights (:mod:`planner.weights`), the engine budget
(:mod:`planner.budget`), a ``max_model_len`` x ``max_num_seqs`` grid, the recommended pair for a
target KV usage, alternatives (fp8 KV, more TP), block-size and prefix-sharing trade-offs, the
naive-contiguous baseline, and ready-to-paste engine commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from planner.budget import (
    CUDA_GRAPH_DEFAULT_BYTES,
    VLLM_DEFAULT_GMU,
    EngineCapacity,
    VllmCapacity,
    activation_peak_bytes,
    check_gmu,
    hf_capacity,
    sglang_capacity,
    trtllm_capacity,
    vllm_capacity,
)
from planner.errors import DoesNotFitError, UsageError
from planner.memory import KVEstimate, estimate, positive_count
from planner.specs import Engine, KVDtype, ModelSpec, cdiv
from planner.weights import Weights, from_config, from_hub, from_local_dir

TARGET_KV_USAGE = 0.9
GRID_SEQS = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_bytes: int
    source: str


@dataclass(frozen=True)
class GridCell:
    max_model_len: int
    max_num_seqs: int
    fits: bool
    kv_usage: float  # blocks used at full concurrency / blocks available (>1: does not fit)
    num_gpu_blocks: int


@dataclass(frozen=True)
class Recommended:
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    block_size: int
    kv_cache_dtype: str
    kv_usage: float
    reason: str


@dataclass(frozen=True)
class Alternative:
    change: str
    max_concurrency: float
    num_gpu_blocks: int
    fits: bool


@dataclass(frozen=True)
class BlockSizeRow:
    block_size: int
    wasted_tokens_per_seq: float
    fragmentation_pct: float
    block_table_entries: int


@dataclass(frozen=True)
class PrefixSharing:
    shared_prefix_tokens: int
    requests: int
    blocks_saved: int
    bytes_saved: int


@dataclass(frozen=True)
class NaiveVsPaged:
    avg_tokens: int
    sequences: int
    naive_bytes: int
    paged_bytes: int
    waste_pct: float


@dataclass(frozen=True)
class Plan:
    """Everything ``kvplan estimate --gpu`` shows; flattened into the JSON by render.py."""

    estimate: KVEstimate
    gpu: GpuInfo
    weights: Weights
    vllm: VllmCapacity
    engines: list[EngineCapacity]
    recommended: Recommended | None
    grid: list[GridCell]
    alternatives: list[Alternative]
    block_sizes: list[BlockSizeRow]
    prefix_sharing: PrefixSharing | None
    naive_vs_paged: NaiveVsPaged
    commands: dict[str, str]
    notes: list[str] = field(default_factory=list)


def load_weights(
    spec: ModelSpec, *, tp: int, pp: int, revision: str | None = None, allow_hub: bool = True
) -> Weights:
    """Exact weights from safetensors headers when reachable (local dir or Hub), else derived
    from the config."""
    num_layers = spec.num_layers
    source = spec.source
    if source.endswith(".json") and Path(source).parent.is_dir():
        exact = from_local_dir(Path(source).parent, num_layers, tp=tp, pp=pp)
        if exact is not None:
            return exact
    if source.startswith("hub:") and allow_hub:
        exact = from_hub(spec.name, num_layers, revision=revision, tp=tp, pp=pp)
        if exact is not None:
            return exact
    return from_config(spec, tp=tp, pp=pp)


def plan(
    spec: ModelSpec,
    *,
    gpu: GpuInfo,
    gpu_is_a100: bool = False,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: KVDtype = KVDtype.AUTO,
    block_size: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    gpu_memory_utilization: float = VLLM_DEFAULT_GMU,
    kv_cache_memory_bytes: int | None = None,
    cuda_graph_bytes: int = CUDA_GRAPH_DEFAULT_BYTES,
    headroom_bytes: int = 0,
    prefix_caching: bool = True,
    weights: Weights | None = None,
    shared_prefix_tokens: int | None = None,
    requests: int = 100,
    avg_tokens: int | None = None,
    grid_lens: Sequence[int] | None = None,
    batch_sizes: Sequence[int] = (1, 8, 32),
) -> Plan:
    """Plan ``spec`` on ``gpu`` with vLLM's formulas, plus the other engines for comparison.

    Args mirror ``vllm serve`` flags; ``weights`` defaults to :func:`load_weights`.

    Returns:
        The :class:`Plan`.
    """
    check_gmu(gpu_memory_utilization)
    if gpu.memory_bytes <= 0 and kv_cache_memory_bytes is None:
        raise UsageError("--gpu-memory must be positive")
    for flag, value in (
        ("--requests", requests),
        ("--shared-prefix", shared_prefix_tokens),
        ("--avg-tokens", avg_tokens),
    ):
        positive_count(flag, value)
    weights = weights or load_weights(spec, tp=tp, pp=pp)
    if kv_cache_memory_bytes is None:
        _check_weights_fit(spec, weights, gpu, gpu_memory_utilization, tp, pp)

    def est_at(
        length: int | None,
        seqs: int | None = max_num_seqs,
        dtype: KVDtype = kv_cache_dtype,
        tp_: int = tp,
    ) -> KVEstimate:
        return estimate(
            spec,
            engine=Engine.VLLM,
            tp=tp_,
            pp=pp,
            kv_cache_dtype=dtype,
            block_size=block_size,
            max_model_len=length,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=seqs,
            gpu_memory_bytes=gpu.memory_bytes or None,
            gpu_is_a100=gpu_is_a100,
            prefix_caching=prefix_caching,
            batch_sizes=batch_sizes,
        )

    def capacity(
        est: KVEstimate, w: Weights = weights, at: Callable[[int], KVEstimate] | None = None
    ) -> VllmCapacity:
        assert est.vllm is not None
        return vllm_capacity(
            est,
            estimate_at=at or (lambda n: est_at(n)),
            gpu_memory_bytes=gpu.memory_bytes,
            weights_bytes=w.bytes_per_rank,
            activation_bytes=activation_peak_bytes(spec, est.vllm.max_num_batched_tokens),
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            cuda_graph_bytes=cuda_graph_bytes,
            headroom_bytes=headroom_bytes,
        )

    notes: list[str] = []
    if max_model_len == -1:  # vLLM's auto-fit
        full = est_at(None)
        fitted = capacity(full).estimated_max_model_len
        length = full.max_model_len if capacity(full).fits else (fitted or 1)
        notes.append(f"Auto-fit max_model_len: {full.max_model_len:,} -> {length:,}")
    else:
        length = max_model_len or spec.max_model_len
    est = est_at(length)
    cap = capacity(est)
    act = cap.activation_peak_bytes

    def other(engine: Engine) -> KVEstimate:
        return estimate(
            spec,
            engine=engine,
            tp=tp,
            pp=pp,
            kv_cache_dtype=kv_cache_dtype,
            max_model_len=length,
            batch_sizes=(),
        )

    w_bytes = weights.bytes_per_rank
    engines = (
        []
        if not gpu.memory_bytes
        else [
            sglang_capacity(
                other(Engine.SGLANG), gpu_memory_bytes=gpu.memory_bytes, weights_bytes=w_bytes
            ),
            trtllm_capacity(
                other(Engine.TRTLLM),
                gpu_memory_bytes=gpu.memory_bytes,
                weights_bytes=w_bytes,
                activation_bytes=act,
            ),
            hf_capacity(
                other(Engine.HF),
                gpu_memory_bytes=gpu.memory_bytes,
                weights_bytes=w_bytes,
                activation_bytes=act,
            ),
        ]
    )
    grid = _grid(spec, est_at, capacity, grid_lens, length)
    recommended = _recommend(est, cap, gpu_memory_utilization, max_num_seqs)
    alternatives = _alternatives(spec, est, cap, est_at, capacity, kv_cache_dtype, tp, pp, weights)
    assert est.vllm is not None
    bs_rows = _block_sizes(length, avg_tokens or max(1, length // 2))
    sharing = None
    if shared_prefix_tokens:
        saved = (requests - 1) * (shared_prefix_tokens // est.block_size) if requests > 1 else 0
        sharing = PrefixSharing(
            shared_prefix_tokens, requests, saved, saved * est.vllm.bytes_per_block
        )
    naive = _naive(est, avg_tokens or max(1, length // 2), recommended)
    target = recommended or Recommended(
        length, 1, gpu_memory_utilization, est.block_size, est.kv_cache_dtype, 0.0, ""
    )
    commands = engine_commands(
        spec.name,
        target,
        tp=tp,
        pp=pp,
        kv_cache_dtype=kv_cache_dtype.value,
        mem_fraction=engines[0].setting.split("=")[1] if engines else "0.9",
    )
    if not weights.source == "safetensors":
        notes.append(
            f"weights {weights.detail}; exact sizes need a local dir or Hub access with safetensors"
        )
    return Plan(
        est,
        gpu,
        weights,
        cap,
        engines,
        recommended,
        grid,
        alternatives,
        bs_rows,
        sharing,
        naive,
        commands,
        notes,
    )


def _check_weights_fit(
    spec: ModelSpec, weights: Weights, gpu: GpuInfo, gmu: float, tp: int, pp: int
) -> None:
    """Refuse a plan whose weights alone exceed vLLM's budget, naming what would fit."""
    from planner.gpus import GPUS

    requested = -(-int(gpu.memory_bytes * gmu * 1000) // 1000)
    if weights.bytes_per_rank < requested:
        return
    short = weights.bytes_per_rank - requested
    hints = []
    for more in (2, 4, 8, 16):
        try:
            estimate(spec, tp=tp * more, pp=pp, batch_sizes=())
        except UsageError:
            continue
        if -(-weights.bytes_per_rank // more) < requested * 0.8:
            hints.append(f"--tp {tp * more}")
            break
    if weights.quantization is None and spec.dtype_bytes >= 2:
        hints.append("an fp8 checkpoint (about half the weight bytes)")
    bigger = [g.name for g in GPUS if g.memory_bytes * gmu > weights.bytes_per_rank * 1.2]
    if bigger:
        best = min(bigger, key=lambda n: next(g.memory_bytes for g in GPUS if g.name == n))
        hints.append(f"a bigger GPU (--gpu {best})")
    gib = 1 << 30
    raise DoesNotFitError(
        f"{spec.name} weights need {weights.bytes_per_rank / gib:.2f} GiB per GPU but vLLM may "
        f"use {requested / gib:.2f} GiB of {gpu.name} (gpu_memory_utilization {gmu}): "
        f"{short / gib:.2f} GiB short" + (f"; try {', or '.join(hints)}" if hints else "")
    )


def _grid(
    spec: ModelSpec,
    est_at: Callable[..., KVEstimate],
    capacity: Callable[..., VllmCapacity],
    grid_lens: Sequence[int] | None,
    length: int,
) -> list[GridCell]:
    # NOTE: an empty grid_lens means no grid (kvplan check needs none); None means the default.
    lens = list(grid_lens) if grid_lens is not None else _default_lens(spec.max_model_len, length)
    cells = []
    for n in lens:
        for seqs in GRID_SEQS:
            e = est_at(n, seqs)
            cap = capacity(e, at=lambda m, s=seqs: est_at(m, s))
            assert e.vllm is not None
            need = seqs * e.vllm.blocks_per_request
            usable = max(cap.num_gpu_blocks - 1, 0)  # one null block is never handed out
            usage = need / usable if usable else float("inf")
            cells.append(
                GridCell(n, seqs, cap.fits and need <= usable, round(usage, 4), cap.num_gpu_blocks)
            )
    return cells


def _default_lens(model_max: int, length: int) -> list[int]:
    lens = [n for n in (4096, 8192, 16384, 32768, 65536, 131072) if n <= model_max]
    if length not in lens:
        lens.append(length)
    return sorted(set(lens))[:7]


def _recommend(
    est: KVEstimate, cap: VllmCapacity, gmu: float, max_num_seqs: int | None
) -> Recommended | None:
    """Largest max_num_seqs whose sequences at max_model_len use <= 90 % of the KV blocks."""
    if not cap.fits:
        return None
    usable = cap.num_gpu_blocks - 1
    seqs = int(TARGET_KV_USAGE * usable // cap.blocks_per_request)
    ceiling = max_num_seqs or est.vllm.max_num_seqs if est.vllm else 256
    if cap.mamba_max_num_seqs is not None:
        ceiling = min(ceiling, cap.mamba_max_num_seqs)
    seqs = max(1, min(seqs, ceiling))
    usage = seqs * cap.blocks_per_request / usable
    reason = (
        f"{seqs} sequences of {est.max_model_len:,} tokens use {usage:.0%} of {usable:,} KV blocks"
    )
    if seqs == ceiling:
        reason += f" (capped at max_num_seqs {ceiling})"
    return Recommended(
        est.max_model_len, seqs, gmu, est.block_size, est.kv_cache_dtype, round(usage, 4), reason
    )


def _alternatives(
    spec: ModelSpec,
    est: KVEstimate,
    cap: VllmCapacity,
    est_at: Callable[..., KVEstimate],
    capacity: Callable[..., VllmCapacity],
    dtype: KVDtype,
    tp: int,
    pp: int,
    weights: Weights,
) -> list[Alternative]:
    out = []
    if est.kv_dtype_bytes > 1:
        e = est_at(est.max_model_len, dtype=KVDtype.FP8)
        c = capacity(e, at=lambda n: est_at(n, dtype=KVDtype.FP8))
        out.append(
            Alternative(
                "--kv-cache-dtype fp8", round(c.max_concurrency, 2), c.num_gpu_blocks, c.fits
            )
        )
    try:
        e = est_at(est.max_model_len, tp_=tp * 2)
    except UsageError:
        return out
    w = (
        load_weights(spec, tp=tp * 2, pp=pp, allow_hub=False)
        if weights.source == "config"
        else replace(weights, bytes_per_rank=-(-weights.bytes_per_rank // 2))
    )
    c = capacity(e, w, at=lambda n: est_at(n, tp_=tp * 2))
    out.append(
        Alternative(
            f"--tensor-parallel-size {tp * 2}",
            round(c.max_concurrency, 2),
            c.num_gpu_blocks,
            c.fits,
        )
    )
    return out


def _block_sizes(length: int, avg_tokens: int) -> list[BlockSizeRow]:
    """Internal fragmentation vs block-table size for 8/16/32-token blocks, for requests of
    uniformly spread length with mean ``avg_tokens``: the last block is on average half empty,
    (bs - 1) / 2 tokens."""
    rows = []
    for bs in (8, 16, 32):
        wasted = (bs - 1) / 2
        rows.append(
            BlockSizeRow(
                bs, wasted, round(100 * wasted / (avg_tokens + wasted), 2), cdiv(length, bs)
            )
        )
    return rows


def _naive(est: KVEstimate, avg_tokens: int, rec: Recommended | None) -> NaiveVsPaged:
    """Contiguous pre-allocation at max_model_len (transformers' static cache) vs paged blocks
    holding only what each sequence uses."""
    seqs = rec.max_num_seqs if rec else 1
    per_token = est.kv_bytes_per_token
    naive = seqs * est.max_model_len * per_token
    used = min(avg_tokens, est.max_model_len)
    paged = seqs * cdiv(used, est.block_size) * est.block_size * per_token
    waste = 100 * (naive - paged) / naive if naive else 0.0
    return NaiveVsPaged(used, seqs, naive, paged, round(waste, 2))


# --------------------------------------------------------------------------- commands

_SGLANG_KV = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}


def engine_commands(
    model: str, rec: Recommended, *, tp: int, pp: int, kv_cache_dtype: str, mem_fraction: str
) -> dict[str, str]:
    """Ready-to-paste launch commands, flags spelled as each engine accepts them."""
    vllm = ["vllm", "serve", model, "--tensor-parallel-size", str(tp)]
    if pp > 1:
        vllm += ["--pipeline-parallel-size", str(pp)]
    vllm += [
        "--max-model-len",
        str(rec.max_model_len),
        "--max-num-seqs",
        str(rec.max_num_seqs),
        "--gpu-memory-utilization",
        str(rec.gpu_memory_utilization),
        "--block-size",
        str(rec.block_size),
    ]
    if kv_cache_dtype != "auto":
        vllm += ["--kv-cache-dtype", kv_cache_dtype]
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


def parse_command(command: str) -> dict[str, str]:
    """Parse an engine command back into {flag: value} (used to check the emitted commands)."""
    words = shlex.split(command)
    out: dict[str, str] = {}
    if words[:2] == ["vllm", "serve"]:
        out["model"], rest = words[2], words[3:]
    elif words[:3] == ["python", "-m", "sglang.launch_server"]:
        rest = words[3:]
    elif words[:1] == ["trtllm-serve"]:
        out["model"], rest = words[1], words[2:]
    else:
        raise ValueError(f"not an engine command: {command}")
    it = iter(rest)
    for flag in it:
        if not flag.startswith("--"):
            raise ValueError(f"unexpected argument {flag!r}")
        out[flag[2:]] = next(it)
    if "model-path" in out:
        out["model"] = out.pop("model-path")
    return out


# --------------------------------------------------------------------------- entry point

COMMON_GPUS = ("l4", "a10g", "rtx-4090", "l40s", "a100-80gb", "h100", "h200", "b200")


@dataclass(frozen=True)
class GpuRow:
    """One GPU of the comparison table shown when no GPU is named."""

    name: str
    memory_bytes: int
    weights_bytes: int
    available_kv_bytes: int
    num_gpu_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    fits: bool


@dataclass(frozen=True)
class Report:
    """What ``kvplan estimate`` prints: the KV estimate, and a plan for the GPU (named or
    detected), or a table across common GPUs."""

    estimate: KVEstimate
    plan: Plan | None
    gpu_table: list[GpuRow]


def detect_gpu() -> GpuInfo | None:
    """The local GPU through NVML (nvidia-ml-py), else torch when a CUDA driver is present."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        reserved = int(getattr(info, "reserved", 0) or 0)
        return GpuInfo(str(name), int(info.total) - reserved, "detected via NVML")
    except Exception:  # no NVML, no driver, no GPU
        pass
    if not Path("/proc/driver/nvidia/gpus").exists():
        return None
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # slow: only with a driver

        if torch.cuda.is_available():
            _free, total = torch.cuda.mem_get_info()
            return GpuInfo(
                torch.cuda.get_device_name(0), int(total), "detected via torch.cuda.mem_get_info"
            )
    except Exception:
        return None
    return None


def report(
    spec: ModelSpec,
    *,
    engine: Engine = Engine.VLLM,
    gpu: GpuInfo | None = None,
    gpu_is_a100: bool = False,
    detect: bool = True,
    tp: int = 1,
    pp: int = 1,
    kv_cache_dtype: KVDtype = KVDtype.AUTO,
    block_size: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    prefix_caching: bool = True,
    batch_sizes: Sequence[int] = (1, 8, 32),
    gpu_memory_utilization: float = VLLM_DEFAULT_GMU,
    kv_cache_memory_bytes: int | None = None,
    cuda_graph_bytes: int = CUDA_GRAPH_DEFAULT_BYTES,
    headroom_bytes: int = 0,
    shared_prefix_tokens: int | None = None,
    requests: int = 100,
    avg_tokens: int | None = None,
) -> Report:
    """``kvplan estimate``: the estimate, plus a plan for ``gpu`` (or the detected one), or a
    capacity table across common GPUs when there is none.

    Args mirror :func:`planner.estimate` and :func:`plan`; ``max_model_len=-1`` auto-fits.
    """
    from planner.gpus import get_gpu

    check_gmu(gpu_memory_utilization)
    if gpu is None and detect and kv_cache_memory_bytes is None:
        gpu = detect_gpu()

    def est_on(memory: int | None, a100: bool, length: int | None) -> KVEstimate:
        return estimate(
            spec,
            engine=engine,
            tp=tp,
            pp=pp,
            kv_cache_dtype=kv_cache_dtype,
            block_size=block_size,
            max_model_len=length,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            gpu_memory_bytes=memory,
            gpu_is_a100=a100,
            prefix_caching=prefix_caching,
            batch_sizes=batch_sizes,
        )

    length = None if max_model_len == -1 else max_model_len
    base = est_on(gpu.memory_bytes if gpu else None, gpu_is_a100, length)  # validates the flags
    if engine is not Engine.VLLM:
        return Report(base, None, [])
    if gpu is not None or kv_cache_memory_bytes is not None:
        the_plan = plan(
            spec,
            gpu=gpu or GpuInfo("unspecified", 0, "--kv-cache-memory"),
            gpu_is_a100=gpu_is_a100,
            tp=tp,
            pp=pp,
            kv_cache_dtype=kv_cache_dtype,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            cuda_graph_bytes=cuda_graph_bytes,
            headroom_bytes=headroom_bytes,
            prefix_caching=prefix_caching,
            shared_prefix_tokens=shared_prefix_tokens,
            requests=requests,
            avg_tokens=avg_tokens,
            batch_sizes=batch_sizes,
        )
        return Report(the_plan.estimate, the_plan, [])
    weights = load_weights(spec, tp=tp, pp=pp, allow_hub=False)
    rows = []
    for name in COMMON_GPUS:
        g = get_gpu(name)
        e = est_on(g.memory_bytes, g.is_a100, length)
        assert e.vllm is not None
        cap = vllm_capacity(
            e,
            estimate_at=lambda n, g=g: est_on(g.memory_bytes, g.is_a100, n),
            gpu_memory_bytes=g.memory_bytes,
            weights_bytes=weights.bytes_per_rank,
            activation_bytes=activation_peak_bytes(spec, e.vllm.max_num_batched_tokens),
            gpu_memory_utilization=gpu_memory_utilization,
            cuda_graph_bytes=cuda_graph_bytes,
            headroom_bytes=headroom_bytes,
        )
        rows.append(
            GpuRow(
                g.name,
                g.memory_bytes,
                weights.bytes_per_rank,
                cap.available_kv_bytes,
                cap.num_gpu_blocks,
                cap.kv_cache_size_tokens,
                round(cap.max_concurrency, 2),
                cap.fits,
            )
        )
    return Report(base, None, rows)
