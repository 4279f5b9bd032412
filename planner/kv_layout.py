"""KV bytes per GPU rank, as each engine lays the cache out.

:func:`estimate` takes a :class:`ModelSpec` and the serving flags and returns a
:class:`KVEstimate`: bytes per token, per sequence at ``max_model_len``, the layer groups and,
for vLLM, its KV-cache groups, bytes per block and blocks per request exactly as
``vllm/v1/core/kv_cache_planning.py`` (0.33) computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.deployment import ServeSettings, positive_count
from planner.errors import UsageError
from planner.gpus import Gpu
from planner.model.specs import (
    MLA,
    STATE_KINDS,
    CacheContext,
    Engine,
    KVDtype,
    LayerSpec,
    ModelSpec,
    StateSpec,
    cdiv,
)
from planner.speculative import mtp_layers

if TYPE_CHECKING:
    from planner.speculative import SpeculativeConfig

# SGLang frees out-of-window KV only for the models of `is_hybrid_swa_model` (0.5.23);
# Gemma 2/3 and Mistral keep every layer full length there.
SGLANG_HYBRID_SWA_MODEL_TYPES = frozenset(
    {"gpt_oss", "llama4", "llama4_text", "mimo_v2_flash", "step3p5", "gemma4", "gemma4_text"}
)
# Smallest kernel block of vLLM's default CUDA attention backends (FlashAttention / Triton:
# MultipleOf(16)); hybrid models round their attention block size to it.
VLLM_KERNEL_BLOCK_ALIGNMENT = 16
VLLM_MLA_HYBRID_BLOCK_ALIGNMENT = 128
DEFAULT_BATCH_SIZES = (1, 8, 32)


def refused_block_size(engine: Engine, block_size: int | None) -> str | None:
    """Why vLLM's attention backends refuse a ``--block-size`` (None: they take it). Each
    declares its kernel block sizes and ``supports_block_size`` accepts a multiple of one of
    them (vLLM 0.33.0 ``vllm/v1/attention/backend.py:122-137``); the smallest any GPU backend
    declares is 16: FlashAttention and Triton ``[MultipleOf(16)]`` (``backends/
    flash_attn.py:357-367``, ``triton_attn.py:339-340``), FlashInfer ``[16, 32, 64]``, ROCm
    ``[16, 32]``. So a block size that is no multiple of 16 finds no backend."""
    if engine is not Engine.VLLM or not block_size or block_size % VLLM_KERNEL_BLOCK_ALIGNMENT == 0:
        return None
    return "vLLM's FlashAttention backend needs a multiple of 16"


@dataclass(frozen=True, kw_only=True)
class LayerGroup:
    """Layers of one kind and size, per rank (the JSON ``layer_groups`` rows)."""

    kind: str
    num_layers: int
    bytes_per_token: int
    window: int | None
    state_bytes_per_sequence: int = 0


@dataclass(frozen=True, kw_only=True)
class CacheGroup:
    """One vLLM KV-cache group: layers sharing a block table (``KVCacheGroupSpec``)."""

    kind: str
    num_layers: int
    block_size: int
    page_size_bytes: int
    blocks_per_request: int
    window: int | None = None

    @property
    def is_state(self) -> bool:
        """A Mamba / linear-attention group: one state page per request, whatever its length
        (the one place that tells state groups from token groups)."""
        return self.kind in STATE_KINDS


@dataclass(frozen=True, kw_only=True)
class VllmLayout:
    """vLLM's view of the cache on the most-loaded rank."""

    groups: list[CacheGroup]
    bytes_per_block: int
    blocks_per_request: int
    request_bytes: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_in_flight_tokens: int
    mamba_cache_mode: str | None
    mamba_page_size_padded: int | None
    padding_layers: int


@dataclass(frozen=True, kw_only=True)
class BatchExample:
    """KV for ``batch`` sequences of ``max_model_len`` tokens each, on one rank."""

    batch: int
    tokens: int
    kv_bytes: int
    state_bytes: int
    total_bytes: int


@dataclass(frozen=True, kw_only=True)
class KVEstimate:
    """Result of :func:`estimate` (the top-level keys of ``kvplan estimate --json``); every
    byte figure is per GPU rank on the most-loaded pipeline stage.

    Attributes:
        model, source, model_type: the model's Hub id, where its config came from (catalog,
            local path, ``hub:org/name@rev``) and its ``model_type``.
        attention_type: MHA / GQA / MQA / MLA, ``+ sliding`` / ``+ chunked``, ``hybrid ...``.
        engine, kv_cache_dtype, kv_dtype_bytes: whose layout, and the resolved cache dtype
            (``auto`` becomes the checkpoint's).
        tensor_parallel_size, pipeline_parallel_size, block_size, max_model_len: the
            settings as resolved (block size after hybrid alignment).
        kv_bytes_per_token: K and V of every layer of the stage for one token. Llama-3.1-8B
            at TP 1: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072.
        state_bytes_per_sequence: Mamba / linear-attention state, fixed per sequence.
        kv_bytes_per_sequence: token KV one ``max_model_len`` request keeps (window layers
            keep only their window plus what is in flight); ``request_bytes`` adds the state
            (vLLM: whole pages, as the block tables allocate them).
        layer_groups: layers of one kind and size; ``examples``: ``batch`` x requests.
        num_layers, num_attention_heads, num_kv_heads, kv_heads_per_rank, head_dim,
            model_dtype, derived_max_model_len: from the config (``kv_heads_per_rank``
            replicates when TP exceeds the KV heads).
        pp_stage, pp_layers: the reported stage and its layer range (vLLM's split).
        mha_bytes_per_token: what the same layers would cache with one KV head per query
            head (``mha_savings`` is the share GQA/MQA/MLA saves).
        vllm: vLLM's groups, pages and blocks (:class:`VllmLayout`); None for other engines.
    """

    model: str
    source: str
    model_type: str
    attention_type: str
    engine: str
    kv_cache_dtype: str
    kv_dtype_bytes: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    block_size: int
    max_model_len: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    kv_bytes_per_sequence: int
    request_bytes: int
    layer_groups: list[LayerGroup]
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    kv_heads_per_rank: int
    head_dim: int
    model_dtype: str
    derived_max_model_len: int
    pp_stage: int
    pp_layers: tuple[int, int]
    mha_bytes_per_token: int
    examples: list[BatchExample]
    vllm: VllmLayout | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def mha_savings(self) -> float:
        """How many times smaller the KV is than MHA of the same width (1.0 for MHA)."""
        return self.mha_bytes_per_token / self.kv_bytes_per_token if self.kv_bytes_per_token else 0


def get_pp_indices(num_layers: int, rank: int, pp: int) -> tuple[int, int]:
    """Layer range of pipeline stage ``rank`` (vLLM ``get_pp_indices``): ``n // pp`` each, the
    remainder added one each to stages pp-2, pp-3, ... (the last stage never gets one).

    Example: 61 layers over 4 stages -> 15, 15, 16, 15.
    """
    partitions = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        partitions[-i] += 1
    start = sum(partitions[:rank])
    return start, start + partitions[rank]


def valid_tp_sizes(spec: ModelSpec, limit: int = 64) -> list[int]:
    return [t for t in range(1, limit + 1) if not tp_problems(spec, t)]


def tp_problems(spec: ModelSpec, tp: int) -> list[str]:
    """What stops ``tp`` ranks from splitting this model (vLLM model and config checks)."""
    problems = []
    if spec.attention_layers:
        if spec.num_attention_heads % tp:
            problems.append(f"{spec.num_attention_heads} attention heads")
        kv = spec.num_kv_heads
        if not any(isinstance(s, MLA) for s in spec.layers) and (
            (kv >= tp and kv % tp) or (kv < tp and tp % kv)
        ):
            problems.append(f"{kv} KV heads")
    for state in {type(s): s for s in spec.state_layers}.values():
        for label, count in _state_heads(state):
            if count % tp:
                problems.append(f"{count} {label}")
    return problems


def _state_heads(state: StateSpec) -> list[tuple[str, int]]:
    return [
        (f"{name.replace('_', ' ')}", getattr(state, name))
        for name in ("num_heads", "num_k_heads", "num_v_heads", "intermediate_size")
        if hasattr(state, name)
    ]


def estimate(
    spec: ModelSpec,
    settings: ServeSettings | None = None,
    gpu: Gpu | None = None,
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    **flags: Any,
) -> KVEstimate:
    """Size the KV cache of ``spec`` per GPU rank the way ``settings.engine`` does.

    Args:
        spec: the model, from :func:`planner.load_model_spec`.
        settings: the serve settings (:class:`~planner.deployment.ServeSettings`); the
            library's callers pass these. Scripts may instead pass the flags as keywords
            (``tp=2, kv_cache_dtype=KVDtype.FP8, prefix_caching=False``), validated into
            settings here.
        gpu: the GPU, only to pick vLLM's batch defaults (an A100 gets the small ones).
        batch_sizes: batch sizes for the worked examples.

    Returns:
        The :class:`KVEstimate`: ``max_num_batched_tokens`` sets how much KV sliding-window
        layers keep in flight; ``pp`` reports the stage with the most cache; KV heads
        replicate when tp > KV heads.
    """
    if settings is None:
        settings = settings_from_flags(flags)
    elif flags:
        raise TypeError(f"estimate() takes settings or flags, not both: {sorted(flags)}")
    engine, tp, pp = settings.engine, settings.tp, settings.pp
    kv_cache_dtype, block_size = settings.kv_cache_dtype, settings.block_size
    max_model_len = settings.max_model_len
    prefix_caching = settings.prefix_caching(spec)
    for b in batch_sizes:
        positive_count("--batch", b)
    warnings: list[str] = []
    notes = list(spec.notes)
    problems = tp_problems(spec, tp)
    if problems:
        valid = ", ".join(str(t) for t in valid_tp_sizes(spec))
        raise UsageError(
            f"{spec.name}: --tp {tp} does not divide {' and '.join(problems)}; "
            f"valid --tp values: {valid}"
        )
    if pp > spec.num_layers:
        raise UsageError(f"--pp {pp} is more than the model's {spec.num_layers} layers")

    length = max_model_len or spec.max_model_len
    if max_model_len and max_model_len > spec.max_model_len:
        warnings.append(
            f"--max-model-len {max_model_len:,} is longer than the model's "
            f"{spec.max_model_len:,}; vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    dtype = spec.kv_cache_dtype_auto if kv_cache_dtype is KVDtype.AUTO else kv_cache_dtype
    if engine is Engine.HF and kv_cache_dtype is KVDtype.AUTO and spec.dtype == "float32":
        dtype = KVDtype.FP32  # transformers keeps the checkpoint dtype; only engines cast to bf16
    if engine is Engine.HF and dtype.bytes == 1:
        warnings.append(
            "transformers' default DynamicCache has no fp8 layout; "
            "sized as if a quantized cache stored 1 byte per element"
        )
    if engine is Engine.HF:
        notes.extend(spec.hf_notes)
    if engine is Engine.HF and tp > 1:
        notes.append("transformers shards KV heads only when loaded with a tp_plan")
    bs = block_size or engine.default_block_size
    refused = refused_block_size(engine, block_size)
    if refused:
        warnings.append(f"--block-size {bs}: {refused}")

    # Engines serve float32 checkpoints in bf16 (vLLM _resolve_auto_dtype); transformers does not.
    run_dtype_bytes = 2 if spec.dtype == "float32" and engine is not Engine.HF else spec.dtype_bytes
    rank_layers = _rank_layers(spec, tp, dtype.bytes, engine, run_dtype_bytes)
    sc = settings.speculative
    draft: list[LayerSpec] = []
    if sc is not None and engine is Engine.VLLM:
        # state pages per draft token, whatever the method (vllm_config.num_speculative_tokens)
        k = sc.num_speculative_tokens
        rank_layers = [
            replace(s, conv_state_extra=s.conv_state_extra + k, speculative_blocks=k)
            if isinstance(s, StateSpec)
            else s
            for s in rank_layers
        ]
        draft = _draft_layers(spec, sc, settings.tp, dtype.bytes)
        if draft:
            rank_layers = [*rank_layers, *draft]  # the drafter's layers sit on the last stage
            notes.append(f"{sc.method} drafter: {len(draft)} KV layer(s) join the target's pool")
    if settings.dcp > 1 and any(
        s is not None and (s.window or isinstance(s, StateSpec)) for s in rank_layers
    ):
        raise UsageError(
            f"{spec.name}: --decode-context-parallel-size is sized here for full-attention and "
            "MLA layers only; this model has window or state layers"
        )
    tokens, seqs = settings.batch_defaults(length, gpu)
    # what window layers reserve: every concurrent batch (async scheduling: pp + 1) from 0.26
    in_flight = (pp + 1) * tokens if settings.rules.window_in_flight else tokens
    has_state = any(isinstance(s, StateSpec) for s in rank_layers)
    has_attention = any(s is not None and s.bytes_per_token for s in rank_layers)
    mamba_align = engine is Engine.VLLM and prefix_caching and has_state and has_attention
    ctx = CacheContext(
        engine=engine,
        max_model_len=length,
        block_size=bs,
        max_in_flight_tokens=in_flight if engine is Engine.VLLM else 0,
        swa_pool=spec.model_type in SGLANG_HYBRID_SWA_MODEL_TYPES,
        mamba_align=mamba_align,
        dcp=settings.dcp,
    )
    if (
        engine is Engine.SGLANG
        and not ctx.swa_pool
        and any(s is not None and s.window for s in rank_layers)
    ):
        notes.append(
            "SGLang keeps window layers full length for this model type "
            "(not in its hybrid-SWA list)"
        )

    stages = [get_pp_indices(spec.num_layers, r, pp) for r in range(pp)]
    stages[-1] = (stages[-1][0], stages[-1][1] + len(draft))
    vllm_layout = None
    if engine is Engine.VLLM:
        bs, vllm_layout, stage = _vllm_layout(rank_layers, stages, ctx, tokens, seqs, notes)
        ctx = replace(ctx, block_size=bs)
        request = vllm_layout.request_bytes
        state_pages = sum(g.blocks_per_request for g in vllm_layout.groups if g.is_state)
        kv_seq = request - state_pages * vllm_layout.bytes_per_block
    else:
        per_stage = [_plain_request_bytes(rank_layers[a:b], ctx) for a, b in stages]
        stage = max(range(pp), key=lambda r: sum(per_stage[r]))
        kv_seq, state_seq = per_stage[stage]
        request = kv_seq + state_seq

    start, end = stages[stage]
    stage_layers = [s for s in rank_layers[start:end] if s is not None]
    state_bytes = sum(s.state_bytes for s in stage_layers)
    kv_per_token = sum(s.bytes_per_token for s in stage_layers)
    n_attention = sum(1 for s in stage_layers if s.bytes_per_token)
    mha = n_attention * (spec.num_attention_heads // tp) * spec.mha_kv_width * dtype.bytes
    attn_specs = [s for s in stage_layers if s.bytes_per_token]
    heads_per_rank = getattr(attn_specs[0], "num_kv_heads", 1) if attn_specs else 0
    examples = [
        BatchExample(
            batch=b,
            tokens=b * length,
            kv_bytes=b * kv_seq,
            state_bytes=b * (request - kv_seq),
            total_bytes=b * request,
        )
        for b in batch_sizes
    ]
    return KVEstimate(
        model=spec.name,
        source=spec.source,
        model_type=spec.model_type,
        attention_type=spec.attention_type,
        engine=engine.value,
        kv_cache_dtype=dtype.value,
        kv_dtype_bytes=dtype.bytes,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        block_size=ctx.block_size,
        max_model_len=length,
        kv_bytes_per_token=kv_per_token,
        state_bytes_per_sequence=state_bytes,
        kv_bytes_per_sequence=kv_seq,
        request_bytes=request,
        layer_groups=_layer_groups(stage_layers),
        num_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        num_kv_heads=spec.num_kv_heads,
        kv_heads_per_rank=heads_per_rank,
        head_dim=spec.head_dim,
        model_dtype=spec.dtype,
        derived_max_model_len=spec.max_model_len,
        pp_stage=stage,
        pp_layers=(start, end),
        mha_bytes_per_token=mha,
        examples=examples,
        vllm=vllm_layout,
        notes=notes,
        warnings=warnings,
    )


# The per-rank layer specs of the last few (model, tp, dtype, engine): a plan estimates the same
# model at dozens of lengths and sequence counts (grid, alternatives, vLLM's max-length search),
# and the specs depend on none of them. Keyed by the spec's identity, which the entry pins.
_RANK_LAYERS: dict[tuple[int, int, int, Engine, int], tuple[ModelSpec, list[LayerSpec | None]]] = {}
_RANK_LAYERS_KEPT = 16


def _rank_layers(
    spec: ModelSpec, tp: int, kv_dtype_bytes: int, engine: Engine, run_dtype_bytes: int
) -> list[LayerSpec | None]:
    """``spec``'s layers as one tensor-parallel rank holds them (:meth:`LayerSpec.for_rank`)."""
    key = (id(spec), tp, kv_dtype_bytes, engine, run_dtype_bytes)
    hit = _RANK_LAYERS.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    layers = [
        None
        if s is None
        else s.for_rank(
            tp=tp, kv_dtype_bytes=kv_dtype_bytes, engine=engine, model_dtype_bytes=run_dtype_bytes
        )
        for s in spec.layers
    ]
    if len(_RANK_LAYERS) >= _RANK_LAYERS_KEPT:
        del _RANK_LAYERS[next(iter(_RANK_LAYERS))]
    _RANK_LAYERS[key] = (spec, layers)
    return layers


def _draft_layers(
    spec: ModelSpec, sc: SpeculativeConfig, tp: int, kv_dtype_bytes: int
) -> list[LayerSpec]:
    """The drafter's KV layers on one rank (:mod:`planner.speculative`): ``mtp`` reuses the
    target's last attention layer ``num_nextn_predict_layers`` times (vLLM builds the MTP
    layer like a decoder layer); eagle, eagle3, dflash and draft models bring their own
    checkpoint's layers, sharded by the drafter's TP; n-gram and suffix have none."""
    if not sc.has_drafter:
        return []
    if sc.method == "mtp":
        attention = [s for s in spec.layers if s is not None and s.bytes_per_token]
        if not attention:
            return []
        last = attention[-1].for_rank(
            tp=tp,
            kv_dtype_bytes=kv_dtype_bytes,
            engine=Engine.VLLM,
            model_dtype_bytes=spec.dtype_bytes,
        )
        return [last] * mtp_layers(spec.config, spec.model_type)
    if sc.draft_spec is None:
        raise UsageError(
            f"--speculative-config method {sc.method}: the draft model {sc.model!r} was not "
            "loaded (planner.model.load.load_draft)"
        )
    draft = sc.draft_spec
    draft_tp = sc.draft_tp(tp)
    return [
        s.for_rank(
            tp=draft_tp,
            kv_dtype_bytes=kv_dtype_bytes,
            engine=Engine.VLLM,
            model_dtype_bytes=draft.dtype_bytes,
        )
        for s in draft.layers
        if s is not None
    ]


def settings_from_flags(flags: dict[str, Any]) -> ServeSettings:
    """:func:`estimate`'s keyword flags (``vllm serve``'s names; ``prefix_caching`` for
    ``enable_prefix_caching``) as validated :class:`ServeSettings`."""
    flags = dict(flags)
    if "prefix_caching" in flags:
        flags["enable_prefix_caching"] = flags.pop("prefix_caching")
    return ServeSettings(**flags)


def _layer_groups(layers: list[LayerSpec]) -> list[LayerGroup]:
    counts: dict[tuple[str, int, int | None, int], int] = {}
    for s in layers:
        key = (s.kind, s.bytes_per_token, s.window, s.state_bytes)
        counts[key] = counts.get(key, 0) + 1
    return [
        LayerGroup(kind=k, num_layers=n, bytes_per_token=b, window=w, state_bytes_per_sequence=st)
        for (k, b, w, st), n in counts.items()
    ]


def _plain_request_bytes(layers: Sequence[LayerSpec | None], ctx: CacheContext) -> tuple[int, int]:
    """(KV, state) bytes of one request for engines that size each layer on its own."""
    kv = state = 0
    for s in layers:
        if s is None:
            continue
        if s.bytes_per_token:
            kv += s.blocks_per_request(ctx, ctx.block_size) * s.page_size_bytes(ctx.block_size)
        state += s.state_bytes
    return kv, state


def _vllm_hybrid_block_size(layers: list[LayerSpec], block_size: int) -> tuple[int, int | None]:
    """vLLM ``Platform._align_hybrid_block_size``: raise the attention block size until one
    attention page holds at least one Mamba state page, then pad the Mamba page to it.

    Example (Nemotron-H-56B, TP 1, bf16 KV, fp32 SSM): attention 8 heads x 256 x 2 B = 4,096 B
    per token; Mamba page = conv 20,480 x 3 x 2 B + ssm 256 x 64 x 256 x 4 B = 16,900,096 B ->
    block = 16 * cdiv(16,900,096, 16 * 4,096) = 16 * 258 = 4,128 tokens, and the Mamba page is
    padded to 4,128 * 4,096 = 16,908,288 B.
    """
    attn = [s for s in layers if s.bytes_per_token]
    states = [s for s in layers if isinstance(s, StateSpec)]
    if not attn or not states:
        return block_size, None
    attn_1tok = attn[0].bytes_per_token
    mamba_page = max(s.state_bytes for s in states)
    align = max(VLLM_KERNEL_BLOCK_ALIGNMENT, block_size)
    if isinstance(attn[0], MLA):
        align = max(align, VLLM_MLA_HYBRID_BLOCK_ALIGNMENT)
    attn_bs = align * cdiv(mamba_page, align * attn_1tok)
    attn_bs = VLLM_KERNEL_BLOCK_ALIGNMENT * cdiv(attn_bs, VLLM_KERNEL_BLOCK_ALIGNMENT)
    block_size = max(block_size, attn_bs)
    padded = block_size * attn_1tok
    return block_size, (padded if padded != mamba_page else None)


@dataclass(frozen=True, kw_only=True)
class _Member:
    index: int
    spec: LayerSpec
    block_size: int
    page: int


def _vllm_groups(
    layers: list[tuple[int, LayerSpec]], block_size: int, padded_state_page: int | None
) -> tuple[list[list[_Member]], int]:
    """Group layers as ``get_kv_cache_groups`` does; returns groups and padding layers."""
    members = []
    for index, s in layers:
        page = s.page_size_bytes(block_size)
        if isinstance(s, StateSpec) and padded_state_page:
            page = padded_state_page
        members.append(_Member(index=index, spec=s, block_size=block_size, page=page))
    if not members:
        return [], 0
    if len({m.spec for m in members}) == 1 or len({m.spec.merge_key() for m in members}) == 1:
        # uniform spec, or uniform type with different shapes (UniformTypeKVCacheSpecs)
        return [members], 0
    # unify_kv_cache_spec_page_size: smaller pages that divide the largest grow their block
    # size; state pages and non-dividing attention pages are padded to the largest.
    top = max(m.page for m in members)
    unified = []
    for m in members:
        if m.page != top and not isinstance(m.spec, StateSpec) and top % m.page == 0:
            m = replace(m, block_size=m.block_size * (top // m.page), page=top)
        unified.append(replace(m, page=top))
    buckets: dict[tuple[object, ...], list[_Member]] = {}
    for m in unified:
        buckets.setdefault((m.spec.merge_key(), m.spec, m.block_size), []).append(m)
    sizes = [len(b) for b in buckets.values()]
    group_size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups: list[list[_Member]] = []
    padding = 0
    for bucket in buckets.values():
        n_groups = cdiv(len(bucket), group_size)
        padding += n_groups * group_size - len(bucket)
        groups.extend(bucket[i::n_groups] for i in range(n_groups))
    return groups, padding


def _vllm_layout(
    rank_layers: list[LayerSpec | None],
    stages: list[tuple[int, int]],
    ctx: CacheContext,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    notes: list[str],
) -> tuple[int, VllmLayout, int]:
    """vLLM's groups (global, then projected per PP stage) and the most-loaded stage."""
    present = [(i, s) for i, s in enumerate(rank_layers) if s is not None]
    block_size, padded = _vllm_hybrid_block_size([s for _, s in present], ctx.block_size)
    if block_size != ctx.block_size:
        notes.append(
            f"vLLM raises the attention block size to {block_size} tokens so one page "
            "holds a Mamba state"
        )
    ctx = replace(ctx, block_size=block_size)
    groups, padding = _vllm_groups(present, block_size, padded)
    if padding:
        notes.append(f"vLLM pads its KV-cache groups with {padding} layer(s) of unused pages")
    blocks = [g[0].spec.blocks_per_request(ctx, g[0].block_size) for g in groups]

    def stage_bytes_per_block(start: int, end: int) -> int:
        return max((sum(m.page for m in g if start <= m.index < end) for g in groups), default=0)

    per_stage = [stage_bytes_per_block(a, b) for a, b in stages]
    stage = max(range(len(stages)), key=lambda r: per_stage[r])
    bytes_per_block = per_stage[stage]
    cache_groups = [
        CacheGroup(
            kind=g[0].spec.kind,
            num_layers=len(g),
            block_size=g[0].block_size,
            page_size_bytes=g[0].page,
            blocks_per_request=n,
            window=g[0].spec.window,
        )
        for g, n in zip(groups, blocks, strict=True)
    ]
    has_state = any(isinstance(s, StateSpec) for _, s in present)
    layout = VllmLayout(
        groups=cache_groups,
        bytes_per_block=bytes_per_block,
        blocks_per_request=sum(blocks),
        request_bytes=bytes_per_block * sum(blocks),
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_in_flight_tokens=ctx.max_in_flight_tokens,
        mamba_cache_mode=("align" if ctx.mamba_align else "none") if has_state else None,
        mamba_page_size_padded=padded,
        padding_layers=padding,
    )
    return block_size, layout, stage
