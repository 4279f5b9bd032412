"""What fits on a GPU: each engine's memory budget and vLLM's own capacity numbers.

vLLM 0.33 (``Worker.determine_available_memory``; shared/ENGINES.md §1.2)::

    requested    = ceil(total * gpu_memory_utilization)
    available_kv = requested - weights - activation_peak - non_torch - cuda_graphs
    num_blocks   = available_kv // bytes_per_block
    concurrency  = num_blocks / blocks_per_request          # "Maximum concurrency ... X.XXx"
    tokens       = int(concurrency * max_model_len)          # "GPU KV cache size: N tokens"

``weights`` are exact when safetensors headers are available. ``activation_peak``,
``non_torch`` and ``cuda_graphs`` are *estimates* calibrated on the measured startups in
shared/CALIBRATION.md; ``kvplan verify`` measures them on a GPU.

Worked example (Llama-3.1-8B, H100 79.18 GiB, gmu 0.9, 8,192 batched tokens, CALIBRATION.md
row 1): requested 71.26 GiB - weights 14.96 - activation 4.76 - non-torch 0.13 = 51.41 GiB;
2 MiB per block -> 26,322 blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.config import fields as config_fields
from planner.deployment import (
    CUDA_GRAPH_DEFAULT_BYTES,
    VLLM_DEFAULT_GMU,
    Deployment,
    check_gmu,
)
from planner.kv_layout import KVEstimate, estimate
from planner.model.specs import ModelSpec
from planner.units import GIB, MIB, format_gib
from planner.weights import Weights

if TYPE_CHECKING:
    from planner.multimodal import MMProfile

# Activation peak of vLLM's profile run (``GPUModelRunner.profile_run``): a forward pass over
# T = max_num_batched_tokens, then, for a generating model on the last PP rank, the sampler
# warm-up (``_dummy_sampler_run``) over R = min(T, max_num_seqs) rows of the vocabulary's
# logits in fp32, with several copies alive at its peak (top-k/top-p sorting, softmax,
# log-probs, and a second pass that warms the seeded path):
#     bytes = R x vocab x 4 B x 9.515  +  T x hidden x 2.553 B  +  27 MB
# A least-squares fit to the six measured startups of CALIBRATION.md (T 8,192, R 1,024 on an
# H100; vocab 128k-201k, hidden 1,024-8,192): within 0.0004 GiB of each. A pooling runner has
# no sampler term. ``vllm serve`` on a small GPU (2,048 / 256) costs what the old
# T-proportional fit gave; the LLM class (8,192 / 256) or a small --max-num-seqs costs far less.
ACT_SAMPLER_COPIES_MILLI = 9515
ACT_HIDDEN_MILLI_BYTES = 2553
ACT_CONST_BYTES = 27_100_000
# CUDA graphs (``profile_cudagraph_memory``, subtracted from the budget from vLLM 0.20): the
# capture grows with the number of captured batch sizes (1, 2, 4, then every 8 up to 256,
# every 16 up to min(2 x max_num_seqs, 512)) and the layers each graph spans. 0.32 MiB per
# layer per size fits the captures public logs report (tests/data/vllm_startups.json: 28
# layers x 51 sizes 0.48-0.50 GiB, 24 x 51 0.37-0.39, 80 x 51 1.22) within 0.25 GiB.
GRAPH_LAYER_SIZE_BYTES = 335_544
# Memory outside torch's allocator that appears after vLLM's first snapshot (cuBLAS, NCCL):
# measured 0.13 GiB at TP 1 and 0.55 GiB at TP 2 (CALIBRATION.md).
NON_TORCH_TP1_BYTES = round(0.13 * GIB)
NON_TORCH_TPN_BYTES = round(0.55 * GIB)


def activation_peak_bytes(
    spec: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int | None = None,
    runner: str = "generate",
) -> int:
    """Estimated peak of vLLM's profile run: the sampler warm-up over
    ``min(max_num_batched_tokens, max_num_seqs)`` rows of fp32 logits plus a forward term
    (see the module constants). ``max_num_seqs`` None: ``max_num_batched_tokens / 8``, the
    ratio of ``vllm serve``'s defaults.

    Llama-3.1-8B (vocab 128,256, hidden 4,096) at 8,192 / 1,024 on an H100:
    1,024 x 128,256 x 4 x 9.515 = 4.65 GiB + 8,192 x 4,096 x 2.553 = 0.08 GiB + 27 MB
    = 4.76 GiB, CALIBRATION.md's measured 4.76.
    """
    vocab = spec.config.get("vocab_size") or spec.config.get("padded_vocab_size") or 32000
    rows = min(max_num_batched_tokens, max_num_seqs or max(1, max_num_batched_tokens // 8))
    sampler = (
        rows * int(vocab) * 4 * ACT_SAMPLER_COPIES_MILLI // 1000 if runner == "generate" else 0
    )
    forward = max_num_batched_tokens * spec.hidden_size * ACT_HIDDEN_MILLI_BYTES // 1000
    return sampler + forward + ACT_CONST_BYTES


def cuda_graph_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """The batch sizes vLLM 0.33 captures by default (``VllmConfig._set_cudagraph_sizes``):
    1, 2, 4, multiples of 8 below 256, multiples of 16 from 256, up to
    ``min(2 x max_num_seqs, 512, max_num_batched_tokens)``. 256 sequences -> 51 sizes."""
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [n for n in (1, 2, 4) if n <= top]
    sizes += list(range(8, min(top + 1, 256), 8))
    sizes += list(range(256, top + 1, 16))
    return sizes


def cuda_graph_estimate_bytes(est: KVEstimate, decode_query_len: int = 1) -> int:
    """What vLLM's CUDA-graph profiling will subtract, estimated: 0.32 MiB per layer of the
    rank's pipeline stage per captured size (see the constant). Llama-3.1-8B (32 layers) at
    256 sequences: 32 x 51 x 335,544 B = 0.51 GiB; at 8 sequences (5 sizes) 0.05 GiB."""
    assert est.vllm is not None
    layers = est.pp_layers[1] - est.pp_layers[0]
    seqs, tokens = est.vllm.max_num_seqs, est.vllm.max_num_batched_tokens
    sizes = set(cuda_graph_sizes(seqs * decode_query_len, tokens))
    if decode_query_len > 1:
        # speculative decoding: decode batches are 1 + k tokens per sequence; vLLM 0.33
        # appends those sizes (request counts x query length) to the token grid
        sizes |= {n * decode_query_len for n in cuda_graph_sizes(seqs, 512)}
    return layers * len(sizes) * GRAPH_LAYER_SIZE_BYTES


# vLLM 0.33's --all2all-backend choices, declared with the setting (planner.config.fields)
ALL2ALL_BACKENDS = config_fields.ALL2ALL_BACKENDS
# DeepEP's NVLink buffer per GPU, VLLM_DEEPEP_BUFFER_SIZE_MB (default 1024) MiB
# (vllm/distributed/device_communicators/all2all.py, _make_all2all_kwargs); across nodes the
# high-throughput kernels add an RDMA buffer of the same size, the low-latency ones one sized by
# DeepEP's get_low_latency_rdma_size_hint (not modelled).
DEEPEP_BUFFER_BYTES = 1024 * MIB


def all2all_buffer_bytes(backend: str, expert_parallel: bool) -> int:
    """Memory an expert-parallel all-to-all backend reserves on each GPU outside torch's
    allocator (so vLLM's profile counts it as non-torch): DeepEP's NVLink buffer, 1 GiB by
    default; 0 for the default allgather_reducescatter, and without expert parallelism."""
    if expert_parallel and backend.startswith("deepep"):
        return DEEPEP_BUFFER_BYTES
    return 0


def non_torch_bytes(tp: int, pp: int = 1) -> int:
    """cuBLAS/NCCL memory outside torch: larger once ranks talk to each other."""
    return NON_TORCH_TP1_BYTES if tp * pp == 1 else NON_TORCH_TPN_BYTES


@dataclass(frozen=True)
class VllmCapacity:
    """vLLM's startup numbers for one plan, per GPU rank (the most-loaded one): the budget
    terms and capacity of ``kvplan estimate --gpu --json`` (flattened to the top level).

    Attributes:
        requested_bytes: ``ceil(total x gpu_memory_utilization)``.
        weights_bytes: exact from safetensors headers, else derived from the config.
        activation_peak_bytes, non_torch_bytes, cuda_graph_bytes: *estimates* (see the module
            docstring for the calibration); ``headroom_bytes`` is the user's own reserve.
        available_kv_bytes: requested minus those terms, or ``--kv-cache-memory`` when
            ``kv_cache_memory_override``; vLLM's "Available KV cache memory".
        num_gpu_blocks: ``available // bytes_per_block`` (one of them is the null block).
        kv_cache_size_tokens, max_concurrency: vLLM's "GPU KV cache size" and "Maximum
            concurrency" lines: ``num_gpu_blocks / blocks_per_request`` requests of
            ``max_model_len``, and that many times the length in tokens.
        fits: vLLM starts, i.e. one ``max_model_len`` request fits the pool less the null
            block; else ``error`` is vLLM's message and ``estimated_max_model_len`` its
            estimate of the longest length that would.
        mamba_max_num_seqs: for hybrids, the most sequences the state blocks can hold.
        max_num_batched_tokens, max_num_seqs: vLLM's resolved batch settings for this GPU.

    Worked example (CALIBRATION.md row 1, Llama-3.1-8B on an H100 at gmu 0.9): requested
    71.26 GiB - weights 14.96 - activation 4.76 - non-torch 0.13 = 51.41 GiB available.
    """

    gpu_memory_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    headroom_bytes: int
    available_kv_bytes: int
    kv_cache_memory_override: bool
    bytes_per_block: int
    blocks_per_request: int
    num_gpu_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float
    max_model_len: int
    estimated_max_model_len: int | None
    fits: bool
    error: str | None
    mamba_max_num_seqs: int | None
    max_num_batched_tokens: int
    max_num_seqs: int
    one_line_log: bool = True  # 0.33 logs tokens and concurrency on one line
    # a multimodal encoder's share of activation_peak_bytes (planner.multimodal)
    encoder_activation_bytes: int = 0

    @property
    def log_lines(self) -> list[str]:
        """The lines vLLM prints at startup, in its version's wording (``format_gib``: 2
        decimals; tokens and concurrency on one line from 0.33, two lines before)."""
        lines = [f"Available KV cache memory: {format_gib(self.available_kv_bytes)} GiB"]
        if self.fits:
            size = f"GPU KV cache size: {self.kv_cache_size_tokens:,} tokens"
            concurrency = (
                f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
                f"{self.max_concurrency:.2f}x"
            )
            if self.one_line_log:
                lines.append(f"{size}, {concurrency}")
            else:
                lines += [size, concurrency]
        elif self.error:
            lines.append(f"ValueError: {self.error}")
        return lines


# How far the estimated terms were off in public start-up logs (tests/data/vllm_startups.json,
# benchmarks/budget_accuracy.py): the sampler warm-up came out up to 1.1 GiB lower than
# modelled where FlashInfer's sampler keeps fewer logits copies (RTX 4090, 256 rows: 0.25-0.31
# GiB logged against 1.38), and within 0.1 GiB above it; non-torch memory ranged 0.04-0.56 GiB
# on one GPU and 0.2-1.6 GiB per rank with TP/PP (0.21 at TP 4 without custom all-reduce, 1.4
# with it at TP 2, more with Ray across nodes); CUDA-graph captures within 0.3 GiB of the
# estimate.
ACT_LOW_BYTES = round(1.1 * GIB)
ACT_HIGH_BYTES = GIB // 10
NON_TORCH_RANGE = {1: (round(0.04 * GIB), round(0.56 * GIB)), 2: (GIB // 5, round(1.6 * GIB))}
GRAPH_SPREAD_BYTES = round(0.3 * GIB)


def estimate_ranges(cap: VllmCapacity, ranks: int) -> dict[str, tuple[int, int]]:
    """(low, high) bytes of each estimated term and of the KV memory they leave, from the
    spread measured in public start-up logs (see the constants); ``ranks`` is TP x PP. A
    fixed pool (``--kv-cache-memory``) has no range: vLLM takes it as given.

    Llama-3.1-8B on an H100 at 8,192 / 1,024: activation 4.76 GiB -> 3.66-4.86; non-torch
    0.13 -> 0.04-0.56; the KV memory gets the opposite spread, 51.0 GiB -> 50.4-52.5.
    """
    act, nt, graphs = cap.activation_peak_bytes, cap.non_torch_bytes, cap.cuda_graph_bytes
    lm = act - cap.encoder_activation_bytes
    # a multimodal encoder's share is an estimate from its shapes: half of it either way
    spread = cap.encoder_activation_bytes // 2
    act_range = (act - min(lm * 8 // 10, ACT_LOW_BYTES) - spread, act + ACT_HIGH_BYTES + spread)
    nt_range = NON_TORCH_RANGE[1 if ranks == 1 else 2]
    nt_range = (min(nt_range[0], nt), max(nt_range[1], nt))
    graph_range = (max(0, graphs - GRAPH_SPREAD_BYTES), graphs + GRAPH_SPREAD_BYTES)
    if graphs == 0:
        graph_range = (0, 0)  # eager mode, a version that does not subtract, or told 0
    terms = {
        "activation_peak_bytes": act_range,
        "non_torch_bytes": nt_range,
        "cuda_graph_bytes": graph_range,
    }
    if cap.kv_cache_memory_override:
        return {**terms, "available_kv_bytes": (cap.available_kv_bytes, cap.available_kv_bytes)}
    base = (act, nt, graphs)
    low = cap.available_kv_bytes - sum(r[1] - b for r, b in zip(terms.values(), base, strict=True))
    high = cap.available_kv_bytes + sum(b - r[0] for r, b in zip(terms.values(), base, strict=True))
    return {**terms, "available_kv_bytes": (low, high)}


def vllm_capacity(
    est: KVEstimate,
    *,
    estimate_at: Callable[[int], KVEstimate],
    gpu_memory_bytes: int,
    weights_bytes: int,
    activation_bytes: int,
    gpu_memory_utilization: float = VLLM_DEFAULT_GMU,
    kv_cache_memory_bytes: int | None = None,
    cuda_graph_bytes: int = CUDA_GRAPH_DEFAULT_BYTES,
    non_torch: int | None = None,
    headroom_bytes: int = 0,
    one_line_log: bool = True,
    encoder_activation_bytes: int = 0,
) -> VllmCapacity:
    """vLLM's available KV memory, block count, token capacity and concurrency.

    Args:
        est: the vLLM :class:`KVEstimate` (bytes per block, blocks per request).
        estimate_at: ``callable(max_model_len) -> KVEstimate`` for the max-length search.
        gpu_memory_bytes: total device memory as the driver reports it.
        weights_bytes: weights on the most-loaded rank.
        activation_bytes: activation peak of the profile run.
        gpu_memory_utilization: fraction of the total vLLM may use.
        kv_cache_memory_bytes: vLLM's ``--kv-cache-memory-bytes``; replaces the profiled budget.
        cuda_graph_bytes: CUDA-graph estimate subtracted by vLLM >= 0.21 (0 with eager mode).
        non_torch: memory outside torch's allocator (default by TP size).
        headroom_bytes: extra memory the user wants to keep free.
        one_line_log: the version logs tokens and concurrency on one line.
        encoder_activation_bytes: a multimodal encoder's share of ``activation_bytes``.

    Returns:
        The :class:`VllmCapacity`.
    """
    check_gmu(gpu_memory_utilization)
    assert est.vllm is not None
    layout = est.vllm
    requested = math.ceil(gpu_memory_bytes * gpu_memory_utilization)
    non_torch = (
        non_torch_bytes(est.tensor_parallel_size, est.pipeline_parallel_size)
        if (non_torch is None)
        else non_torch
    )
    if kv_cache_memory_bytes is not None:
        available = kv_cache_memory_bytes
    else:
        available = (
            requested
            - weights_bytes
            - activation_bytes
            - non_torch
            - cuda_graph_bytes
            - headroom_bytes
        )
    bpb = layout.bytes_per_block
    bpr = layout.blocks_per_request
    num_blocks = max(0, available // bpb) if bpb else 0
    concurrency = num_blocks / bpr if bpr else 0.0
    tokens = int(concurrency * est.max_model_len)
    check = available - bpb  # the null block is reserved before admission (BlockPool)
    error = None
    estimated = None
    if available <= 0:
        error = (
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    elif bpb * bpr > check:
        estimated = _max_len_that_fits(estimate_at, est.max_model_len, check, bpb * bpr)
        error = (
            f"To serve at least one request with the model's max seq len "
            f"({est.max_model_len}), ({format_gib(bpb * bpr)} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({format_gib(check)} GiB)."
            + (
                f" Based on the available memory, the estimated maximum model length is "
                f"{estimated}."
                if estimated
                else ""
            )
            + " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
    has_state = any(g.is_state for g in layout.groups)
    return VllmCapacity(
        gpu_memory_bytes=gpu_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        requested_bytes=requested,
        weights_bytes=weights_bytes,
        activation_peak_bytes=activation_bytes,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=cuda_graph_bytes,
        headroom_bytes=headroom_bytes,
        available_kv_bytes=available,
        kv_cache_memory_override=kv_cache_memory_bytes is not None,
        bytes_per_block=bpb,
        blocks_per_request=bpr,
        num_gpu_blocks=num_blocks,
        kv_cache_size_tokens=tokens,
        max_concurrency=concurrency,
        max_model_len=est.max_model_len,
        estimated_max_model_len=estimated,
        fits=error is None,
        error=error,
        mamba_max_num_seqs=num_blocks if has_state else None,
        max_num_batched_tokens=layout.max_num_batched_tokens,
        max_num_seqs=layout.max_num_seqs,
        one_line_log=one_line_log,
        encoder_activation_bytes=encoder_activation_bytes,
    )


def _max_len_that_fits(
    estimate_at: Callable[[int], KVEstimate], max_len: int, budget: int, full_bytes: int
) -> int:
    """vLLM ``_estimate_max_model_len_from_groups``: the longest request in [1, max_len] whose
    blocks fit ``budget`` bytes (0 when not even one token fits).

    vLLM bisects [1, max_len]; the bytes a request needs never fall as it grows, so the answer
    is the same from any bracket. This one starts at the proportional guess
    ``max_len x budget / full_bytes`` (``full_bytes``: what ``max_len`` needs), exact for full
    attention up to a block, and widens a bracket around it: 3-6 estimates instead of ~17.
    """
    cache: dict[int, int] = {max_len: full_bytes}

    def fits(length: int) -> bool:
        if length not in cache:
            e = estimate_at(length)
            assert e.vllm is not None
            cache[length] = int(e.vllm.bytes_per_block * e.vllm.blocks_per_request)
        return cache[length] <= budget

    guess = min(max_len, max(1, max_len * budget // full_bytes)) if full_bytes else max_len
    lo, hi, step = 1, max_len, 16  # the answer is in [lo - 1, hi]
    if fits(guess):
        lo = guess + 1
        while lo <= hi and fits(min(hi, guess + step)):
            lo, step = min(hi, guess + step) + 1, step * 2
        hi = min(hi, guess + step)
    else:
        hi = guess - 1
        while hi >= lo and not fits(max(lo, guess - step)):
            hi, step = max(lo, guess - step) - 1, step * 2
        lo = max(lo, guess - step)
    best = lo - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def estimate_at_length(dep: Deployment) -> Callable[[int], KVEstimate]:
    """``length -> KVEstimate`` for ``dep`` at another ``max_model_len`` (vLLM's search for the
    longest request that fits)."""
    settings = replace(dep.settings, max_model_len=None, auto_fit_max_model_len=False)

    def at(length: int) -> KVEstimate:
        return estimate(dep.spec, replace(settings, max_model_len=length), dep.gpu, batch_sizes=())

    return at


def graph_bytes(dep: Deployment, est: KVEstimate) -> int:
    """The CUDA-graph bytes the budget subtracts: the user's ``--cuda-graph-memory`` (0 with
    ``--enforce-eager``), else :func:`cuda_graph_estimate_bytes` where the version subtracts
    graphs (0.20 on), else 0: before 0.20 graphs were captured after the KV cache was sized."""
    s = dep.settings
    if s.cuda_graph_bytes is not None:
        return s.cuda_graph_bytes
    if not s.rules.subtracts_cuda_graphs:
        return 0
    k = s.speculative.num_speculative_tokens if s.speculative and s.speculative.has_drafter else 0
    return cuda_graph_estimate_bytes(est, 1 + k)


def mm_profile(dep: Deployment, est: KVEstimate, weights: Weights) -> MMProfile | None:
    """What a multimodal model's encoder adds to vLLM's profile run on ``dep`` at the batch
    settings ``est`` resolved (:func:`planner.multimodal.profile`); None for a text model."""
    tower = dep.spec.vision
    if tower is None or est.vllm is None:
        return None
    from planner.multimodal import profile

    s = dep.settings
    lm = activation_peak_bytes(
        dep.spec, est.vllm.max_num_batched_tokens, est.vllm.max_num_seqs, s.runner
    )
    sized = weights.tower_bytes or tower.bytes
    return profile(
        tower,
        s,
        max_model_len=est.max_model_len,
        max_num_batched_tokens=est.vllm.max_num_batched_tokens,
        max_num_seqs=est.vllm.max_num_seqs,
        lm_activation_bytes=lm,
        tower_total_bytes=sized,
        tower_source=weights.source if weights.tower_bytes else "config",
    )


def _talking_ranks(dep: Deployment) -> int:
    """The GPUs one rank's collectives span: its TP group, or for a MoE model with DP (experts
    sharded over dp x tp, all-to-all with EP) all dp x tp; a dense model's DP ranks are
    independent engines."""
    from planner.weights import _num_experts

    s = dep.settings
    if s.dp > 1 and (s.enable_expert_parallel or _num_experts(dep.spec.config, dep.spec.name)):
        return s.tp * s.dp
    return s.tp


def vllm_budget(
    dep: Deployment,
    est: KVEstimate,
    weights: Weights,
    estimate_at: Callable[[int], KVEstimate] | None = None,
) -> VllmCapacity:
    """:func:`vllm_capacity` for one deployment: its GPU's total, its settings' utilisation,
    KV pool override, CUDA-graph and headroom bytes, and the activation peak at the token
    budget ``est`` resolved (with a multimodal model's encoder outputs and tower activations
    as the profile run holds them: :func:`mm_profile`). The one place every command sizes
    vLLM's pool."""
    assert est.vllm is not None
    s = dep.settings
    mm = mm_profile(dep, est, weights)
    encoder = mm.activation_bytes if mm is not None else 0
    return vllm_capacity(
        est,
        estimate_at=estimate_at or estimate_at_length(dep),
        gpu_memory_bytes=dep.gpu.memory_bytes if dep.gpu else 0,
        weights_bytes=weights.bytes_per_rank,
        activation_bytes=activation_peak_bytes(
            dep.spec, est.vllm.max_num_batched_tokens, est.vllm.max_num_seqs, s.runner
        )
        + encoder,
        encoder_activation_bytes=encoder,
        gpu_memory_utilization=s.gmu,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,
        cuda_graph_bytes=graph_bytes(dep, est),
        non_torch=non_torch_bytes(_talking_ranks(dep), s.pp)
        + all2all_buffer_bytes(s.all2all_backend, s.enable_expert_parallel and s.gpus > 1),
        headroom_bytes=s.headroom_bytes,
        one_line_log=s.rules.one_line_capacity_log,
    )


# --------------------------------------------------------------------------- other engines


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
