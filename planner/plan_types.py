"""The result types of a plan (:class:`Plan`, keyword-only, with the rows it shows: grid cells,
the recommendation, alternatives, block sizes, prefix sharing, the naive baseline), what a plan
is asked for (:class:`PlanOptions`), and the refusal that comes before one (:class:`Refusal`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.budget import VllmCapacity
from planner.deployment import (
    ServeSettings,
    as_flags,
    positive_count,
    render_changes,
)
from planner.engine_budgets import EngineCapacity
from planner.errors import UsageError, WontStartError
from planner.features import FeatureRecord
from planner.features.multimodal import MMLever
from planner.features.speculative import SpeculativeFigures
from planner.gpus import Gpu
from planner.kv_layout import KVEstimate
from planner.offload import HostRam, KvTier
from planner.outcome import Outcome
from planner.weights import Weights

if TYPE_CHECKING:
    from planner.advise import Advice
    from planner.cluster import Cluster, LayoutRow
    from planner.lora import LoraBuffers
    from planner.multimodal import MMProfile
    from planner.simulate.workload import Workload


TARGET_KV_USAGE = 0.9

# What vLLM does with a deployment, in the words every view uses: it refuses to start (weights,
# one max_model_len request, or Mamba state blocks < max_num_seqs); it starts but, with every
# sequence at max_model_len, runs fewer than max_num_seqs at once (the rest queue or are
# preempted); or all max_num_seqs full-length sequences fit at once.
WONT_START = Outcome.WONT_START
QUEUES_AT_WORST_CASE = Outcome.QUEUES_AT_WORST_CASE
FITS_AT_WORST_CASE = Outcome.FITS_AT_WORST_CASE


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """A deployment that won't start, as ``kvplan estimate`` shows it (text and JSON) before
    its ``Error:`` line: the rule that failed (``check``: ``gpus``, ``node``,
    ``divisibility``, ``weights``, ``kv_cache_memory``, ``layouts``), why, the changes that
    start (data, best first), and every figure computed before it failed."""

    model: str
    gpu: Gpu | None
    settings: ServeSettings
    check: str
    reason: str
    changes: list[dict[str, object] | str]
    estimate: KVEstimate | None = None
    weights: Weights | None = None
    vllm: VllmCapacity | None = None
    layouts: list[LayoutRow] = field(default_factory=list)
    gpus: int | None = None  # the GPUs given (--gpus, --nodes x --gpus-per-node)
    message: str = ""  # the error's wording when not "MODEL won't start: REASON"

    @property
    def hints(self) -> list[str]:
        """The changes as flags (a sentence stays one)."""
        return [
            f"a bigger GPU ({as_flags(c)})"
            if isinstance(c, dict) and "gpu" in c
            else render_changes(c, "cli")
            for c in self.changes
        ]

    def error(self) -> WontStartError:
        hints = self.hints
        return WontStartError(
            (self.message or f"{self.model} won't start: {self.reason}")
            + (f"; try {', or '.join(hints)}" if hints else ""),
            changes=self.changes,
            refusal=self,
        )


@dataclass(frozen=True, kw_only=True)
class GridCell:
    """One cell of the ``max_model_len`` x ``max_num_seqs`` grid (JSON ``grid[]``).

    Attributes:
        max_model_len, max_num_seqs: the cell's settings.
        fits: vLLM starts with them (the outcome is not ``wont_start``).
        outcome, worst_case_running: :func:`worst_case` for the cell.
        kv_usage: blocks those requests need / usable blocks (the pool less the null block);
            above 1 they do not all fit. Qwen2.5-7B on 24 GiB at gmu 0.92: 6,837 blocks of
            896 KiB; 4,096 tokens = 256 blocks, so 16 sequences use 4,096 / 6,836 = 0.60.
        num_gpu_blocks: vLLM's pool for the cell's settings.
    """

    max_model_len: int
    max_num_seqs: int
    fits: bool
    kv_usage: float  # blocks used at full concurrency / blocks available (>1: does not fit)
    num_gpu_blocks: int
    outcome: str
    worst_case_running: int


@dataclass(frozen=True, kw_only=True)
class Recommended:
    """The suggested settings (JSON ``recommended``), labelled by what they rest on.

    Attributes:
        basis: ``workload`` (a replay of the user's traffic chose ``max_num_seqs`` and maybe
            ``gpu_memory_utilization``: :mod:`planner.advise`), ``worst_case`` (``--worst-case``:
            the largest ``max_num_seqs`` whose requests all fit at ``max_model_len`` in 90 % of
            the usable blocks) or ``engine_default`` (no traffic given: the user's
            ``max_num_seqs``, else vLLM's default, kept as it is).
        max_model_len: the user's, or when one request of it won't fit, vLLM's auto-fit
            length (``auto_fit_max_model_len``, what ``--max-model-len -1`` picks) rounded
            down to a multiple of 1,024 (at least 16 tokens less than that only when shorter).
        kv_usage: what ``max_num_seqs`` requests at ``max_model_len`` would use of the usable
            blocks (above 1 they do not all fit at once: the rest queue).
        worst_case_running: how many of them run at once (vLLM's "Maximum concurrency",
            rounded down, capped by ``max_num_seqs``).
        preemptions, usage_p90, usage_max: with a workload, the replay these settings rest on
            (None otherwise).
        reason: one sentence with the numbers.
    """

    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    block_size: int
    kv_cache_dtype: str
    kv_usage: float
    reason: str
    basis: str = "engine_default"
    worst_case_running: int = 0
    auto_fit_max_model_len: int | None = None
    preemptions: int | None = None
    usage_p90: float | None = None
    usage_max: float | None = None


@dataclass(frozen=True, kw_only=True)
class Alternative:
    """One change to the settings and what it buys: ``changes`` is the data (``{"tp": 2}``),
    ``change`` the same as flags (``--tensor-parallel-size 2``)."""

    change: str
    changes: dict[str, object]
    max_concurrency: float
    num_gpu_blocks: int
    fits: bool


@dataclass(frozen=True, kw_only=True)
class BlockSizeRow:
    """Fragmentation against block-table size for one block size (JSON ``block_sizes[]``):
    the last block of a request is on average half empty, ``(block_size - 1) / 2`` tokens;
    at 16 tokens and 2,048-token requests that is 7.5 / 2,055.5 = 0.36 %."""

    block_size: int
    wasted_tokens_per_seq: float
    fragmentation_pct: float
    block_table_entries: int


@dataclass(frozen=True, kw_only=True)
class PrefixSharing:
    """Blocks prefix caching saves when ``requests`` share a ``shared_prefix_tokens`` prompt
    (JSON ``prefix_sharing``): only whole blocks are shared, so 800 tokens x 100 requests save
    99 x 50 = 4,950 blocks of 16 tokens.

    ``running_without`` / ``running_with``: requests of ``max_model_len`` that fit the pool at
    once without and with the shared blocks (the first request holds them all, each other
    one holds only its own): Qwen2.5-7B, 6,274 usable blocks, 512 a request, 50 shared ->
    12 without, 1 + (6,274 - 512) // 462 = 13 with.
    """

    shared_prefix_tokens: int
    requests: int
    blocks_saved: int
    bytes_saved: int
    running_without: int = 0
    running_with: int = 0


@dataclass(frozen=True, kw_only=True)
class NaiveVsPaged:
    """Contiguous pre-allocation at ``max_model_len`` (transformers' static cache) against
    paged blocks holding only what ``sequences`` requests of ``avg_tokens`` use (JSON
    ``naive_vs_paged``); ``waste_pct`` is the share the naive layout reserves for nothing."""

    avg_tokens: int
    sequences: int
    naive_bytes: int
    paged_bytes: int
    waste_pct: float


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything ``kvplan estimate --gpu`` shows for one deployment; the JSON flattens it
    (``planner.render``): the estimate's keys, then ``gpu``, the vLLM budget terms and
    capacity (``vllm``), the other engines, the recommendation, grid, alternatives, trade-off
    tables, ``commands`` (ready-to-paste, by engine), ``command_files`` (the files a command
    reads, by name: :mod:`planner.commands`) and ``plan_notes``."""

    estimate: KVEstimate
    gpu: Gpu
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
    outcome: str = FITS_AT_WORST_CASE  # worst_case() of the user's own settings
    worst_case_running: int = 0
    outcome_reason: str | None = None  # why vLLM refuses to start (wont_start only)
    advice: Advice | None = None  # what replaying the user's workload measured
    command_files: dict[str, str] = field(default_factory=dict)  # name -> text a command reads
    vllm_version: str = ""  # the release whose rules the budget followed
    command_notes: list[str] = field(default_factory=list)  # notes on the other engines' commands
    cluster: Cluster | None = None  # every DP rank's pool together (planner.cluster)
    layouts: list[LayoutRow] = field(default_factory=list)  # --gpus: every TP x DP split
    node_commands: list[str] = field(default_factory=list)  # --nodes: one vllm serve per node
    # on an AMD GPU: each node's command in vLLM's ROCm image (planner.containers)
    node_docker_commands: list[str] = field(default_factory=list)
    speculative: SpeculativeFigures | None = None  # what --speculative-config costs
    expert_parallel: bool = False
    lora: LoraBuffers | None = None  # --enable-lora: the stacked buffers (inside weights)
    kv_tier: KvTier | None = None  # --kv-offloading-size: the CPU KV tier
    host_ram: HostRam = field(default_factory=HostRam)  # what the deployment holds in host RAM
    warnings: list[str] = field(default_factory=list)  # printed as the estimate's are
    mm: MMProfile | None = None  # a multimodal model's tower and encoder (planner.multimodal)
    mm_levers: list[MMLever] = field(default_factory=list)  # what turning them down buys
    layout_choice: str | None = None  # --gpus without a layout: why kvplan picked this one
    features: list[FeatureRecord] = field(default_factory=list)  # each active feature's share


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """What ``kvplan estimate`` shows beyond the settings: the grid's lengths (None: the
    default lengths; empty: no grid), the prefix-sharing example, the fragmentation example's
    average length, and the batch sizes of the worked examples."""

    grid_lens: Sequence[int] | None = None
    shared_prefix_tokens: int | None = None
    requests: int = 100
    avg_tokens: int | None = None
    batch_sizes: Sequence[int] = (1, 8, 32)
    workload: Workload | None = None  # the user's traffic: advice from replaying it
    worst_case: bool = False  # recommend max_num_seqs so every request fits at max length
    avg_prompt_tokens: int | None = None  # a workload from two averages (planner.advise)
    avg_output_tokens: int | None = None
    target_kv_usage: float = TARGET_KV_USAGE  # the peak usage the workload advice keeps under
    gpus: int | None = None  # GPUs to spread over: compare every TP x DP split of them
    nodes: int = 1  # nodes x gpus_per_node; TP and PP stay inside a node
    gpus_per_node: int | None = None

    def __post_init__(self) -> None:
        for flag, value in (
            ("--gpus", self.gpus),
            ("--nodes", self.nodes),
            ("--gpus-per-node", self.gpus_per_node),
            ("--requests", self.requests),
            ("--shared-prefix", self.shared_prefix_tokens),
            ("--avg-tokens", self.avg_tokens),
            ("--avg-prompt-tokens", self.avg_prompt_tokens),
            ("--avg-output-tokens", self.avg_output_tokens),
        ):
            positive_count(flag, value)
        if (self.avg_prompt_tokens is None) != (self.avg_output_tokens is None):
            raise UsageError("give --avg-prompt-tokens and --avg-output-tokens together")
        if self.workload is not None and self.avg_prompt_tokens is not None:
            raise UsageError(
                "give a workload (-w) or --avg-prompt-tokens/--avg-output-tokens, not both"
            )
        if self.worst_case and (self.workload is not None or self.avg_prompt_tokens is not None):
            raise UsageError("--worst-case ignores traffic; drop it or the workload")
        if not 0 < self.target_kv_usage <= 1:
            raise UsageError(f"--target-kv-usage must be in (0, 1], got {self.target_kv_usage}")
        if self.nodes > 1 and self.gpus_per_node is None:
            raise UsageError("--nodes needs --gpus-per-node")
        if self.gpus is not None and self.gpus_per_node is not None:
            if self.gpus != self.nodes * self.gpus_per_node:
                raise UsageError(
                    f"--gpus {self.gpus} is not --nodes {self.nodes} x --gpus-per-node "
                    f"{self.gpus_per_node}; give one or the other"
                )

    @property
    def total_gpus(self) -> int | None:
        """The GPUs to spread over: --gpus, or --nodes x --gpus-per-node."""
        if self.gpus is not None:
            return self.gpus
        if self.gpus_per_node is not None:
            return self.nodes * self.gpus_per_node
        return None
