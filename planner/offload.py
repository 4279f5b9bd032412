"""CPU offload, the CPU KV tier and host RAM, as vLLM 0.33 runs them.

``../shared/ENGINES-SCALE.md`` §4.5, confirmed in vLLM 0.33's sources:

- **Weight offload** (``--cpu-offload-gb X``, ``vllm/config/offload.py`` "space in GiB to
  offload to CPU, per GPU"): ``UVAOffloader`` (``vllm/model_executor/offloader/uva.py``) moves
  decoder-layer parameters to pinned CPU memory one at a time until ``int(X x 1024**3)`` bytes
  are moved, so a GPU's weights shrink by up to X GiB and the host pins what moved, on every
  GPU. Both model runners install it in 0.33 (``v1/worker/gpu_model_runner.py:952``,
  ``v1/worker/gpu/model_runner.py:368``); in 0.2x releases the V2 runner did not, and the flag
  did nothing there (vllm#51396 on 0.25.1; fixed by vllm PR#48468 / #51462).
- **No swap space.** 0.33 has no ``swap_space`` (``vllm/engine/arg_utils.py``,
  ``vllm/config``): the V1 scheduler preempts by recomputing, never by swapping blocks out.
- **CPU KV tier** (``--kv-offloading-size S --kv-offloading-backend native|lmcache``,
  ``vllm/config/cache.py:383-392``, ``VllmConfig._post_init_kv_transfer_config``): ``native``
  is the ``OffloadingConnector`` with ``cpu_bytes_to_use = S x 2**30`` for the whole engine
  ("summed across all TP ranks"); ``lmcache`` is ``LMCacheMPConnector``, whose capacity is the
  LMCache server's own (S is not passed on). ``vllm/v1/kv_offload/cpu/spec.py:100-130``::

      copies  = 1 if replicated_layout else world_size    # pure MLA, TP only, one node
      chunk   = round_up(worker_kv_bytes_per_block x copies x blocks_per_chunk (1), 4096)
      blocks  = cpu_bytes_to_use // chunk

  The GPU pool, concurrency and ``max_model_len`` do not change: completed blocks are written
  through to the CPU and loaded back on a prefix hit. vLLM's recipes: a CPU tier no larger than
  the GPU pool "just mirrors what the GPU already holds".
- **Host RAM** per deployment: the KV tier (per engine, so x dp), the pinned offloaded weights
  (every GPU), the LoRA CPU cache (every worker keeps ``max_cpu_loras`` whole adapters) and,
  for a multimodal model, the processor cache: ``mm_processor_cache_gb`` (4 GiB by default)
  x (``api_server_count`` + ``data_parallel_size``), ``api_server_count`` defaulting to the DP
  size (``vllm/config/multimodal.py``, ``vllm/entrypoints/cli/serve.py``).

Worked example: Llama-3.1-8B at TP 1 (2 MiB blocks of 16 tokens) with ``--kv-offloading-size
64``: 64 x 2**30 // 2,097,152 = 32,768 CPU blocks = 524,288 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.config import fields as config_fields
from planner.units import GIB
from planner.vllm_rules import parse_version

if TYPE_CHECKING:
    from planner.budget import VllmCapacity
    from planner.deployment import Deployment, ServeSettings
    from planner.kv_layout import KVEstimate
    from planner.lora import LoraBuffers
    from planner.weights import Weights

KV_OFFLOADING_BACKENDS = config_fields.KV_OFFLOADING_BACKENDS
# SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE: 4 KiB on x86-64 Linux.
PAGE_BYTES = 4096
# vllm/config/multimodal.py: mm_processor_cache_gb default.
MM_PROCESSOR_CACHE_BYTES = 4 * GIB
# The oldest release whose V2 model runner installs the weight offloader: 0.33 read here;
# vllm#51396 shows 0.25.1 without it (the V2 runner arrived in the 0.2x line).
OFFLOAD_FIXED_IN = (0, 33)
V2_RUNNER_SINCE = (0, 20)


@dataclass(frozen=True, kw_only=True)
class KvTier:
    """The CPU KV tier of one engine (JSON ``kv_offload``).

    Attributes:
        backend: ``native`` or ``lmcache``.
        size_bytes: ``cpu_bytes_to_use`` (``--kv-offloading-size`` x 2**30) for the engine.
        copies: pages one CPU block holds: every worker's (TP x PP), or 1 for MLA's
            replicated layout.
        cpu_block_bytes: one CPU block, page-aligned.
        cpu_blocks, cpu_kv_tokens: what fits (None with lmcache: the server's size decides).
        gpu_blocks: the engine's GPU pool, for the ratio.
        ratio_to_gpu_pool: CPU blocks / GPU blocks (None with lmcache).
        mirrors_only: the CPU tier is no larger than the GPU pool, so it only mirrors it.
    """

    backend: str
    size_bytes: int
    copies: int
    cpu_block_bytes: int
    cpu_blocks: int | None
    cpu_kv_tokens: int | None
    gpu_blocks: int
    ratio_to_gpu_pool: float | None
    mirrors_only: bool


def replicated_layout(est: KVEstimate, settings: ServeSettings) -> bool:
    """vLLM's ``replicated_layout`` (``offloading/config.py``): pure MLA whose latent KV is
    the same on every TP rank, TP only (no PP, DCP; kvplan keeps TP inside a node): the CPU
    keeps one copy."""
    return est.attention_type == "MLA" and settings.tp > 1 and settings.pp == settings.dcp == 1


def kv_tier(est: KVEstimate, cap: VllmCapacity, settings: ServeSettings) -> KvTier | None:
    """The CPU tier ``--kv-offloading-size`` buys (None without one).

    Llama-3.1-8B at TP 2 (1 MiB per rank per 16-token block), 32 GiB: copies 2, blocks of
    2 MiB, 16,384 blocks = 262,144 tokens; DeepSeek-V3 at TP 8 keeps one copy of its MLA pages.
    """
    if settings.kv_offloading_size is None:
        return None
    assert est.vllm is not None
    gpu_blocks = cap.num_gpu_blocks
    copies = 1 if replicated_layout(est, settings) else settings.tp * settings.pp
    block = est.vllm.bytes_per_block * copies
    aligned = -(-block // PAGE_BYTES) * PAGE_BYTES if block else 0
    if settings.kv_offloading_backend != "native":
        return KvTier(
            backend=settings.kv_offloading_backend,
            size_bytes=settings.kv_offloading_bytes,
            copies=copies,
            cpu_block_bytes=aligned,
            cpu_blocks=None,
            cpu_kv_tokens=None,
            gpu_blocks=gpu_blocks,
            ratio_to_gpu_pool=None,
            mirrors_only=False,
        )
    blocks = settings.kv_offloading_bytes // aligned if aligned else 0
    tokens = _tier_tokens(blocks, est, settings)
    ratio = blocks / gpu_blocks if gpu_blocks > 0 else float("inf")
    return KvTier(
        backend="native",
        size_bytes=settings.kv_offloading_bytes,
        copies=copies,
        cpu_block_bytes=aligned,
        cpu_blocks=blocks,
        cpu_kv_tokens=tokens,
        gpu_blocks=gpu_blocks,
        ratio_to_gpu_pool=round(ratio, 4) if gpu_blocks > 0 else None,
        mirrors_only=blocks <= gpu_blocks,
    )


def _tier_tokens(blocks: int, est: KVEstimate, settings: ServeSettings) -> int:
    return blocks * est.block_size * settings.dcp  # a DCP block spans block_size x dcp


def cpu_tier_tokens(est: KVEstimate, settings: ServeSettings) -> int | None:
    """Tokens the native CPU tier holds per engine (one DP rank: its TP/PP ranks together),
    as :func:`kv_tier`'s ``cpu_kv_tokens``; None without a native tier (lmcache sizes its
    own)."""
    if settings.kv_offloading_size is None or settings.kv_offloading_backend != "native":
        return None
    assert est.vllm is not None
    copies = 1 if replicated_layout(est, settings) else settings.tp * settings.pp
    block = est.vllm.bytes_per_block * copies
    aligned = -(-block // PAGE_BYTES) * PAGE_BYTES if block else 0
    blocks = settings.kv_offloading_bytes // aligned if aligned else 0
    return _tier_tokens(blocks, est, settings)


def offloaded_bytes(stage_bytes: tuple[int, ...] | list[int], settings: ServeSettings) -> int:
    """Weights ``--cpu-offload-gb`` moves to pinned host memory over the whole deployment:
    each GPU moves up to X GiB of its own weights (``stage_bytes``: one GPU of each pipeline
    stage), on tp x dp GPUs per stage."""
    cap = settings.cpu_offload_bytes
    return sum(min(cap, w) for w in stage_bytes) * settings.tp * settings.dp


def offload_caveat(settings: ServeSettings) -> tuple[str, bool] | None:
    """What to tell a user of ``--cpu-offload-gb``, and whether it is a warning: a 0.2x
    release before 0.33 may not offload at all (the V2 model runner installed no offloader)."""
    if not settings.cpu_offload_gb:
        return None

    version = parse_version(settings.vllm_version) if settings.vllm_version else None
    if version is not None and V2_RUNNER_SINCE <= version[:2] < OFFLOAD_FIXED_IN:
        return (
            f"--cpu-offload-gb under vLLM {settings.vllm_version}: releases before 0.33 install "
            "no weight offloader in Model Runner V2 (the default for many models; vllm#51396, "
            "seen on 0.25.1), so the flag may do nothing and the weights stay on the GPU; "
            "check the startup log for 'Total CPU offloaded parameters'",
            True,
        )
    return (
        "--cpu-offload-gb: vLLM 0.33 offloads in both model runners; 0.2x releases before it "
        "ignored the flag under Model Runner V2 (vllm#51396): look for 'Total CPU offloaded "
        "parameters' in the startup log. Offloaded weights cross PCIe every forward pass",
        False,
    )


def is_multimodal(dep: Deployment) -> bool:
    """A model with a vision or audio tower (its config has a ``vision_config`` or an
    ``audio_config``), for the processor cache."""
    config = dep.spec.config
    return any(key in config for key in ("vision_config", "audio_config"))


def mm_processor_cache_bytes(dep: Deployment) -> int:
    """The multimodal processor caches of a multimodal model: 4 GiB in each API server and
    each engine core, ``api_server_count`` defaulting to the DP size: 4 GiB x 2 x dp."""
    if not is_multimodal(dep):
        return 0
    dp = dep.settings.dp
    return MM_PROCESSOR_CACHE_BYTES * (dp + dp)


@dataclass(frozen=True, kw_only=True)
class HostRam:
    """Host memory the deployment pins or caches beyond the processes themselves (JSON
    ``host_ram_bytes``: ``total`` and the parts)."""

    kv_offload: int = 0
    pinned_weights: int = 0
    lora_cpu_cache: int = 0
    mm_processor_cache: int = 0

    @property
    def total(self) -> int:
        return self.kv_offload + self.pinned_weights + self.lora_cpu_cache + self.mm_processor_cache

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "kv_offload": self.kv_offload,
            "pinned_weights": self.pinned_weights,
            "lora_cpu_cache": self.lora_cpu_cache,
            "mm_processor_cache": self.mm_processor_cache,
        }


def host_ram(
    dep: Deployment, weights: Weights, lora: LoraBuffers | None, tier: KvTier | None
) -> HostRam:
    """The host RAM of ``dep``: the native KV tier of each DP engine, the pinned offloaded
    weights of every GPU, every worker's LoRA CPU cache (``max_cpu_loras`` whole adapters, at
    most), and the multimodal processor caches.

    Llama-3.1-8B at TP 2 with ``--kv-offloading-size 32 --cpu-offload-gb 2``: 32 GiB + 2 x 2 GiB
    = 36 GiB."""
    s = dep.settings
    workers = s.tp * s.pp * s.dp
    kv = tier.size_bytes * s.dp if tier is not None and tier.backend == "native" else 0
    cache = lora.max_cpu_loras * lora.adapter_bytes * workers if lora is not None else 0
    return HostRam(
        kv_offload=kv,
        pinned_weights=weights.offloaded_bytes,
        lora_cpu_cache=cache,
        mm_processor_cache=mm_processor_cache_bytes(dep),
    )


def describe_tier(tier: KvTier | None) -> dict[str, Any] | None:
    """JSON ``kv_offload``."""
    if tier is None:
        return None
    return {
        "backend": tier.backend,
        "size_bytes": tier.size_bytes,
        "copies": tier.copies,
        "cpu_block_bytes": tier.cpu_block_bytes,
        "cpu_blocks": tier.cpu_blocks,
        "cpu_kv_tokens": tier.cpu_kv_tokens,
        "gpu_blocks": tier.gpu_blocks,
        "ratio_to_gpu_pool": tier.ratio_to_gpu_pool,
        "mirrors_only": tier.mirrors_only,
    }
