"""What a vLLM boot log states (:class:`BootLog`): its settings, the start-up figures per DP rank
(:class:`RankFigures`), speculative decoding's acceptance (:class:`SpecDecodeLog`), the runtime
samples and how it ended; :mod:`planner.diagnose.boot_log` reads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The most DP ranks a log is read as having (a 256-node cluster of 16 GPUs at TP 1): a larger
# data_parallel_size, or a prefix's larger rank, is a corrupt line, not a deployment.
MAX_DP_RANKS = 4096


# The BootLog fields that are one GPU rank's budget, and their names in RankFigures (JSON
# ``ranks[]``, named as ``kvplan estimate --json`` names the same figures).
RANK_FIELDS = {
    "total_gpu_bytes": "total_gpu_bytes",
    "requested_bytes": "requested_bytes",
    "weights_bytes": "weights_bytes",
    "activation_bytes": "activation_bytes",
    "non_torch_bytes": "non_torch_bytes",
    "consumed_bytes": "consumed_bytes",
    "cuda_graph_bytes": "cuda_graph_bytes",
    "cuda_graph_capture_bytes": "cuda_graph_capture_bytes",
    "cuda_graph_estimate_bytes": "cuda_graph_estimate_bytes",
    "available_kv_bytes": "available_kv_bytes",
    "kv_in_use_bytes": "kv_in_use_bytes",
    "kv_cache_tokens": "kv_cache_size_tokens",
    "max_concurrency": "max_concurrency",
    "concurrency_len": "max_model_len",
}


@dataclass
class RankFigures:
    """What one data-parallel rank's engine logged of its GPU budget (JSON ``ranks[]``); None
    when that rank did not log it.

    ``max_model_len`` is the request length ``max_concurrency`` is for ("Maximum concurrency
    for 16,000 tokens per request: 26.30x"); ``lines`` maps each figure to its 1-based line.
    The other fields mean what :class:`BootLog`'s fields of the same name mean
    (``kv_cache_size_tokens`` is its ``kv_cache_tokens``).

    Worked example (``vllm-v1-dp3-ep-qwen3-30b-a3b.log``, vLLM 0.33, DP 3 x TP 2): rank 1's
    engine logs only "GPU KV cache size: 1,092,256 tokens, Maximum concurrency for 32,768
    tokens per request: 33.33x" (line 20), so ``RankFigures(rank=1,
    kv_cache_size_tokens=1092256, max_concurrency=33.33, max_model_len=32768)``; its workers
    print nothing of their memory (vLLM logs those once per node).
    """

    rank: int
    total_gpu_bytes: int | None = None
    requested_bytes: int | None = None
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    cuda_graph_capture_bytes: int | None = None
    cuda_graph_estimate_bytes: int | None = None
    available_kv_bytes: int | None = None
    kv_in_use_bytes: int | None = None
    kv_cache_size_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    lines: dict[str, int] = field(default_factory=dict)


@dataclass
class SpecDecodeLog:
    """Speculative decoding as the log states it (``--speculative-config``) and how its drafts
    fared (the runtime "SpecDecoding metrics" lines).

    Attributes:
        method: vLLM's ``method`` ("mtp", "eagle", "eagle3", "ngram", "draft_model", ...).
        num_speculative_tokens: draft tokens proposed per step.
        draft_model: the drafter's checkpoint as logged (the target's own for MTP); None for
            ngram and when not logged.
        mean_acceptance_length: each stat line's "Mean acceptance length" (tokens a step
            emits, the bonus token included).
        accepted_tokens, drafted_tokens: the stat lines' "Accepted: N tokens" and "Drafted:
            N tokens", summed.

    Worked example: the config line of vLLM 0.20.1 with ``speculative_config=
    SpeculativeConfig(method='mtp', model='~/.cache/huggingface/qwen3.6-27b-autoround-int4',
    num_spec_tokens=3)`` is ``SpecDecodeLog(method="mtp", num_speculative_tokens=3,
    draft_model="~/.cache/huggingface/qwen3.6-27b-autoround-int4")``.
    """

    method: str | None = None
    num_speculative_tokens: int | None = None
    draft_model: str | None = None
    mean_acceptance_length: list[float] = field(default_factory=list)
    accepted_tokens: int = 0
    drafted_tokens: int = 0


@dataclass
class BootLog:
    """What a vLLM log states, in bytes (from its GiB) and counts; None when not logged.

    ``settings`` holds the serve settings the log states, keyed by kvplan's names (the keys of
    :data:`~planner.deployment.SPELLINGS`: ``tp`` for vLLM's ``tensor_parallel_size``), each
    value as the log printed it (``16000``, ``False``, ``"auto"``): checking them is the
    reader's job (:mod:`planner.diagnose.settings`). ``lines`` maps each fact to the 1-based
    line it came from (the last occurrence wins: a log with several boots describes the last
    one).

    A data-parallel log (``data_parallel_size`` above 1, or lines of a rank above 0) also has
    ``ranks``, each DP rank's own figures by rank; the budget figures here are then DP rank
    0's, and a figure rank 0 did not log is the lowest rank's that did. ``data_parallel_size``
    and ``expert_parallel`` are vLLM's ``data_parallel_size`` and ``enable_expert_parallel``
    as the log states them (None: not stated). A log of one engine has no ``ranks``.
    """

    engine: str | None = None  # "V1" or "V0"
    version: str | None = None
    model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    total_gpu_bytes: int | None = None
    requested_bytes: int | None = None
    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = None  # weights + non-torch, as vLLM >= 0.2x logs it
    cuda_graph_bytes: int | None = None
    cuda_graph_capture_bytes: int | None = None  # "Graph capturing finished ..., took X GiB"
    # vLLM >= 0.21 "Estimated CUDA graph memory: X GiB total" (gpu_model_runner.py 0.31.0:
    # 6747-6750): the graph memory the budget subtracts before the pool, unless
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (``graph_estimate_disabled``, its warning)
    cuda_graph_estimate_bytes: int | None = None
    graph_estimate_disabled: bool = False
    # vLLM >= 0.21 "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35
    # (largest=256)" (gpu_model_runner.py 0.30.0:6697): the graphs of each mode it will capture,
    # as {mode: (count, largest size in tokens)}
    cuda_graph_modes: dict[str, tuple[int, int]] = field(default_factory=dict)
    # vLLM >= 0.27 logs "X GiB for consumed memory (weights + non-torch), Y GiB for peak
    # activation, and Z GiB for CUDAGraph memory": Y is the transient peak plus the subtracted
    # graph estimate (gpu_worker.py 0.27.1:527-529, 0.31.0:668-670), Z the graphs captured
    # after sizing (cuda_graph_capture_bytes); 0.11-0.26 log the peak alone ("for weight, ...")
    activation_includes_graph_estimate: bool = False
    available_kv_bytes: int | None = None
    # "Current kv cache memory in use is X GiB", the start-up summary's last words: vLLM prints
    # available_kv_cache_memory_bytes there (gpu_worker.py 0.20.0:659-660, 0.31.0:951-952), so
    # a log that quotes only it has its available KV read from it (``available_from_in_use``)
    kv_in_use_bytes: int | None = None
    available_from_in_use: bool = False
    # vLLM >= 0.34 sizes the pool after warm-up ("Extended KV cache to N blocks (G GiB)."):
    # then ``available_kv_bytes`` is that pool and ``reserved_kv_bytes`` the "Available KV
    # cache memory" reserved before it
    measured_pool: bool = False
    reserved_kv_bytes: int | None = None
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_len: int | None = None
    error_max_model_len: int | None = None
    error_needed_bytes: int | None = None
    error_available_bytes: int | None = None
    estimated_max_model_len: int | None = None
    no_kv_memory: bool = False
    oom_tried_bytes: int | None = None
    oom_free_bytes: int | None = None
    oom_reserved_unallocated_bytes: int | None = None
    kv_usage_pct: list[float] = field(default_factory=list)
    max_waiting: int = 0
    prefix_hit_pct: list[float] = field(default_factory=list)
    preemptions: int = 0
    # "Encoder cache will be initialized with a budget of N tokens, and profiled with M
    # <modality> items of the maximum feature size" (multimodal models, vLLM V1)
    encoder_budget_tokens: int | None = None
    encoder_profile_items: int | None = None
    encoder_profile_modality: str | None = None
    lines: dict[str, int] = field(default_factory=dict)
    recognised: int = 0
    data_parallel_size: int | None = None
    expert_parallel: bool | None = None
    ranks: dict[int, RankFigures] = field(default_factory=dict)
    speculative: SpecDecodeLog | None = None
    max_running: int = 0  # the most "Running: N reqs" of the stat lines
    # (prompt, generation) tokens/s of each stat line that states both
    throughput: list[tuple[float, float]] = field(default_factory=list)
    # "Free memory on device (60.87/79.19 GiB) on startup" (0.33: "on device cuda:0 (...)"):
    # what another process holds
    startup_free_bytes: int | None = None
    # start-up milestones reached, by name (STAGES), each with its line; "serving" once the
    # API server is up or a stat line is printed
    milestones: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # the first error line vLLM printed (its own words)
    # PP ranks' weights ("(Worker_PP1 pid=...) Model loading took 31.2 GiB"), by PP rank
    pp_weights: dict[int, int] = field(default_factory=dict)
    # the top-k/top-p sampler vLLM chose at start-up ("flashinfer" or "native"), from
    # topk_topp_sampler.py's lines (boot_log._sampler); None: not logged
    sampler: str | None = None
    # the MoE kernel gpt-oss's MXFP4 experts run on ("marlin" or "triton"), from mxfp4.py's
    # "Using Marlin backend" / "Using Triton backend" (boot_log._mxfp4); None: not logged
    mxfp4_backend: str | None = None

    @property
    def crash_stage(self) -> str | None:
        """The start-up step a log that ends in an error before serving was in: the step after
        the last milestone it reached, or the one vLLM's error names; None for a log that
        reached serving or shows no error."""
        if self.served or (self.error is None and self.oom_tried_bytes is None):
            return None
        error = (self.error or "").lower()
        if "free memory on device" in error:
            return "the start-up memory check"
        if "warming up sampler" in error:
            return "sampler warm-up"
        if "cuda graph" in error or "cudagraph" in error:
            return "CUDA-graph capture"
        steps = {k: v for k, v in self.milestones.items() if k != "serving"}
        return max(steps, key=lambda k: steps[k]) if steps else "start-up"

    @property
    def budget_activation(self) -> tuple[int | None, bool]:
        """The activation peak the budget subtracted, as logged, and whether that figure still
        holds the subtracted graph estimate: a >= 0.27 line's peak less the "Estimated CUDA
        graph memory" line when both are logged (and the estimate applied), else the peak as
        printed. Worked example (0.31.0, Llama-3.1-8B, A100): 1.44 GiB for peak activation
        with an estimate of 0.50 is a 0.94 GiB peak; without the estimate line, (1.44, True)."""
        peak = self.activation_bytes
        if peak is None or not self.activation_includes_graph_estimate:
            return peak, False
        if self.graph_estimate_disabled:  # none applied: the peak is the peak
            return peak, False
        if self.cuda_graph_estimate_bytes is not None:
            return peak - self.cuda_graph_estimate_bytes, False
        return peak, True

    @property
    def budget_graphs(self) -> int | None:
        """The CUDA-graph memory the budget subtracted, as logged: the estimate line (0 when
        VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turned it off), else the "for weight"
        line's graphs (0.11-0.26: the capture, which the 0.20-0.26 estimate stands for); None
        when the only figure is inside the activation peak (:attr:`budget_activation`)."""
        if self.graph_estimate_disabled:
            return 0
        if self.cuda_graph_estimate_bytes is not None:
            return self.cuda_graph_estimate_bytes
        return self.cuda_graph_bytes

    @property
    def served(self) -> bool:
        """The log reached serving: the API server came up or a stat line was printed."""
        return "serving" in self.milestones

    @property
    def data_parallel(self) -> bool:
        """Whether the log is of more than one DP engine (stated, or seen in its prefixes)."""
        return (self.data_parallel_size or 1) > 1 or any(rank > 0 for rank in self.ranks)
