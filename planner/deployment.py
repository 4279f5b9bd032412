"""One deployment: which model, on which GPU, with which serve settings (vLLM's ``VllmConfig``).

Every command builds a :class:`Deployment` once and hands it down the pipeline
(load -> KV layout -> weights/budget -> plan -> check / diagnose / simulate / verify -> views),
so the same flags give the same defaults, budget and blocks everywhere.

- :class:`Gpu` is a device as software sees it: the memory the driver reports, and the
  spec-sheet figures the simulator's roofline needs. ``is_a100`` travels inside it.
- :class:`ServeSettings` are the engine flags, parsed and validated once. ``None`` means "the
  engine's default"; auto-fitting ``max_model_len`` (vLLM's ``--max-model-len -1``) is a field.
- Each setting knows how the user spells it on the command line, in a plans file and in a vLLM
  boot log (:data:`SPELLINGS`), so suggestions travel as data (``{"tp": 2}``) and are rendered
  as ``--tensor-parallel-size 2`` or ``tp: 2`` by :func:`as_flags` and :func:`as_yaml`.

Worked example: ``kvplan estimate llama-3.1-8b --gpu a100-80gb`` is
``Deployment(model=<Llama-3.1-8B>, gpu=Gpu(name="a100-80gb", memory_bytes=85,024,112,640, ...),
settings=ServeSettings())``; vLLM's batch defaults for it are 2,048 tokens / 256 sequences
(A100s take the small-GPU defaults whatever their size), in every command.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from planner.config import fields as fields_
from planner.config import multimodal
from planner.config.lora import (
    DEFAULT_RANK,
    LoraAdapter,
    check_lora,
    check_lora_rank,
    rank_for,
    read_adapter,
)
from planner.config.multimodal import check_mode
from planner.config.offload import check_offload
from planner.config.parallel import check_parallel
from planner.errors import Rule, SettingError, UsageError
from planner.gpus import Gpu
from planner.model.specs import Engine, KVDtype, ModelSpec
from planner.speculative import NEEDS_MODEL, mtp_layers, parse_speculative
from planner.units import GIB, MAX_COUNT, parse_size
from planner.vllm_rules import (
    ENTRYPOINTS,
    RUNNERS,
    batch_defaults,
    parse_version,
    rules_for,
)

if TYPE_CHECKING:
    from planner.config.lora import LoraAdapter
    from planner.config.multimodal import MMLimits, MMProcessorKwargs, MMTokens
    from planner.model.load import LoadedModel
    from planner.speculative import SpeculativeConfig
    from planner.vllm_rules import Entrypoint, Runner, VllmRules

# vLLM 0.33 CacheConfig.gpu_memory_utilization.
VLLM_DEFAULT_GMU = 0.92
# The CUDA-graph bytes vLLM subtracts (0.20 on) are estimated from the captured sizes and the
# model's layers (planner.budget.cuda_graph_estimate_bytes) unless told (--cuda-graph-memory,
# --enforce-eager); the library's default for a bare budget call is this half GiB.
CUDA_GRAPH_DEFAULT_BYTES = GIB // 2

Spelling = Literal["cli", "yaml", "log"]


# --------------------------------------------------------------------------- spellings


@dataclass(frozen=True, kw_only=True)
class Names:
    """How one setting is spelled: ``kvplan``/``vllm serve`` flag, plans-file key, and the
    name vLLM's boot log uses (``non-default args`` / ``EngineArgs``); None where it has none."""

    cli: str
    yaml: str
    log: str | None


# Field -> spellings: a view of the declarations (planner.config.fields). The CLI spelling is
# vLLM's own flag, which kvplan also accepts, so a suggestion pastes into either command line.
SPELLINGS: dict[str, Names] = {
    **{s.name: Names(cli=s.cli, yaml=s.yaml, log=s.log) for s in fields_.SETTINGS},
    # not a serve setting, but a change a suggestion may name
    "gpu": Names(cli="--gpu", yaml="gpu", log=None),
}


def _shown(value: Any) -> str:
    if hasattr(value, "as_json"):  # --speculative-config, --limit-mm-per-prompt, ...: JSON
        return f"'{value.as_json()}'"
    if isinstance(value, LoraAdapter):
        return value.path
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, Engine | KVDtype):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def eplb_flags(redundant_experts: int) -> list[str]:
    """vLLM's spelling of EPLB's redundant experts: ``--enable-eplb --eplb-config
    {"num_redundant_experts":R}`` (one JSON word)."""
    config = json.dumps({"num_redundant_experts": redundant_experts}, separators=(",", ":"))
    return ["--enable-eplb", "--eplb-config", config]


def as_flags(changes: Mapping[str, Any]) -> str:
    """``{"tp": 2, "kv_cache_dtype": "fp8"}`` -> ``--tensor-parallel-size 2 --kv-cache-dtype
    fp8`` (a boolean is its flag, or ``--no-`` flag)."""
    words = []
    for key, value in changes.items():
        flag = SPELLINGS[key].cli
        if key == "num_redundant_experts":
            if value:
                words.append(shlex.join(eplb_flags(value)))
            continue
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + flag.removeprefix("--"))
        elif key.endswith("_bytes") and isinstance(value, int):
            words.append(f"{flag} {_with_unit(value)}")  # a bare number is refused
        else:
            words.append(f"{flag} {_shown(value)}")
    return " ".join(words)


def _with_unit(size: int) -> str:
    """A byte count as a flag takes it, exactly: ``64GiB``, ``512MiB``, else ``N B``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def as_yaml(changes: Mapping[str, Any]) -> str:
    """``{"tp": 2, "kv_cache_dtype": "fp8"}`` -> ``tp: 2, kv_cache_dtype: fp8`` (a byte
    count with its unit, ``kv_cache_memory: 53747MiB``, as the flags spell it)."""
    return ", ".join(
        f"{SPELLINGS[k].yaml}: "
        + (_with_unit(v) if k.endswith("_bytes") and isinstance(v, int) else _shown(v))
        for k, v in changes.items()
    )


def render_changes(changes: Mapping[str, Any] | str, spelling: Spelling) -> str:
    """A suggestion in the spelling of the place it is shown (a sentence stays as it is)."""
    if isinstance(changes, str):
        return changes
    return as_yaml(changes) if spelling == "yaml" else as_flags(changes)


# --------------------------------------------------------------------------- checks


def positive_count(name: str, value: int | None) -> None:
    """Refuse a count flag that is not a whole number in [1, MAX_COUNT] (None: not given)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        whole = isinstance(value, int) and not isinstance(value, bool)
        raise SettingError(
            f"{name} must be a positive integer, got {value!r}",
            rule="min" if whole else "whole",
            value=value,
        )
    if value is not None and value > MAX_COUNT:
        shown = f"{value:,}" if value < 10**30 else f"a {len(str(value)):,}-digit number"
        raise SettingError(
            f"{name} must be at most {MAX_COUNT:,} (2^40), got {shown}", rule="max", value=value
        )


def check_gmu(gmu: float) -> None:
    """Refuse a ``gpu_memory_utilization`` outside (0, 1]."""
    # an int is finite however large (math.isfinite(10**400) would overflow)
    finite = isinstance(gmu, int) or (isinstance(gmu, float) and math.isfinite(gmu))
    if not (finite and 0 < gmu <= 1):
        raise SettingError(
            f"--gpu-memory-utilization must be in (0, 1], got {gmu!r}",
            rule="fraction" if finite and gmu > 0 else "positive" if finite else "number",
            value=gmu,
        )


def vllm_batch_defaults(
    max_model_len: int,
    gpu: Gpu | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    *,
    entrypoint: Entrypoint = "serve",
    vllm_version: str | None = None,
) -> tuple[int, int]:
    """vLLM's (max_num_batched_tokens, max_num_seqs) as it resolves them
    (``EngineArgs.get_batch_defaults``, :func:`planner.vllm_rules.batch_defaults`): for
    ``vllm serve`` in 0.33, >= 160 GiB GPUs 16384 / 1024; >= 70 GiB (not A100) 8192 / 1024;
    otherwise (and with no GPU named) 2048 / 256; the ``LLM`` class (``entrypoint="llm"``)
    16384 / 1024 and 8192 / 256 for the last two. Then tokens = min(tokens, seqs * len) and
    seqs = min(seqs, tokens).

    Llama-3.1-8B: on an H100 (79.18 GiB) 8,192 / 1,024; on an A100-80GB 2,048 / 256; on an
    H200 (139.80 GiB) 8,192 / 1,024; with ``--max-num-seqs 4`` and ``max_model_len`` 1,000 the
    token budget drops to 4 x 1,000 = 4,000 on an H100.
    """
    tokens, seqs = batch_defaults(
        rules_for(vllm_version),
        gpu_memory_bytes=gpu.memory_bytes if gpu is not None else None,
        is_a100=gpu is not None and gpu.is_a100,
        entrypoint=entrypoint,
    )
    seqs = max_num_seqs if max_num_seqs is not None else seqs
    if max_num_batched_tokens is None:
        tokens = min(tokens, seqs * max_model_len)
    else:
        tokens = max_num_batched_tokens
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """The engine flags of one deployment, validated once; ``None`` = the engine's default.

    Attributes:
        engine: whose layout and budget to reproduce.
        tp, pp: tensor- and pipeline-parallel size.
        kv_cache_dtype: ``auto`` follows the checkpoint (fp8 scales, else the model dtype);
            int8 is refused for vLLM and SGLang, which have no int8 cache.
        block_size: tokens per block (vLLM 16, TRT-LLM 32, SGLang/transformers 1).
        max_model_len: context per request (the config's when None).
        auto_fit_max_model_len: vLLM's ``--max-model-len -1``: the longest that fits the pool.
        max_num_batched_tokens, max_num_seqs: vLLM's per-step budgets (``vllm serve``'s
            defaults for the GPU when None: see :func:`vllm_batch_defaults`).
        enable_prefix_caching: vLLM's prefix caching; None is the release's default (on, but
            off for a hybrid before 0.26: :meth:`prefix_caching`). Hybrids keep an extra
            Mamba page a request when on.
        gpu_memory_utilization: the engine's memory fraction (vLLM 0.92 when None).
        kv_cache_memory_bytes: vLLM's ``--kv-cache-memory-bytes``: a fixed KV pool per rank.
        cuda_graph_bytes: CUDA-graph memory vLLM subtracts; 0 is ``--enforce-eager``; None
            kvplan's estimate (:func:`planner.budget.graph_bytes`).
        vllm_version: the vLLM release whose rules apply (:mod:`planner.vllm_rules`; the
            newest kvplan knows when None).
        entrypoint: ``serve`` (``vllm serve``) or ``llm`` (the ``LLM`` class): batch defaults.
        runner: ``generate`` or ``pooling`` (no sampler warm-up in the activation peak).
        headroom_bytes: memory the user keeps free on top of the engine's budget.
        gpu_free_memory_bytes: memory free on the GPU before vLLM starts (the rest is another
            process's); vLLM refuses when its snapshot of it is below the request, and what
            runs after sizing must fit the rest (:func:`planner.budget.post_allocation`).
        interconnect: ``nvlink``, ``xgmi`` or ``pcie``: how the GPUs talk, over the catalog's
            (:func:`planner.budget.non_torch_bytes`).
        disable_custom_all_reduce: vLLM's ``--disable-custom-all-reduce``.
        disable_extensible_kv_cache: vLLM's ``--disable-extensible-kv-cache`` (0.34 on):
            the pool sized from the profile run as before 0.34, not measured after warm-up.
        sampler: ``flashinfer`` or ``native``: the top-k/top-p sampler vLLM runs, over the
            release's default (:meth:`planner.vllm_rules.VllmRules.with_sampler`).
        mxfp4_backend: ``marlin`` or ``triton``: the kernel vLLM runs gpt-oss's MXFP4 experts
            on where the install decides it (Hopper and newer); below compute capability 9.0
            it is Marlin whatever is stated (:func:`planner.weights.marlin_mxfp4_extra_bytes`).
        dp: data-parallel size: dp engines, each with its own KV pool and ``max_num_seqs``;
            routed experts shard over dp x tp GPUs (``FusedMoEParallelConfig``).
        enable_expert_parallel: whole experts per GPU (EP = dp x tp) instead of TP-sharded
            experts; per-GPU expert bytes are the same up to rounding, EPLB needs it.
        num_redundant_experts: EPLB's redundant experts (global); the most-loaded GPU holds
            ``ceil((E + R) / ep)`` experts.
        dcp: decode-context-parallel size (divides tp): KV sharded over dcp TP ranks, so a
            block spans ``block_size x dcp`` tokens.
        all2all_backend: vLLM's MoE all-to-all; DeepEP's reserve buffers outside torch
            (:func:`planner.budget.all2all_buffer_bytes`).
        speculative: ``--speculative-config`` (:mod:`planner.speculative`).
        enable_lora, max_loras, max_lora_rank, lora_target_modules, fully_sharded_loras,
            max_cpu_loras: vLLM's LoRA flags (:mod:`planner.lora`); ``max_lora_rank`` None is
            the adapter's rank rounded up to one vLLM takes, else vLLM's 16
            (:attr:`lora_rank`); ``lora_target_modules`` None is every module.
        lora_adapter: a PEFT ``adapter_config.json`` (``--lora-adapter DIR``) whose rank and
            targets the plan takes where the flags give none.
        cpu_offload_gb: vLLM's UVA weight offload, GiB per GPU (:mod:`planner.offload`).
        kv_offloading_size, kv_offloading_backend: vLLM's CPU KV tier (GiB for the whole
            engine, summed over its TP ranks; ``native`` or ``lmcache``).
        limit_mm_per_prompt: vLLM's items per prompt by modality (999 each when None).
        language_model_only: no multimodal inputs at all: no tower, no encoder cache.
        mm_encoder_tp_mode: ``weights`` (the tower TP-sharded) or ``data`` (a copy per rank).
        skip_mm_profiling: vLLM leaves the encoder out of its profile run.
        mm_processor_kwargs: the processor overrides (``max_pixels`` ...).
        mm_tokens_per_item: the largest item's tokens, where kvplan cannot derive them.
        mm_encoder_activation_bytes: the tower's activation in the profile run, instead of
            kvplan's estimate (:mod:`planner.multimodal`).
    """

    engine: Engine = Engine.VLLM
    tp: int = 1
    pp: int = 1
    kv_cache_dtype: KVDtype = KVDtype.AUTO
    block_size: int | None = None
    max_model_len: int | None = None
    auto_fit_max_model_len: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_prefix_caching: bool | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    headroom_bytes: int = 0
    gpu_free_memory_bytes: int | None = None
    interconnect: str | None = None
    disable_custom_all_reduce: bool = False
    disable_extensible_kv_cache: bool = False
    sampler: str | None = None
    mxfp4_backend: str | None = None
    vllm_version: str | None = None
    entrypoint: Entrypoint = "serve"
    runner: Runner = "generate"
    dp: int = 1
    enable_expert_parallel: bool = False
    num_redundant_experts: int = 0
    dcp: int = 1
    all2all_backend: str = "allgather_reducescatter"
    speculative: SpeculativeConfig | None = None
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int | None = None
    lora_target_modules: tuple[str, ...] | None = None
    fully_sharded_loras: bool = False
    max_cpu_loras: int | None = None
    lora_adapter: LoraAdapter | None = None
    cpu_offload_gb: float = 0.0
    kv_offloading_size: float | None = None
    kv_offloading_backend: str = "native"
    limit_mm_per_prompt: MMLimits | None = None
    language_model_only: bool = False
    mm_encoder_tp_mode: str = "weights"
    skip_mm_profiling: bool = False
    mm_processor_kwargs: MMProcessorKwargs | None = None
    mm_tokens_per_item: MMTokens | None = None
    mm_encoder_activation_bytes: int | None = None

    def __post_init__(self) -> None:
        for key, value in (
            ("tp", self.tp),
            ("pp", self.pp),
            ("dp", self.dp),
            ("dcp", self.dcp),
            ("block_size", self.block_size),
            ("max_model_len", self.max_model_len),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_num_seqs", self.max_num_seqs),
            ("max_loras", self.max_loras),
            ("max_cpu_loras", self.max_cpu_loras),
        ):
            positive_count(_flag(key), value)
        if self.gpu_memory_utilization is not None:
            check_gmu(self.gpu_memory_utilization)
        refuse_int8_kv(self.kv_cache_dtype, self.engine)
        if self.auto_fit_max_model_len and self.engine is not Engine.VLLM:
            raise UsageError("--max-model-len -1 (auto-fit) is vLLM's; give a length")
        if self.auto_fit_max_model_len and self.max_model_len is not None:
            raise UsageError("--max-model-len: give a length or -1 (auto-fit), not both")
        for key, value in (
            ("--kv-cache-memory", self.kv_cache_memory_bytes),
            ("--cuda-graph-memory", self.cuda_graph_bytes),
            ("--mm-encoder-activation", self.mm_encoder_activation_bytes),
        ):
            if value is not None and value < 0:
                raise UsageError(f"{key} must not be negative, got {value:,} B")
        if self.headroom_bytes < 0:
            raise UsageError(f"--headroom must not be negative, got {self.headroom_bytes:,} B")
        if self.gpu_free_memory_bytes is not None and self.gpu_free_memory_bytes <= 0:
            raise UsageError(
                f"--gpu-free-memory must be positive, got {self.gpu_free_memory_bytes:,} B"
            )

        if self.vllm_version is not None:
            parse_version(self.vllm_version)
        if self.entrypoint not in ENTRYPOINTS:
            raise UsageError(f"--entrypoint must be one of {', '.join(ENTRYPOINTS)}")
        if self.runner not in RUNNERS:
            raise UsageError(f"--runner must be one of {', '.join(RUNNERS)}")
        check_parallel(self)
        if self.all2all_backend not in fields_.ALL2ALL_BACKENDS:
            raise UsageError(
                f"--all2all-backend {self.all2all_backend!r}: vLLM 0.33 takes one of "
                f"{', '.join(fields_.ALL2ALL_BACKENDS)}"
            )
        check_lora(self)
        check_offload(self)

        check_mode(self.mm_encoder_tp_mode)
        for name in _CHOICE_FIELDS:  # every other name a declaration lists its choices for
            value, s = getattr(self, name), fields_.setting(name)
            if isinstance(value, str) and value not in s.choices:
                raise UsageError(f"{s.cli} must be one of {', '.join(s.choices)}, got {value!r}")

    @property
    def lora_rank(self) -> int:
        """The rank the LoRA buffers are sized for: ``--max-lora-rank``, else the adapter's
        rank rounded up to one vLLM takes (12 -> 16), else vLLM's default 16."""
        if self.max_lora_rank is not None:
            return self.max_lora_rank
        if self.lora_adapter is not None:
            return rank_for(self.lora_adapter.rank)
        return DEFAULT_RANK

    @property
    def cpu_offload_bytes(self) -> int:
        """``--cpu-offload-gb`` as vLLM turns it into bytes: ``int(gb x 1024**3)``."""
        return int(self.cpu_offload_gb * (1 << 30))

    @property
    def kv_offloading_bytes(self) -> int:
        """``--kv-offloading-size`` as vLLM's ``cpu_bytes_to_use``: ``int(size x 2**30)``
        (0 when no size is given)."""
        return int((self.kv_offloading_size or 0) * (1 << 30))

    @property
    def gpus(self) -> int:
        """GPUs of the whole deployment: tp x pp per engine, dp engines."""
        return self.tp * self.pp * self.dp

    @property
    def expert_parallel_size(self) -> int:
        """The GPUs routed experts spread over (vLLM flattens MoE over dp x tp): the EP size
        with --enable-expert-parallel, else the experts' TP size."""
        return self.dp * self.tp

    @property
    def num_lookahead_tokens(self) -> int:
        return self.speculative.num_lookahead_tokens if self.speculative else 0

    @property
    def rules(self) -> VllmRules:
        """The rules of ``vllm_version`` (the newest kvplan knows when None), with the
        ``--sampler`` the user stated."""
        return rules_for(self.vllm_version).with_sampler(self.sampler)

    def prefix_caching(self, spec: ModelSpec) -> bool:
        """Whether vLLM caches prefixes for ``spec``: as given, else the release's default
        (``ModelConfig.is_prefix_caching_supported``): on, but off for a model of state
        layers alone in every release ("Attention free models do not support prefix
        caching", ``config/model.py`` 0.19.0:1791-1796, 0.33.0:2280-2285) and for a hybrid
        (state layers beside attention layers) before 0.26
        (:attr:`planner.vllm_rules.VllmRules.hybrid_prefix_caching`)."""
        if self.enable_prefix_caching is not None:
            return self.enable_prefix_caching
        if not spec.state_layers:
            return True
        return bool(spec.attention_layers) and self.rules.hybrid_prefix_caching

    @property
    def gmu(self) -> float:
        """``gpu_memory_utilization`` as vLLM runs it (its version's default when not given:
        0.92 in 0.33, 0.9 in the 0.10 and 0.11 releases, 1.0 where 0.34 measures the pool:
        :attr:`measured_kv_sizing`)."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return 1.0 if self.measured_kv_sizing else self.rules.default_gmu

    @property
    def measured_kv_sizing(self) -> bool:
        """Whether vLLM sizes the pool from the memory measured after warm-up and graph
        capture (0.34's extensible KV cache, :attr:`planner.vllm_rules.VllmRules.
        extensible_kv_cache`): on unless ``--kv-cache-memory-bytes`` fixes the pool or
        ``--disable-extensible-kv-cache`` turns it off (``config/vllm.py`` 0.34.0:
        3180-3263)."""
        return (
            self.rules.extensible_kv_cache
            and not self.disable_extensible_kv_cache
            and self.kv_cache_memory_bytes is None
        )

    @property
    def enforce_eager(self) -> bool:
        return self.cuda_graph_bytes == 0

    def batch_defaults(self, max_model_len: int, gpu: Gpu | None) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) as vLLM resolves them on ``gpu`` for this
        entrypoint and version."""
        return vllm_batch_defaults(
            max_model_len,
            gpu,
            self.max_num_batched_tokens,
            self.max_num_seqs,
            entrypoint=self.entrypoint,
            vllm_version=self.vllm_version,
        )

    def default_max_num_seqs(self, max_model_len: int, gpu: Gpu | None) -> int:
        """The max_num_seqs vLLM picks itself for this entrypoint, version and GPU (what
        ``batch_defaults`` resolves when no ``--max-num-seqs`` is given)."""
        return replace(self, max_num_seqs=None).batch_defaults(max_model_len, gpu)[1]

    def but(self, **changes: Any) -> ServeSettings:
        """These settings with ``changes`` (validated again)."""
        return replace(self, **changes)

    @classmethod
    def from_mapping(
        cls,
        raw: Mapping[str, Any],
        *,
        spelling: Spelling,
        base: ServeSettings | None = None,
        typed: bool = False,
        auto_fit: bool = True,
        word: Callable[[SettingError], str] | None = None,
    ) -> tuple[ServeSettings, list[tuple[str, str]]]:
        """Settings from a mapping keyed in one spelling (plans-file keys, boot-log names or
        CLI flags), over ``base``. Values may be strings (a log) or typed (YAML).

        Args:
            raw: the mapping; keys that are not settings are ignored (the caller knows its
                other keys).
            spelling: how ``raw``'s keys are spelled (:data:`SPELLINGS`).
            base: the settings the keys change (the defaults when None).
            typed: the values come from a typed document (a plans file), so each must
                already have its type: ``tp: "2"`` or ``enforce_eager: "on"`` is refused, and
                ``null`` is a value to refuse rather than "not given".
            auto_fit: ``max_model_len`` -1 is vLLM's auto-fit; False refuses it as below 1
                (a plans file checks one length).
            word: how to word a refused value (:class:`SettingError`) instead of its message,
                e.g. ``lambda e: f"must be at least 1 (got {e.value!r})"`` for rule ``min``.

        Returns:
            The settings, and the problems as (key as spelled, message); a key with a problem
            keeps ``base``'s value.
        """
        by_name = {getattr(n, spelling): f for f, n in SPELLINGS.items() if getattr(n, spelling)}
        values: dict[str, Any] = {}
        problems: list[tuple[str, str]] = []
        for key, value in raw.items():
            name = by_name.get(str(key))
            if name is None or name == "gpu" or (value is None and not typed):
                continue
            try:
                if typed:
                    _check_type(name, value)
                values.update(_parse_value(name, value, auto_fit=auto_fit, units=spelling != "log"))
            except SettingError as exc:
                problems.append((str(key), word(exc) if word else str(exc)))
            except UsageError as exc:
                problems.append((str(key), str(exc)))
        start = base or cls()
        try:
            return replace(start, **values), problems
        except UsageError as exc:  # a combination, e.g. fp32 KV with vLLM
            problems.append(("", str(exc)))
            return start, problems


def _flag(name: str) -> str:
    """The flag a message about setting ``name`` names (kvplan's --tp / --pp, else vLLM's)."""
    return fields_.setting(name).message_flag


_COUNT_FIELDS = fields_.names_of("count") + fields_.names_of("length")
_BOOL_FIELDS = fields_.names_of("bool")
_NAME_FIELDS = fields_.names_of("choice") + fields_.names_of("version") + fields_.names_of("path")
_GIB_FIELDS = fields_.names_of("gib")
_CHOICE_FIELDS = tuple(
    n for n in fields_.names_of("choice") if n not in ("engine", "kv_cache_dtype")
)
_SIZE_FIELDS = fields_.names_of("size")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def kv_dtype_for(text: str, engine: Engine) -> KVDtype:
    """``--kv-cache-dtype`` as a user may give it: fp32 only for transformers (the serving
    engines have no fp32 cache; the library's probes may still ask for one)."""
    dtype = KVDtype.parse(text)
    refuse_fp32_kv(dtype, engine)
    return dtype


def refuse_fp32_kv(dtype: KVDtype, engine: Engine) -> None:
    """A user's fp32 KV cache is transformers' alone (settings allow it for the probes)."""
    if dtype is KVDtype.FP32 and engine is not Engine.HF:
        raise UsageError("--kv-cache-dtype fp32 is only meaningful with --engine hf")


# Engines whose parser refuses a plain int8 KV cache: vLLM 0.33 (CacheConfig.cache_dtype has
# int8_per_token_head, with scales kvplan does not size, but no int8) and SGLang 0.5.23
# (--kv-cache-dtype choices). TRT-LLM keeps it (an INT8-KV checkpoint), so does transformers.
_NO_INT8_KV = {Engine.VLLM: "vLLM", Engine.SGLANG: "SGLang"}


def refuse_int8_kv(dtype: KVDtype, engine: Engine) -> None:
    """Refuse int8 KV for an engine that has none, naming the dtypes it does take."""
    if dtype is KVDtype.INT8 and engine in _NO_INT8_KV:
        takes = ", ".join(d.value for d in KVDtype if d not in (KVDtype.FP32, KVDtype.INT8))
        raise UsageError(
            f"--kv-cache-dtype int8: {_NO_INT8_KV[engine]} has no int8 KV cache; "
            f"use one of: {takes}"
        )


def _module_names(value: Any) -> tuple[str, ...]:
    """``--lora-target-modules`` from a flag (``"qkv_proj o_proj"``, ``"qkv_proj,o_proj"``), a
    YAML list, or a boot log's ``['qkv_proj', 'o_proj']``."""
    if isinstance(value, list | tuple):
        words = [str(v).strip() for v in value]
    else:
        words = re.split(r"[\s,]+", re.sub(r"[\[\]'\"]", " ", str(value)))
    names = tuple(w for w in words if w)
    if not names or any(not re.fullmatch(r"[A-Za-z0-9_.\-]+", n) for n in names):
        raise UsageError(
            f"--lora-target-modules takes module names (qkv_proj o_proj ...), got {value!r}"
        )
    return names


def parse_bool(value: Any) -> bool:
    """A boolean from YAML (``true``), a log (``'True'``) or a flag value (``on``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingError(f"expected true or false, got {value!r}", rule="bool", value=value)


def _as_count(value: Any) -> int:
    if isinstance(value, bool):
        raise SettingError(f"expected a whole number, got {value!r}", rule="whole", value=value)
    if isinstance(value, int):
        return value
    # isdecimal, not isdigit: int() refuses digits that are not decimal ("²"), and a single
    # "-" only, so "--5" is not a number either
    if isinstance(value, str) and value.strip().removeprefix("-").isdecimal():
        return int(value)
    raise SettingError(f"expected a whole number, got {value!r}", rule="whole", value=value)


def _check_type(name: str, value: Any) -> None:
    """Refuse a value from a typed document (YAML) that does not already have its setting's
    type: ``"2"`` for a count, ``"on"`` for a flag, ``""`` for a name (sizes stay strings)."""
    rule: Rule | None = None
    if name in _COUNT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
        rule, expected = "whole", "a whole number"
    elif name == "gpu_memory_utilization" and (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        rule, expected = "number", "a number"
    elif name == "num_redundant_experts" and (
        isinstance(value, bool) or not isinstance(value, int)
    ):
        rule, expected = "whole", "a whole number"
    elif name in (*_BOOL_FIELDS, "enforce_eager") and not isinstance(value, bool):
        rule, expected = "bool", "true or false"
    elif name in _GIB_FIELDS and (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        rule, expected = "number", "a number"
    elif name in _NAME_FIELDS and not (
        isinstance(value, Engine | KVDtype) or (isinstance(value, str) and value.strip())
    ):
        rule, expected = "name", "a name"
    if rule is not None:
        raise SettingError(f"expected {expected}, got {value!r}", rule=rule, value=value)


def _parse_value(
    name: str, value: Any, *, auto_fit: bool = True, units: bool = True
) -> dict[str, Any]:
    """One setting's value, as :class:`ServeSettings` holds it."""
    if name == "engine":
        return {"engine": value if isinstance(value, Engine) else Engine.parse(str(value).strip())}
    if name == "kv_cache_dtype":
        dtype = value if isinstance(value, KVDtype) else KVDtype.parse(str(value).strip())
        return {"kv_cache_dtype": dtype}
    if name in _BOOL_FIELDS:
        return {name: parse_bool(value)}
    if name in _CHOICE_FIELDS:  # a name from the declaration's choices, in any case
        return {name: str(value).strip().lower()}
    if name == "lora_target_modules":
        return {name: _module_names(value)}
    if name == "lora_adapter":
        return {name: value if isinstance(value, LoraAdapter) else read_adapter(str(value).strip())}
    if name in _GIB_FIELDS:
        if isinstance(value, bool):
            raise SettingError(f"expected a number, got {value!r}", rule="number", value=value)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise SettingError(
                f"expected a number, got {value!r}", rule="number", value=value
            ) from None
        if not (math.isfinite(number) and 0 <= number <= MAX_COUNT):
            raise SettingError(
                f"{SPELLINGS[name].cli} must be a number of GiB >= 0, got {value!r}",
                rule="number",
                value=value,
            )
        return {name: number}
    if name in ("limit_mm_per_prompt", "mm_processor_kwargs", "mm_tokens_per_item"):
        parser = {
            "limit_mm_per_prompt": multimodal.parse_limits,
            "mm_processor_kwargs": multimodal.parse_processor_kwargs,
            "mm_tokens_per_item": multimodal.parse_tokens,
        }[name]
        return {name: parser(value)}
    if name == "mm_encoder_tp_mode":
        return {name: check_mode(str(value))}
    if name == "num_redundant_experts":
        redundant = _as_count(value)
        if redundant < 0:
            raise SettingError(
                f"expected a whole number >= 0, got {value!r}", rule="whole", value=value
            )
        return {name: redundant}
    if name == "speculative":
        return {name: parse_speculative(value)}
    if name == "enforce_eager":
        return {"cuda_graph_bytes": 0} if parse_bool(value) else {}
    if name == "gpu_memory_utilization":
        if isinstance(value, bool):
            raise SettingError(f"expected a number, got {value!r}", rule="number", value=value)
        try:
            number = value if isinstance(value, int | float) else float(value)
        except (TypeError, ValueError):
            raise SettingError(
                f"expected a number, got {value!r}", rule="number", value=value
            ) from None
        check_gmu(number)  # refuses 90 as 90, not 90.0
        return {name: float(number)}
    if name in _SIZE_FIELDS:
        if isinstance(value, int) and not isinstance(value, bool):
            return {name: value}
        # a size typed as text needs its unit; a log prints bytes
        return {name: parse_size(str(value), flag=SPELLINGS[name].cli, unit_required=units)}
    if name in ("vllm_version", "entrypoint", "runner"):
        text = str(value).strip()
        if name == "vllm_version":
            parse_version(text)
        return {name: text.lower() if name != "vllm_version" else text}
    if name == "max_model_len":
        number = _as_count(value)
        if number == -1 and auto_fit:
            return {"auto_fit_max_model_len": True}
        positive_count(_flag(name), number)
        return {name: number}
    if name in _COUNT_FIELDS:
        number = _as_count(value)
        positive_count(_flag(name), number)
        if name == "max_lora_rank":
            check_lora_rank(number)
        return {name: number}
    raise AssertionError(f"no parser for setting {name}")  # SPELLINGS and this table disagree


# --------------------------------------------------------------------------- deployment


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """What runs where: the one argument of every planning step.

    ``model`` is what :func:`planner.model.load.load_model` fetched (config and, where
    reachable, safetensors headers under one revision); ``gpu`` is None when only a KV pool
    size is known (``--kv-cache-memory``) or nothing is.
    """

    model: LoadedModel
    gpu: Gpu | None
    settings: ServeSettings = field(default_factory=ServeSettings)
    # the draft checkpoint of --speculative-config (eagle, eagle3, draft_model, dflash)
    draft: LoadedModel | None = None

    def __post_init__(self) -> None:
        spec = self.settings.speculative
        if spec is None:
            return

        if spec.method in NEEDS_MODEL and self.draft is None:
            raise UsageError(
                f"--speculative-config method {spec.method}: load the draft model "
                f"{spec.model!r} (planner.load_model) and pass it as Deployment(draft=...)"
            )
        if spec.method == "mtp" and not mtp_layers(self.spec.config, self.spec.model_type):
            raise UsageError(
                f"--speculative-config method mtp: {self.spec.name} has no MTP layers "
                "(num_nextn_predict_layers is 0 or absent); use eagle, a draft_model or ngram"
            )

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    def with_settings(self, **changes: Any) -> Deployment:
        """The same model and GPU with some settings changed."""
        return replace(self, settings=replace(self.settings, **changes))

    def on(self, gpu: Gpu | None) -> Deployment:
        """The same model and settings on another GPU."""
        return replace(self, gpu=gpu)


def settings_fields() -> list[str]:
    """The names of :class:`ServeSettings`' fields (for tests and docs)."""
    return [f.name for f in fields(ServeSettings)]


def fp8_kv_caveat(gpu: Gpu | None) -> str:
    """The line that goes wherever fp8 KV is chosen or suggested: accuracy, and the GPU."""
    line = (
        "fp8 KV can cost accuracy without calibrated k/v scales (e.g. ones the checkpoint "
        "ships): evaluate on your task before production"
    )
    if gpu is not None and gpu.has_native_fp8 is False:
        line += (
            f"; {gpu.name} ({gpu.arch_label}) has no native fp8, "
            "so vLLM stores fp8 but computes in 16 bits (the memory saving holds, not the speed)"
        )
    if gpu is not None and gpu.fp8_format == "float8_e4m3fnuz":
        # vLLM model_executor/layers/quantization/kv_cache.py: is_fp8_fnuz() doubles k/v_scale
        line += (
            f"; {gpu.name} ({gpu.arch_label}) stores fp8 as e4m3fnuz: vLLM doubles the "
            "checkpoint's k/v scales to match (same bytes, a narrower range)"
        )
    return line
