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
row 1, vLLM v0.11.0): requested 71.26 GiB - weights 14.96 - activation 4.76 - non-torch 0.13
= 51.41 GiB; 2 MiB per block -> 26,322 blocks. The terms move with the release
(planner.vllm_rules): in 0.19.0 the activation is 1.92 and non-torch 0.25, 54.14 GiB left.
What vLLM runs after allocating the pool is checked by :func:`post_allocation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.activation import (
    ACT_CONST_BYTES,
    ACT_HIDDEN_MILLI_BYTES,
    activation_peak_bytes,
    cuda_graph_estimate_bytes,
    cuda_graph_modes,
    forward_peak_bytes,
    sampler_bytes,
)
from planner.config import fields as config_fields
from planner.deployment import (
    CUDA_GRAPH_DEFAULT_BYTES,
    VLLM_DEFAULT_GMU,
    Deployment,
    ServeSettings,
    check_gmu,
)
from planner.kv_layout import KVEstimate, VllmLayout, estimate
from planner.layer_shapes import num_experts_of
from planner.multimodal import profile
from planner.units import GIB, MIB, format_gib
from planner.vllm_rules import NEWEST as NEWEST_RULES
from planner.vllm_rules import Sampler, VllmRules, parse_version
from planner.weights import Weights

if TYPE_CHECKING:
    from planner.gpus import Gpu
    from planner.multimodal import MMProfile

# The CUDA context and what torch creates with it, outside vLLM's "Free memory on device"
# (measured at start-up, after the context exists): 78.66 of 79.19 GiB free on an idle H100
# (vLLM 0.10.2), 23.05 of 23.56 on an RTX 3090.
CUDA_CONTEXT_BYTES = GIB // 2


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


# Memory outside torch's allocator that appears during the profile (cuBLAS workspaces, NCCL's
# communicators and buffers): per release and layout in planner.vllm_rules
# (``non_torch_single_bytes``, ``non_torch_comm_bytes``). vLLM's custom all-reduce keeps an 8
# MiB buffer, 8 MiB plus metadata for signals and 8 MiB of rank data per GPU
# (``custom_all_reduce.py`` 0.19.0:59, :187); it runs for TP >= 2 over NVLink, and over PCIe
# only for 2 GPUs (it turns itself off when more are not fully connected).
CUSTOM_ALL_REDUCE_BYTES = 24 * MIB
# ROCm (HIP runtime, hipBLASLt, RCCL) on one GPU. Nothing in vLLM's ROCm path adds to it by
# default: no FlashInfer workspace (its sampler and backends are CUDA-only), AITER off
# (envs.py 0.33.0:1267), custom all-reduce only on gfx94x/gfx95x and only in a TP group
# (platforms/rocm.py 0.33.0:1270-1273); the measurement itself is CUDA's (memory_profiling's
# non-torch growth from the post-init snapshot, utils/mem_utils.py 0.33.0:298-306). So the
# figure is read from cited logs: the two calibration start-ups of one model and one vLLM
# build on kyuz0's Radeon AI PRO R9700 (tests/data/vllm_startups.json, Llama-3.1-8B-Instruct,
# 0.11.2.dev690, gmu 0.98 of 31.98 GiB, 15.0586 GiB of weights, 0.34 GiB of kvplan's
# activation) leave 31.3404 - 15.0586 - 0.34 - 15.33 = 0.61 GiB (run folder amd-r9700-uv+pl)
# and - 12.73 = 3.21 GiB (amd-r9700) of non-torch: the point is their middle, 1.91, off by
# 1.3 GiB either way. What sets the mode is not in vLLM: the same build, model and flags give
# both; the 12-09 folder is 2.0-2.6 GiB lower for four of its six models (not gemma-3 or
# Qwen3-Next). The mode is the session's: the uv+pl folder (12-13) is the same build, only
# undervolted and power-limited, and the 0.13.0rc2 ROCM_ATTN build (rocm_atten, 12-20) logs
# the same pools as it to the token (Llama-3.1-8B 15.33 GiB, 125,616 tokens), so neither the
# attention backend nor the release can pick the point (docs/vllm-budget.md). Issue 23's
# 2.12 GiB on a 48 GB Radeon (no public log) lies inside. The range
# is those logs': 0.61 to 3.73 (the same folder's Qwen3-14B-FP8, calibration).
ROCM_NON_TORCH_BYTES = round(1.91 * GIB)
ROCM_NON_TORCH_RANGE = (round(0.5 * GIB), round(3.75 * GIB))
# kvplan's reading of a GPU whose interconnect the catalog does not know: NVLink's figure,
# the larger one, so an unknown node never gets more KV memory than it may have.
DEFAULT_INTERCONNECT = "nvlink"
INTERCONNECTS = ("nvlink", "xgmi", "pcie")
_ROCM_WORDS = ("amd", "radeon", "instinct", "mi210", "mi250", "mi300", "mi325", "mi350", "mi355")


def is_rocm(gpu: Gpu | None) -> bool:
    """An AMD GPU (vLLM runs it on ROCm): by its catalog vendor, else its interconnect (xGMI)
    or its name (the catalog's ``rx-7900-xtx`` names no AMD word: the vendor says it)."""
    if gpu is None:
        return False
    if gpu.vendor == "amd":
        return True
    name = gpu.name.lower()
    return gpu.interconnect == "xgmi" or any(w in name for w in _ROCM_WORDS)


def data_center_blackwell(gpu: Gpu | None) -> bool:
    """An NVIDIA GPU of compute capability 10.x (B200, GB200, B300): vLLM's
    ``is_device_capability_family(100)`` (``platforms/interface.py`` 0.30.0:481-493), where
    its CUDA graphs reach 1,024 tokens from 0.28 (:class:`planner.activation.GraphRules`)."""
    cc = gpu.cuda_capability if gpu is not None else None
    return cc is not None and cc[0] == 10


def custom_all_reduce_runs(gpu: Gpu | None) -> bool:
    """Whether vLLM's custom all-reduce can run on ``gpu``: on ROCm only on gfx94x/gfx95x
    (MI300/MI350: ``RocmPlatform.use_custom_allreduce``, ``platforms/rocm.py``
    0.33.0:1270-1273), so a Radeon's or an MI200's TP group has none of its buffers."""
    if gpu is None or not is_rocm(gpu):
        return True
    return (gpu.gfx_target or "").startswith(("gfx94", "gfx95"))


def non_torch_bytes(
    tp: int,
    pp: int = 1,
    *,
    rules: VllmRules | None = None,
    interconnect: str | None = None,
    custom_all_reduce: bool = True,
    rocm: bool = False,
) -> int:
    """Memory outside torch on one rank whose collectives span ``tp`` GPUs, for ``rules``'
    release (the newest when None). Pipeline stages only pass activations to their
    neighbour (NCCL point-to-point), so ``pp`` adds nothing (issue 23: PP alone 0.07 GiB);
    a group of >= 2 adds the release's NVLink/xGMI or PCIe figure (``interconnect`` None:
    :data:`DEFAULT_INTERCONNECT`), less vLLM's custom all-reduce buffers where it is off.

    H100, 0.19 on: TP 1 0.25 GiB, TP 2 over NVLink 0.25 + 1.88 = 2.13 (logged 2.06-2.21);
    v0.11.0: 0.13 and 0.13 + 0.42 = 0.55 (CALIBRATION.md).
    """
    del pp  # point-to-point between stages: within the single-GPU figure
    r = rules or NEWEST_RULES
    single = ROCM_NON_TORCH_BYTES if rocm else r.non_torch_single_bytes
    if tp <= 1:
        return single
    link = interconnect or DEFAULT_INTERCONNECT
    nvlink, pcie = r.non_torch_comm_bytes
    comm = pcie if link == "pcie" else nvlink
    uses_custom = link != "pcie" or tp == 2
    if uses_custom and not custom_all_reduce:
        comm = max(0, comm - CUSTOM_ALL_REDUCE_BYTES)
    return single + comm


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
            concurrency" lines: the blocks over the KV-cache groups at the smallest block
            size (:func:`logged_kv_tokens`), and ``num_gpu_blocks / blocks_per_request``
            requests of ``max_model_len``.
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
    # What runs after the pool is allocated (:func:`post_allocation`): CUDA graphs captured
    # after sizing (not in the budget), the sampler warm-up's peak and what is free for them.
    graphs_after_sizing_bytes: int = 0
    warmup_bytes: int = 0
    post_allocation_free_bytes: int | None = None
    free_at_start_bytes: int | None = None
    # vLLM >= 0.34's extensible KV cache (:class:`MeasuredSizing`): the margin it keeps free
    # beyond the activation peak, and the address range it reserves first (its "Available KV
    # cache memory" line); None where the pool is sized from the profile run
    measured_margin_bytes: int | None = None
    reserved_kv_bytes: int | None = None
    # the term a won't-start names ("gpu_free_memory", "available_kv", "max_model_len",
    # "cuda_graphs", "sampler_warmup") and the changes that start (as settings)
    wont_start_term: str | None = None
    start_changes: tuple[dict[str, object], ...] = ()
    # the spread of the estimated terms for this release and layout (:func:`term_ranges`);
    # None: the release-blind spread of :func:`estimate_ranges`
    activation_range: tuple[int, int] | None = None
    non_torch_range: tuple[int, int] | None = None
    # the activation peak's two phases: the forward over max_num_batched_tokens and the
    # sampler warm-up over min(max_num_seqs, max_num_batched_tokens) rows (0 for pooling)
    activation_forward_bytes: int = 0
    activation_sampler_bytes: int = 0
    dcp: int = 1  # the decode-context-parallel size the logged tokens are multiplied by

    @property
    def log_lines(self) -> list[str]:
        """The lines vLLM prints at startup, in its version's wording (``format_gib``: 2
        decimals; tokens and concurrency on one line from 0.33, two lines before)."""
        if self.wont_start_term == "gpu_free_memory":  # refused before loading the weights
            return [f"ValueError: {self.error}"]
        if self.reserved_kv_bytes is not None:
            # 0.34: the reservation first, then the pool measured after warm-up
            # (v1/worker/extensible_kv_cache.py 0.34.0:536-540)
            lines = [f"Available KV cache memory: {format_gib(self.reserved_kv_bytes)} GiB"]
            if self.fits:
                lines.append(
                    f"Extended KV cache to {self.num_gpu_blocks} blocks "
                    f"({format_gib(self.num_gpu_blocks * self.bytes_per_block)} GiB)."
                )
        else:
            lines = [f"Available KV cache memory: {format_gib(self.available_kv_bytes)} GiB"]
        if self.wont_start_term in ("cuda_graphs", "sampler_warmup"):
            size = f"GPU KV cache size: {self.kv_cache_size_tokens:,} tokens"
            lines.append(size)  # the pool was sized and allocated; then the warm-up died
            error = self.error or ""
            lines.append(
                error if self.wont_start_term == "cuda_graphs" else f"RuntimeError: {error}"
            )
            return lines
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
# GiB logged against 1.38), and within 0.1 GiB above it; non-torch memory ranged 0.02-0.56 GiB
# on one GPU (0.02 logged on a 24 GB card in 0.10.2, 0.06 on a 16 GB one in 0.26, 0.13 on
# H100s in 0.11.0, 0.56 under WSL2 in 0.27.1) and 0.2-1.6 GiB per rank with TP/PP (0.21 at TP
# 4 without custom all-reduce, 1.4 with it at TP 2, more with Ray across nodes); CUDA-graph
# captures within 0.3 GiB of the estimate.
ACT_LOW_BYTES = round(1.1 * GIB)


ACT_HIGH_BYTES = GIB // 10


NON_TORCH_RANGE = {1: (round(0.02 * GIB), round(0.56 * GIB)), 2: (0, round(1.6 * GIB))}


GRAPH_SPREAD_BYTES = round(0.3 * GIB)


# Per release (:func:`term_ranges`): the sampler part of the activation can be another
# implementation's where the default is unavailable (FlashInfer opt-in in 0.18-0.23, or not
# installed/supported from 0.24: the Triton path then) -- scaled by the ratio of their
# copies -- plus 0.1 GiB either way and 8 % of the sampler above (gemma-3-27b, 0.19.0: 3.99
# logged against 3.83); non-torch from 0.19: 1.4-2.4 GiB per rank that talks over NVLink or
# xGMI (issue 23's H100 figures, 2.06-2.21: not cited), 0-2.4 over PCIe (4 x L40S in 0.19.0
# leaves +0.14, as 4 x L40S in 0.24.0 do; 4 x RTX 3090 in 0.19.0 log 1.12-1.21
# GiB of activation, with a vision encoder's profile, and non-torch together, and the same
# box in 0.18.1 0.12), 0.02-0.56
# alone. Before 0.19 a PCIe group logs as little as nothing (that box in 0.18.1): 0-1.6.
NON_TORCH_RANGE_19 = (round(1.4 * GIB), round(2.4 * GIB))


NON_TORCH_RANGE_19_PCIE = (0, round(2.4 * GIB))


# NCCL's NVLink SHARP (NVLS) buffers: NCCL turns NVLS on by itself for a communicator of more
# than 2 GPUs on an NVSwitch system of Hopper or later (vllm-project/vllm#9699, measured on
# H100/H200: "it seems NVLS is only enabled for n > 2 GPUs"), and maps its buffers on every
# rank: "NVLS comm ... nHeads 8 ... nvlsPerRankSize 301989888 nvlsTotalSize 2415919104" in
# that TP 8 log, 2.25 GiB a GPU. Where they appear in the profile the group's
# non-torch figure rises by up to that much: three held-out H100 start-ups of vLLM 0.10.0 at
# TP 4 and TP 8 leave 1.5-1.8 GiB less than kvplan's activation + non-torch (0.13 + 0.42,
# set on a TP 2 group, where NVLS is off), 4 x A800 at TP 4 over NVLink (no NVLS: an Ampere
# part) leave what kvplan says. NCCL's own source places the buffers in the profile but does
# not make them that large in the releases vLLM 0.10 runs: from NCCL 2.22 the communicator
# connects each algorithm at its first use (``runtimeConn``, NCCL_RUNTIME_CONNECT default 1,
# ``src/init.cc`` v2.22.3-1:1153; ``src/enqueue.cc`` v2.26.2-1:422-430), so the NVLS buffers
# are mapped at the first all-reduce that picks NVLS, one of the profile's large ones, not at
# the 1-element warm-up before vLLM's snapshot; and they are 16 channels x 2 x 1 MiB (128 KiB
# chunks x 8 steps) per head (``src/transport/nvls.cc`` v2.26.2-1:144, 149, 289-292), 0.25 GiB
# at 8 GPUs under torch 2.7.1's NCCL 2.26.2 (2.25 GiB in vllm#9699 is an older NCCL's sizing).
# So NVLS explains a tenth of the 1.5-1.8 GiB; the rest is not established: an upper end of
# the range before 0.19, not the estimate (0.19's NVLink figure, 1.88, holds it).
NVLS_BYTES = 2_415_919_104


# The sort's copies where the log says the native sampler ran: 9.515 at 1,024 rows (the fit),
# 8.4 at 256 rows (A100 40GB, 0.11.0: 1.21 GiB of activation and non-torch logged) and about
# 5.7 at 128 rows (L4, 0.11.0, gmu 0.92: 0.53 GiB): the low end takes 40 % off the sort term.
SORT_LOW_MILLI = 400


def term_ranges(
    rules: VllmRules,
    activation: int,
    parts: tuple[int, int, int, int],
    non_torch: int,
    talks: bool,
    rocm: bool,
    link: str | None = None,
    nvls: bool = False,
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(activation, non-torch) (low, high) for ``rules``' release. ``parts`` is the
    activation's (forward, sampler, held hidden states, the other sampler implementation's
    sampler): the peak may be the other implementation's, the forward is good to 20 %.
    ``link`` is how the ranks that talk do (None: :data:`DEFAULT_INTERCONNECT`); ``nvls``:
    NCCL may map its NVLS buffers (:func:`nvls_possible`), up to :data:`NVLS_BYTES` more."""
    forward, sampler, held, alt = parts

    def low_end(name: str, rows_bytes: int) -> int:
        # the sort's 9.515 copies were fitted at 1,024 rows; fewer rows kept fewer (above)
        if name == "sort":
            rows_bytes -= rows_bytes * SORT_LOW_MILLI // 1000
        peak = max(forward, rows_bytes + held) + ACT_CONST_BYTES
        return peak - ACT_HIGH_BYTES - (forward // 5 if forward >= rows_bytes + held else 0)

    other = max(forward, alt + held) + ACT_CONST_BYTES
    fwd_spread = forward // 5 if forward >= sampler + held else 0
    top = 0 if rules.sampler == "sort" else sampler * 8 // 100
    act = (
        min(low_end(rules.sampler, sampler), low_end(_other_sampler(rules), alt)),
        max(activation, other) + top + ACT_HIGH_BYTES + fwd_spread,
    )
    if rocm:
        nt = ROCM_NON_TORCH_RANGE
    elif talks and rules.non_torch_single_bytes < GIB // 5:
        nt = NON_TORCH_RANGE[2]
        if nvls:
            nt = (nt[0], max(nt[1], non_torch + NVLS_BYTES))
    elif talks:
        pcie = (link or DEFAULT_INTERCONNECT) == "pcie"
        nt = NON_TORCH_RANGE_19_PCIE if pcie else NON_TORCH_RANGE_19
    else:
        nt = NON_TORCH_RANGE[1]
    return act, (min(nt[0], non_torch), max(nt[1], non_torch))


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
    if cap.activation_range is not None:
        # the release's spread of the language model's own peak; the encoder's share on top
        lo, hi = cap.activation_range
        enc = cap.encoder_activation_bytes
        act_range = (lo + enc - spread, hi + enc + spread)
    nt_range = NON_TORCH_RANGE[1 if ranks == 1 else 2]
    nt_range = (min(nt_range[0], nt), max(nt_range[1], nt))
    if cap.non_torch_range is not None:
        nt_range = cap.non_torch_range
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


def logged_kv_tokens(num_blocks: int, layout: VllmLayout, dcp: int = 1) -> int:
    """vLLM's "GPU KV cache size: N tokens" for a pool of ``num_blocks``: the blocks shared out
    over the KV-cache groups, at the smallest group block size, times the decode-context-
    parallel size (``v1/core/kv_cache_utils.py`` 0.10.0:991-997, and :831 for one group,
    ``num_blocks x block_size``; 0.11.0:1076-1087; 0.19.0:1297-1311). One group: every block
    holds ``block_size`` tokens of every layer. A hybrid (sliding window + full, Mamba or
    linear attention + full) logs the tokens of one group's share, not what its requests can
    hold: gpt-oss-20b's 2 groups log half its blocks x 16 (kyuz0's RTX 3090 run, 0.12.0: 7.12
    GiB, 19,442 blocks of 12 x 32 KiB, 155,584 tokens)."""
    if not layout.groups:
        return 0
    return num_blocks // len(layout.groups) * min_group_block_size(layout) * dcp


def bytes_per_logged_token(bytes_per_block: int, layout: VllmLayout, dcp: int = 1) -> float:
    """The pool bytes behind each token of "GPU KV cache size" (:func:`logged_kv_tokens`'s
    inverse): a block of every group per ``min_block_size x dcp`` tokens logged."""
    groups = len(layout.groups) or 1
    return bytes_per_block * groups / (min_group_block_size(layout) * dcp)


def min_group_block_size(layout: VllmLayout) -> int:
    """The smallest block size of the layout's KV-cache groups (vLLM's ``min_block_size``)."""
    return min((g.block_size for g in layout.groups), default=1)


# vLLM >= 0.34's extensible KV cache keeps free, beyond the activation peak it measured, a
# margin of max(1 GiB (3 GiB on ROCm), 0.75 x that peak) (``KV_CACHE_MARGIN_FLOOR_BYTES``,
# ``KV_CACHE_MARGIN_FRACTION``, v1/worker/extensible_kv_cache.py 0.34.0:64-65)
MEASURED_MARGIN_FLOOR_BYTES = GIB
MEASURED_MARGIN_FLOOR_ROCM_BYTES = 3 * GIB
MEASURED_MARGIN_MILLI = 750


@dataclass(frozen=True)
class MeasuredSizing:
    """vLLM >= 0.34's extensible KV cache (:attr:`planner.deployment.ServeSettings.
    measured_kv_sizing`): the pool is sized after warm-up and CUDA-graph capture from the
    memory measured then (``measure_kv_cache_bytes``, v1/worker/extensible_kv_cache.py
    0.34.0:592-618)::

        pool = min(requested - N, free_at_start - N - margin) - P

    N is what vLLM holds beside the cache (weights, non-torch, the captured graphs), P the
    transient peak it keeps free, which starts as the profile's activation plus the graph
    estimate (``peak_activation_memory``, gpu_worker.py 0.34.0:942-948; the graphs are in N
    and in P) and ``margin = max(floor, 0.75 x P)``. The sizing steps' own peaks
    (``run_kv_cache_sizing_warmup``) can raise P further; kvplan does not model them.
    ``free_at_start_bytes`` is the GPU's free memory when vLLM starts (the total less the CUDA
    context, or ``--gpu-free-memory``); the request is only a cap: 0.34 never refuses it
    against free memory (v1/worker/utils.py 0.34.0:783-796)."""

    free_at_start_bytes: int
    margin_floor_bytes: int = MEASURED_MARGIN_FLOOR_BYTES


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
    after: AfterSizing | None = None,
    rules: VllmRules | None = None,
    dcp: int = 1,
    measured: MeasuredSizing | None = None,
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
        after: what runs after the pool is allocated (:class:`AfterSizing`); None checks
            nothing after sizing.
        rules: the release whose non-torch default applies (the newest when None).
        dcp: the decode-context-parallel size (vLLM multiplies its logged tokens by it).
        measured: 0.34's pool measured after warm-up (:class:`MeasuredSizing`); None: the
            pool is what the profile leaves of the request.

    Returns:
        The :class:`VllmCapacity`.
    """
    check_gmu(gpu_memory_utilization)
    assert est.vllm is not None
    layout = est.vllm
    requested = math.ceil(gpu_memory_bytes * gpu_memory_utilization)
    non_torch = (
        non_torch_bytes(est.tensor_parallel_size, est.pipeline_parallel_size, rules=rules)
        if (non_torch is None)
        else non_torch
    )
    margin = reserved = None
    if kv_cache_memory_bytes is not None:
        available = kv_cache_memory_bytes
    else:
        terms = weights_bytes + activation_bytes + non_torch + cuda_graph_bytes + headroom_bytes
        available = requested - terms
        if measured is not None:
            # the peak kept free starts as the profile's activation plus the graph estimate
            # (gpu_worker.py 0.34.0:942-948), while N holds the graphs as captured: 0.34
            # counts the graphs twice
            peak = activation_bytes + cuda_graph_bytes
            margin = max(measured.margin_floor_bytes, peak * MEASURED_MARGIN_MILLI // 1000)
            reserved = available
            available = min(available, measured.free_at_start_bytes - terms - margin) - (
                cuda_graph_bytes
            )
    bpb = layout.bytes_per_block
    bpr = layout.blocks_per_request
    num_blocks = max(0, available // bpb) if bpb else 0
    concurrency = num_blocks / bpr if bpr else 0.0
    tokens = logged_kv_tokens(num_blocks, layout, dcp)
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
    term = None if error is None else ("max_model_len" if estimated else "available_kv")
    has_state = any(g.is_state for g in layout.groups)
    cap = VllmCapacity(
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
        dcp=dcp,
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
        wont_start_term=term,
        measured_margin_bytes=margin,
        reserved_kv_bytes=reserved,
    )
    return post_allocation(cap, after) if after is not None else cap


@dataclass(frozen=True)
class AfterSizing:
    """What vLLM runs after it has allocated the KV pool, for :func:`post_allocation`.

    Attributes:
        graphs_bytes: CUDA graphs captured after sizing and not in the budget (before 0.20,
            and on ROCm where the release skips the estimate); 0 in eager mode.
        warmup_bytes: the sampler warm-up's peak over ``warmup_rows`` rows
            (``compile_or_warm_up_model``), plus, where the release does not reuse the
            profile's reservation, the compile-range forward it runs before.
        warmup_rows: ``min(max_num_seqs, max_num_batched_tokens)``: vLLM's "dummy requests".
        reuses_activation: the warm-up may use the memory the activation peak was sized for
            (:attr:`planner.vllm_rules.VllmRules.warmup_reuses_activation`).
        free_at_start_bytes: vLLM's "Free memory on device" at start-up: the user's
            ``--gpu-free-memory`` less the CUDA context, else the total less it.
        gpu_free_given: ``--gpu-free-memory`` was given (vLLM's start-up refusal applies).
        sampler_bytes_per_row: the warm-up's sampler bytes per row (for the max_num_seqs
            that fits).
    """

    graphs_bytes: int
    warmup_bytes: int
    warmup_rows: int
    reuses_activation: bool
    free_at_start_bytes: int
    gpu_free_given: bool = False
    sampler_bytes_per_row: int = 0


def post_allocation(cap: VllmCapacity, after: AfterSizing) -> VllmCapacity:
    """``cap`` with what vLLM does after sizing the pool checked against what is left.

    vLLM refuses at start-up when its free-memory snapshot is below the request
    (``request_memory``, ``v1/worker/utils.py`` 0.33.0:757-765; ``gpu_worker.py`` 0.11.0:
    185-195). After the pool (``requested - weights - activation - non-torch [- graphs]``)
    is allocated, ``compile_or_warm_up_model`` captures the CUDA graphs (those the budget did
    not subtract come out of the rest) and warms up the sampler over ``warmup_rows`` rows
    (``gpu_worker.py`` 0.19.0:672-686), which needs its peak again. What is free for them:

        free = free_at_start - requested + (activation if the release reuses it)

    When graphs + warm-up exceed it, vLLM dies with torch's out-of-memory error (graphs) or
    "CUDA out of memory occurred when warming up sampler with N dummy requests" (the
    sampler, ``gpu_model_runner.py`` 0.19.0:5600-5606). The changes that start: a lower
    gpu_memory_utilization, fewer max_num_seqs (the warm-up's rows), --enforce-eager (no
    graphs). Worked example, gpt-oss-20b on an H100 at gmu 0.95, vLLM 0.19.0: free =
    79.18 - 0.5 - 75.22 = 3.46 GiB (no reuse in 0.19); graphs 0.39 + the compile-range
    forward 0.70 + the sampler 1,024 x 201,088 x 4 x 3.70 = 2.84 (+ 27 MB) = 3.96 GiB: won't
    start. At 0.9, 7.42 GiB is free: it starts (issue 23's log).
    """
    total = cap.gpu_memory_bytes
    free_start = after.free_at_start_bytes
    base = replace(
        cap,
        graphs_after_sizing_bytes=after.graphs_bytes,
        warmup_bytes=after.warmup_bytes,
        free_at_start_bytes=free_start if after.gpu_free_given else None,
    )
    if cap.measured_margin_bytes is not None:
        # 0.34 sizes the pool after warm-up and capture from what it measures: nothing runs
        # after it, and free memory below the request shrinks the pool instead of refusing
        return replace(base, free_at_start_bytes=free_start)
    own_pool = cap.kv_cache_memory_override and not after.gpu_free_given
    if free_start < cap.requested_bytes and not own_pool and (after.gpu_free_given or cap.fits):
        gmu = math.floor(free_start / total * 100) / 100 if total else 0.0
        error = (
            f"Free memory on device ({format_gib(free_start)}/{format_gib(total)} GiB) on "
            f"startup is less than desired GPU memory utilization "
            f"({cap.gpu_memory_utilization}, {format_gib(cap.requested_bytes)} GiB). Decrease "
            "GPU memory utilization or reduce GPU memory used by other processes."
        )
        if not after.gpu_free_given:
            error += (
                f" (kvplan: the CUDA context takes about {format_gib(CUDA_CONTEXT_BYTES)} GiB "
                "before vLLM measures; give --gpu-free-memory for what is really free.)"
            )
        changes: tuple[dict[str, object], ...] = (
            ({"gpu_memory_utilization": gmu},) if gmu > 0 else ()
        )
        return replace(
            base,
            fits=False,
            error=error,
            wont_start_term="gpu_free_memory",
            start_changes=changes,
        )
    if not cap.fits or cap.kv_cache_memory_override and not after.gpu_free_given:
        return base
    reuse = cap.activation_peak_bytes if after.reuses_activation else 0
    free = free_start - cap.requested_bytes + reuse
    if cap.kv_cache_memory_override:
        # a fixed pool: vLLM allocates what it is told, next to the weights and terms
        free = free_start - (
            cap.weights_bytes + cap.non_torch_bytes + cap.available_kv_bytes + cap.headroom_bytes
        )
    base = replace(base, post_allocation_free_bytes=free)
    need = after.graphs_bytes + after.warmup_bytes
    if need <= free:
        return base
    kv_reserve = cap.requested_bytes - cap.available_kv_bytes  # the terms the pool leaves out
    changes_list: list[dict[str, object]] = []
    # the highest utilisation whose leftover holds it (the pool shrinks with it)
    top = (free_start + reuse - need) / total if total else 0.0
    gmu = math.floor(top * 100) / 100
    if gmu > 0 and (gmu * total - kv_reserve) > cap.bytes_per_block * cap.blocks_per_request:
        changes_list.append({"gpu_memory_utilization": gmu})
    if after.sampler_bytes_per_row and after.warmup_rows > 1:
        room = free - after.graphs_bytes - (after.warmup_bytes - _rows_bytes(after))
        rows = room // after.sampler_bytes_per_row
        if 0 < rows < after.warmup_rows:
            changes_list.append({"max_num_seqs": _round_down(rows)})
    if after.graphs_bytes and after.warmup_bytes <= free:
        changes_list.append({"enforce_eager": True})
    if after.graphs_bytes > free:
        term = "cuda_graphs"
        error = (
            "torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs "
            f"(kvplan: the graphs need {format_gib(after.graphs_bytes)} GiB after the KV cache "
            f"is allocated; {format_gib(max(free, 0))} GiB is left)."
        )
    else:
        term = "sampler_warmup"
        error = (
            "CUDA out of memory occurred when warming up sampler with "
            f"{after.warmup_rows} dummy requests. Please try lowering `max_num_seqs` or "
            "`gpu_memory_utilization` when initializing the engine. (kvplan: the warm-up "
            f"needs {format_gib(after.warmup_bytes)} GiB after the KV cache is allocated"
            + (f" and the graphs {format_gib(after.graphs_bytes)}" if after.graphs_bytes else "")
            + f"; {format_gib(max(free, 0))} GiB is left)."
        )
    return replace(
        base,
        fits=False,
        error=error,
        wont_start_term=term,
        start_changes=tuple(changes_list),
    )


def _rows_bytes(after: AfterSizing) -> int:
    return after.sampler_bytes_per_row * after.warmup_rows


def _round_down(rows: int) -> int:
    """A max_num_seqs under ``rows``: a multiple of 16 where there is room, else a power of 2."""
    if rows >= 32:
        return rows - rows % 16
    return 1 << (rows.bit_length() - 1)


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


def _rules(dep: Deployment) -> VllmRules:
    """``dep``'s release rules on its GPU: on ROCm the native sampler, never FlashInfer's
    (:meth:`planner.vllm_rules.VllmRules.on_rocm`)."""
    rules = dep.settings.rules
    return rules.on_rocm() if is_rocm(dep.gpu) else rules


def graph_bytes(dep: Deployment, est: KVEstimate) -> int:
    """The CUDA-graph bytes the budget subtracts: the user's ``--cuda-graph-memory`` (0 with
    ``--enforce-eager``), else :func:`cuda_graph_estimate_bytes` where the version subtracts
    graphs (0.20 on), else 0: before 0.20 graphs were captured after the KV cache was sized."""
    s = dep.settings
    if s.cuda_graph_bytes is not None:
        return s.cuda_graph_bytes
    if not s.rules.subtracts_cuda_graphs:
        return 0
    if is_rocm(dep.gpu) and not s.rules.rocm_graph_estimate:
        return 0  # 0.20-0.25 skip the estimate on ROCm: graphs come after sizing
    return _graph_estimate(dep, est)


def _graph_estimate(dep: Deployment, est: KVEstimate) -> int:
    """:func:`cuda_graph_estimate_bytes` for ``dep``: the graphs :func:`graph_modes` counts,
    and whether their all-reduces are NCCL's (a TP group without vLLM's custom all-reduce: more
    than two PCIe GPUs, a GPU it does not run on (ROCm outside gfx94x/gfx95x,
    :func:`custom_all_reduce_runs`), or ``--disable-custom-all-reduce``;
    ``custom_all_reduce.py`` 0.19.0:153-158)."""
    s = dep.settings
    assert est.vllm is not None
    link = s.interconnect or (dep.gpu.interconnect if dep.gpu else None) or DEFAULT_INTERCONNECT
    nccl = s.tp > 1 and (
        s.disable_custom_all_reduce
        or not custom_all_reduce_runs(dep.gpu)
        or (link == "pcie" and s.tp > 2)
    )
    modes = graph_modes(s, dep.gpu, est.vllm.max_num_seqs, est.vllm.max_num_batched_tokens)
    graphs = sum(count for count, _ in modes.values())
    return cuda_graph_estimate_bytes(est, nccl_all_reduce=nccl, graphs=graphs)


def graph_modes(
    s: ServeSettings, gpu: Gpu | None, max_num_seqs: int, max_num_batched_tokens: int
) -> dict[str, tuple[int, int]]:
    """The CUDA graphs the budget counts for ``s`` on ``gpu`` at the resolved batch settings,
    per mode (:func:`planner.activation.cuda_graph_modes`: its release's sizes, a drafter's
    ``1 + k`` query length, data-center Blackwell, LoRA); empty with ``--enforce-eager``.
    What vLLM >= 0.21 logs as "Profiling CUDA graph memory: PIECEWISE=51 (largest=512),
    FULL=35 (largest=256)" for Llama-3.1-8B at 256 sequences and 2,048 tokens."""
    if s.enforce_eager:
        return {}
    k = s.speculative.num_speculative_tokens if s.speculative and s.speculative.has_drafter else 0
    release = parse_version(s.vllm_version) if s.vllm_version else None
    return cuda_graph_modes(
        max_num_seqs,
        max_num_batched_tokens,
        1 + k,
        release,
        s.runner,
        blackwell=data_center_blackwell(gpu),
        lora=s.enable_lora,
    )


def mm_profile(dep: Deployment, est: KVEstimate, weights: Weights) -> MMProfile | None:
    """What a multimodal model's encoder adds to vLLM's profile run on ``dep`` at the batch
    settings ``est`` resolved (:func:`planner.multimodal.profile`); None for a text model."""
    tower = dep.spec.vision
    if tower is None or est.vllm is None:
        return None

    s = dep.settings
    lm = activation_peak_bytes(
        dep.spec,
        est.vllm.max_num_batched_tokens,
        est.vllm.max_num_seqs,
        s.runner,
        _rules(dep),
        s.tp,
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


def nvls_possible(gpu: Gpu | None, ranks: int, link: str | None) -> bool:
    """Whether NCCL may turn NVLS on for a group of ``ranks`` (:data:`NVLS_BYTES`): more than
    2 NVIDIA GPUs of compute capability 9.0 or later talking over NVLink (an SXM part's
    NVSwitch; a GPU of unknown interconnect counts as NVLink, :data:`DEFAULT_INTERCONNECT`)."""
    if gpu is None or ranks <= 2 or (link or DEFAULT_INTERCONNECT) != "nvlink":
        return False
    cc = gpu.cuda_capability
    return cc is not None and cc >= (9, 0)


def _talking_ranks(dep: Deployment) -> int:
    """The GPUs one rank's collectives span: its TP group, or for a MoE model with DP (experts
    sharded over dp x tp, all-to-all with EP) all dp x tp; a dense model's DP ranks are
    independent engines."""
    s = dep.settings
    if s.dp > 1 and (s.enable_expert_parallel or num_experts_of(dep.spec.config, dep.spec.name)):
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
    rules = _rules(dep)
    rocm = is_rocm(dep.gpu)
    tokens, seqs = est.vllm.max_num_batched_tokens, est.vllm.max_num_seqs
    activation = activation_peak_bytes(dep.spec, tokens, seqs, s.runner, rules, s.tp)
    graphs = graph_bytes(dep, est)
    link = s.interconnect or (dep.gpu.interconnect if dep.gpu else None)
    non_torch = non_torch_bytes(
        _talking_ranks(dep),
        s.pp,
        rules=rules,
        interconnect=link,
        custom_all_reduce=not s.disable_custom_all_reduce and custom_all_reduce_runs(dep.gpu),
        rocm=rocm,
    ) + all2all_buffer_bytes(s.all2all_backend, s.enable_expert_parallel and s.gpus > 1)
    act_range, nt_range = term_ranges(
        rules,
        activation,
        _activation_parts(dep, tokens, seqs),
        non_torch,
        _talking_ranks(dep) > 1,
        rocm,
        link,
        nvls=nvls_possible(dep.gpu, _talking_ranks(dep), link),
    )
    cap = vllm_capacity(
        est,
        estimate_at=estimate_at or estimate_at_length(dep),
        gpu_memory_bytes=dep.gpu.memory_bytes if dep.gpu else 0,
        weights_bytes=weights.bytes_per_rank,
        activation_bytes=activation + encoder,
        encoder_activation_bytes=encoder,
        gpu_memory_utilization=s.gmu,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,
        cuda_graph_bytes=graphs,
        non_torch=non_torch,
        headroom_bytes=s.headroom_bytes,
        one_line_log=rules.one_line_capacity_log,
        after=after_sizing(dep, est, activation) if dep.gpu and dep.gpu.memory_bytes else None,
        rules=rules,
        dcp=s.dcp,
        measured=_measured(dep),
    )
    forward, sampler, _, _ = _activation_parts(dep, tokens, seqs)
    return replace(
        cap,
        activation_range=act_range,
        non_torch_range=nt_range,
        activation_forward_bytes=forward,
        activation_sampler_bytes=sampler,
    )


def _measured(dep: Deployment) -> MeasuredSizing | None:
    """``dep``'s :class:`MeasuredSizing` where its vLLM measures the pool (0.34 on, the
    extensible KV cache on); None otherwise, or without a GPU's total."""
    s = dep.settings
    if not s.measured_kv_sizing or dep.gpu is None or not dep.gpu.memory_bytes:
        return None
    free = (s.gpu_free_memory_bytes or dep.gpu.memory_bytes) - CUDA_CONTEXT_BYTES
    floor = MEASURED_MARGIN_FLOOR_ROCM_BYTES if is_rocm(dep.gpu) else MEASURED_MARGIN_FLOOR_BYTES
    return MeasuredSizing(free_at_start_bytes=free, margin_floor_bytes=floor)


def _activation_parts(dep: Deployment, tokens: int, seqs: int) -> tuple[int, int, int, int]:
    """(forward, sampler, held hidden states, the other sampler's) of ``dep``'s activation
    peak at ``tokens`` / ``seqs`` (:func:`term_ranges`). The other sampler: the release's
    native one where FlashInfer is the default (it falls back to it when FlashInfer is missing
    or does not support the GPU), FlashInfer where the native one is (installed, through
    0.11.0, or opted into with ``VLLM_USE_FLASHINFER_SAMPLER=1``); none when ``--sampler``
    says which runs (:attr:`planner.vllm_rules.VllmRules.sampler_stated`)."""
    s, rules = dep.settings, _rules(dep)
    rows = min(tokens, seqs)
    generating = s.runner == "generate"
    sampler = sampler_bytes(dep.spec, rows, rules) if generating else 0
    alt = replace(rules, sampler=_other_sampler(rules))
    alt_sampler = sampler_bytes(dep.spec, rows, alt) if generating else 0
    held = tokens * dep.spec.hidden_size * ACT_HIDDEN_MILLI_BYTES // 1000
    return forward_peak_bytes(dep.spec, tokens, s.tp), sampler, held, alt_sampler


def _other_sampler(rules: VllmRules) -> Sampler:
    """The sampler that may run instead of ``rules``' (:func:`_activation_parts`)."""
    if rules.sampler_stated:
        return rules.sampler
    return rules.native_sampler if rules.sampler == "flashinfer" else "flashinfer"


def after_sizing(dep: Deployment, est: KVEstimate, activation: int) -> AfterSizing:
    """What ``dep``'s vLLM runs after sizing the pool (:class:`AfterSizing`): the graphs
    its release captures outside the budget, and the sampler warm-up over
    ``min(max_num_seqs, max_num_batched_tokens)`` rows (plus, where the release does not
    reuse the activation reservation, the forward its compile-range warm-up runs first)."""
    assert est.vllm is not None and dep.gpu is not None
    s, rules = dep.settings, _rules(dep)
    tokens, seqs = est.vllm.max_num_batched_tokens, est.vllm.max_num_seqs
    rows = min(seqs, tokens)
    graphs = 0
    if not s.enforce_eager and s.cuda_graph_bytes is None:
        subtracted = rules.subtracts_cuda_graphs and (
            rules.rocm_graph_estimate or not is_rocm(dep.gpu)
        )
        if not subtracted:
            graphs = _graph_estimate(dep, est)
    generating = s.runner == "generate" and est.pp_layers[1] >= dep.spec.num_layers
    per_row = sampler_bytes(dep.spec, 1, rules) if generating else 0
    warmup = sampler_bytes(dep.spec, rows, rules) + ACT_CONST_BYTES if generating else 0
    if generating and not rules.warmup_reuses_activation:
        warmup += forward_peak_bytes(dep.spec, tokens, s.tp)
    free = (s.gpu_free_memory_bytes or dep.gpu.memory_bytes) - CUDA_CONTEXT_BYTES
    return AfterSizing(
        graphs_bytes=graphs,
        warmup_bytes=warmup,
        warmup_rows=rows,
        reuses_activation=rules.warmup_reuses_activation,
        free_at_start_bytes=free,
        gpu_free_given=s.gpu_free_memory_bytes is not None,
        sampler_bytes_per_row=per_row,
    )


# --------------------------------------------------------------------------- other engines
