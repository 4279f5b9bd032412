"""Layer specs: one frozen dataclass per kind of cache-holding layer, with its byte maths.

The family follows vLLM's ``KVCacheSpec`` classes (``vllm/v1/kv_cache_interface.py``): each kind
knows its bytes per token, its page size for a block, and how many blocks one request needs at a
context length. Nothing outside this module branches on the kind of a layer.

Specs come in two flavours built from the same classes: the *model* spec (whole model, tensor
parallel size 1, model dtype), as :func:`planner.model.resolve.load_model_spec` returns it, and the
*per-rank* spec from :meth:`LayerSpec.for_rank`, which is what a GPU actually stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from planner.errors import UsageError

if TYPE_CHECKING:
    from planner.model.vision import VisionTower

# The kinds of StateSpec layers: Mamba1State / Mamba2State "mamba", GatedDeltaNetState "linear".
STATE_KINDS = frozenset({"mamba", "linear"})
# model types whose full attention is vLLM's Qwen3NextAttention (ModelSpec.attention_output_gate)
OUTPUT_GATED_ATTENTION = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"})


def cdiv(a: int, b: int) -> int:
    """Ceiling division on integers (vLLM's ``cdiv``)."""
    return -(-a // b)


class KVDtype(str, Enum):
    """KV-cache element type, as the engines' ``--kv-cache-dtype`` spell it."""

    AUTO = "auto"
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT8 = "int8"

    @classmethod
    def parse(cls, value: str) -> KVDtype:
        """Parse a user string (``bfloat16``, ``FP8``, ``half`` ...) once, at the boundary."""
        key = value.strip().lower()
        key = _DTYPE_ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            names = ", ".join(d.value for d in cls)
            raise UsageError(f"unknown KV cache dtype {value!r}; use one of: {names}") from None

    @property
    def bytes(self) -> int:
        """Bytes per element; ``auto`` has none until resolved against the model."""
        if self is KVDtype.AUTO:
            raise ValueError("resolve 'auto' against the model dtype first")
        return _DTYPE_BYTES[self]


_DTYPE_ALIASES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}
_DTYPE_BYTES = {
    KVDtype.FP16: 2,
    KVDtype.BF16: 2,
    KVDtype.FP32: 4,
    KVDtype.FP8: 1,
    KVDtype.FP8_E4M3: 1,
    KVDtype.FP8_E5M2: 1,
    KVDtype.INT8: 1,
}


class Engine(str, Enum):
    """Which engine's cache layout to reproduce."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    HF = "hf"

    @classmethod
    def parse(cls, value: str) -> Engine:
        key = value.strip().lower().replace("-", "").replace("_", "")
        aliases = {"tensorrtllm": "trtllm", "transformers": "hf", "huggingface": "hf"}
        try:
            return cls(aliases.get(key, key))
        except ValueError:
            names = ", ".join(e.value for e in cls)
            raise UsageError(f"unknown engine {value!r}; use one of: {names}") from None

    @property
    def default_block_size(self) -> int:
        """Tokens per block: vLLM 16 (FlashAttention on SM80/90), TRT-LLM tokens_per_block 32,
        SGLang page_size 1 on CUDA, transformers' DynamicCache has no blocks."""
        return {"vllm": 16, "sglang": 1, "trtllm": 32, "hf": 1}[self.value]

    def kv_heads_per_rank(self, num_kv_heads: int, tp: int) -> int:
        """KV heads one tensor-parallel rank stores; heads replicate when tp > kv heads.

        vLLM and SGLang use ``max(1, kv // tp)`` (``ModelConfig.get_num_kv_heads``); TRT-LLM's
        runtime uses ``ceil(kv / tp)`` (``get_cache_bytes_per_token``). They agree whenever the
        model code accepts the split (kv % tp == 0 or tp % kv == 0).
        """
        if self is Engine.TRTLLM:
            return cdiv(num_kv_heads, tp)
        return max(1, num_kv_heads // tp)


@dataclass(frozen=True, kw_only=True)
class CacheContext:
    """What a layer needs to know about the engine to size one request.

    ``max_in_flight_tokens`` is vLLM's ``max_concurrent_batches * max_num_batched_tokens``: window
    and chunk layers keep blocks for tokens scheduled but not yet settled. ``swa_pool`` says
    whether the engine frees out-of-window KV at all (SGLang only does for its hybrid-SWA list).
    """

    engine: Engine
    max_model_len: int
    block_size: int
    max_in_flight_tokens: int = 0
    swa_pool: bool = True
    mamba_align: bool = False
    dcp: int = 1  # vLLM's decode-context-parallel size: full-attention KV split over dcp ranks

    def window_tokens(self, window: int) -> tuple[int, int]:
        """Tokens a sliding-window layer keeps for one request, and extra blocks on top.

        vLLM: ``min(W - 1 + in_flight, L)`` plus one block, because the window need not start on
        a block boundary (``SlidingWindowSpec.max_admission_blocks_per_request``).
        transformers: ``DynamicSlidingWindowLayer`` keeps the last ``W - 1`` tokens.
        TRT-LLM: ``min(seq, window)``. SGLang: the window when its SWA pool applies, else all.
        """
        length = self.max_model_len
        if self.engine is Engine.VLLM:
            return min(window - 1 + self.max_in_flight_tokens, length), 1
        if self.engine is Engine.HF:
            return min(window - 1, length), 0
        if self.engine is Engine.SGLANG and not self.swa_pool:
            return length, 0
        return min(window, length), 0

    def chunk_tokens(self, chunk: int) -> int:
        """Tokens a chunked-local layer keeps: vLLM ``min(chunk + in_flight, L)``; transformers
        caches it as a sliding window of the chunk size; others keep at most one chunk."""
        length = self.max_model_len
        if self.engine is Engine.VLLM:
            return min(chunk + self.max_in_flight_tokens, length)
        if self.engine is Engine.HF:
            return min(chunk - 1, length)
        if self.engine is Engine.SGLANG and not self.swa_pool:
            return length
        return min(chunk, length)


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """Base of every cache-holding layer. Byte maths live in the subclasses' properties."""

    kind: ClassVar[str] = "none"

    @property
    def bytes_per_token(self) -> int:
        """Bytes of KV this layer stores per token (0 for state-only layers)."""
        return 0

    @property
    def state_bytes(self) -> int:
        """Bytes of recurrent state this layer stores per sequence (0 for attention)."""
        return 0

    @property
    def window(self) -> int | None:
        """Tokens of history the layer attends to, if bounded."""
        return None

    def page_size_bytes(self, block_size: int) -> int:
        """Bytes of one block of this layer (vLLM ``page_size_bytes``)."""
        return block_size * self.bytes_per_token

    def tokens_held(self, ctx: CacheContext) -> int:
        """Tokens of KV one request at ``ctx.max_model_len`` keeps, before block rounding; a
        rank keeps ``cdiv(L, dcp)`` of them under decode-context parallelism (vLLM
        ``FullAttentionSpec.max_memory_usage_bytes``)."""
        return cdiv(ctx.max_model_len, ctx.dcp)

    def blocks_per_request(self, ctx: CacheContext, block_size: int) -> int:
        """Blocks (pages) of this layer one request needs at ``ctx.max_model_len``."""
        return cdiv(self.tokens_held(ctx), block_size)

    def for_rank(
        self, *, tp: int, kv_dtype_bytes: int, engine: Engine, model_dtype_bytes: int
    ) -> LayerSpec:
        """The spec one tensor-parallel rank stores, with the KV dtype applied.

        ``model_dtype_bytes`` is the dtype the engine runs the model in (vLLM serves float32
        checkpoints in bf16); recurrent state follows it, attention KV follows the KV dtype.
        """
        return self

    def merge_key(self) -> tuple[Any, ...]:
        """Specs with equal keys share one vLLM KV-cache group (same type and window)."""
        return (type(self).__name__, self.window)


@dataclass(frozen=True, kw_only=True)
class FullAttention(LayerSpec):
    """Standard attention (MHA / GQA / MQA): K and V for every token."""

    kind: ClassVar[str] = "full"
    num_kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: int
    # KV heads transformers' cache holds when its model code differs from the config's KV
    # heads (None: the same); see model/config.py for the model that needs it.
    hf_num_kv_heads: int | None = None

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes

    def for_rank(
        self, *, tp: int, kv_dtype_bytes: int, engine: Engine, model_dtype_bytes: int
    ) -> LayerSpec:
        kv = self.num_kv_heads
        if engine is Engine.HF and self.hf_num_kv_heads is not None:
            kv = self.hf_num_kv_heads
        heads = engine.kv_heads_per_rank(kv, tp)
        return replace(self, num_kv_heads=heads, dtype_bytes=kv_dtype_bytes)


@dataclass(frozen=True, kw_only=True)
class SlidingWindow(FullAttention):
    """Attention over the last ``sliding_window`` tokens (Mistral v0.1, Gemma 2/3, gpt-oss)."""

    kind: ClassVar[str] = "sliding"
    sliding_window: int

    @property
    def window(self) -> int | None:
        return self.sliding_window

    def tokens_held(self, ctx: CacheContext) -> int:
        return ctx.window_tokens(self.sliding_window)[0]

    def blocks_per_request(self, ctx: CacheContext, block_size: int) -> int:
        tokens, extra_blocks = ctx.window_tokens(self.sliding_window)
        return cdiv(tokens, block_size) + extra_blocks


@dataclass(frozen=True, kw_only=True)
class ChunkedLocal(FullAttention):
    """Attention within fixed chunks of ``attention_chunk_size`` tokens (Llama 4)."""

    kind: ClassVar[str] = "chunked"
    chunk_size: int

    @property
    def window(self) -> int | None:
        return self.chunk_size

    def tokens_held(self, ctx: CacheContext) -> int:
        return ctx.chunk_tokens(self.chunk_size)


@dataclass(frozen=True, kw_only=True)
class MLA(LayerSpec):
    """Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2): one compressed latent per token.

    vLLM caches ``kv_lora_rank + qk_rope_head_dim`` elements as a single head with no separate V
    (``MLAAttentionSpec``: ``head_size_v = 0``), and every TP rank holds the whole latent.
    """

    kind: ClassVar[str] = "mla"
    kv_lora_rank: int
    qk_rope_head_dim: int
    dtype_bytes: int

    @property
    def head_size(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def bytes_per_token(self) -> int:
        return self.head_size * self.dtype_bytes

    def for_rank(
        self, *, tp: int, kv_dtype_bytes: int, engine: Engine, model_dtype_bytes: int
    ) -> LayerSpec:
        return replace(self, dtype_bytes=kv_dtype_bytes)  # NOTE: not divided by TP


@dataclass(frozen=True, kw_only=True)
class StateSpec(LayerSpec):
    """Recurrent state of a Mamba / linear-attention layer: fixed bytes per sequence.

    ``conv_dtype_bytes`` and ``ssm_dtype_bytes`` follow vLLM's ``MambaStateDtypeCalculator``:
    the conv state uses the model dtype, the SSM state the same unless the model fixes it
    (``ssm_dtype_fixed``: Nemotron-H keeps it in float32). The KV-cache dtype does not apply.
    """

    kind: ClassVar[str] = "mamba"
    # Bytes per element of the SSM / recurrent state in transformers' cache, when its kernels
    # fix it whatever the model dtype (None: the model dtype, as for vLLM).
    hf_ssm_dtype_bytes: ClassVar[int | None] = None
    tp: int = 1
    conv_dtype_bytes: int
    ssm_dtype_bytes: int
    ssm_dtype_fixed: bool = False
    conv_state_extra: int = -1
    prefill_checkpoint_blocks: int = 0
    # speculative decoding (vLLM): one extra state page per draft token, and the conv state
    # keeps kernel - 1 + k columns (MambaSpec.num_speculative_blocks)
    speculative_blocks: int = 0

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(conv state shape, ssm/recurrent state shape) for one sequence on one rank."""
        raise NotImplementedError

    @property
    def state_bytes(self) -> int:
        conv, ssm = self.shapes
        return math.prod(conv) * self.conv_dtype_bytes + math.prod(ssm) * self.ssm_dtype_bytes

    def page_size_bytes(self, block_size: int) -> int:
        return self.state_bytes

    def tokens_held(self, ctx: CacheContext) -> int:
        return 0

    def blocks_per_request(self, ctx: CacheContext, block_size: int) -> int:
        """vLLM ``MambaSpec.max_memory_usage_bytes``: 1 page, or in "align" mode (prefix
        caching on) 2 pages plus the prefill checkpoint page the mixer exports."""
        if ctx.engine is Engine.VLLM and ctx.mamba_align:
            return 2 + self.speculative_blocks + self.prefill_checkpoint_blocks
        return 1 + self.speculative_blocks

    def for_rank(
        self, *, tp: int, kv_dtype_bytes: int, engine: Engine, model_dtype_bytes: int
    ) -> LayerSpec:
        # transformers keeps the whole conv kernel window; vLLM keeps kernel - 1 columns.
        extra = 0 if engine is Engine.HF else -1
        ssm = self.ssm_dtype_bytes if self.ssm_dtype_fixed else model_dtype_bytes
        if engine is Engine.HF and self.hf_ssm_dtype_bytes is not None:
            ssm = self.hf_ssm_dtype_bytes
        return replace(
            self,
            tp=tp,
            conv_state_extra=extra,
            conv_dtype_bytes=model_dtype_bytes,
            ssm_dtype_bytes=ssm,
        )

    def merge_key(self) -> tuple[Any, ...]:
        return (type(self).__name__, self.shapes)


@dataclass(frozen=True, kw_only=True)
class Mamba1State(StateSpec):
    """Mamba-1 mixer (state-spaces/mamba, Jamba): ``intermediate = expand * hidden``."""

    intermediate_size: int
    state_size: int
    conv_kernel: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        dim = self.intermediate_size // self.tp
        return (dim, self.conv_kernel + self.conv_state_extra), (dim, self.state_size)


@dataclass(frozen=True, kw_only=True)
class Mamba2State(StateSpec):
    """Mamba-2 mixer (Nemotron-H, Bamba, Granite-4). Groups replicate when tp does not divide
    them (``MambaStateShapeCalculator.extra_groups_for_head_shards``)."""

    intermediate_size: int
    n_groups: int
    num_heads: int
    head_dim: int
    state_size: int
    conv_kernel: int
    prefill_checkpoint_blocks: int = 1

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        groups = self.n_groups
        if groups % self.tp:
            groups += self.tp - groups
        conv_dim = self.intermediate_size + 2 * groups * self.state_size
        conv = (conv_dim // self.tp, self.conv_kernel + self.conv_state_extra)
        return conv, (self.num_heads // self.tp, self.head_dim, self.state_size)


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetState(StateSpec):
    """Gated DeltaNet linear attention (Qwen3-Next): conv over q/k/v plus a k x v state."""

    kind: ClassVar[str] = "linear"
    # NOTE: Qwen3-Next. transformers' delta-rule kernels (torch_chunk_gated_delta_rule and
    # fla's chunk_gated_delta_rule) return the recurrent state in float32, and the cache keeps
    # it so; kvplan verify --hf-cache measured 2x the bf16 figure.
    hf_ssm_dtype_bytes: ClassVar[int | None] = 4
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        conv_dim = 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
        conv = (conv_dim // self.tp, self.conv_kernel + self.conv_state_extra)
        return conv, (self.num_v_heads // self.tp, self.head_v_dim, self.head_k_dim)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Everything the planner knows about a model's cache, parsed once from its config.

    ``layers`` has one entry per decoder layer; ``None`` marks a layer with no cache (MLP-only or
    MoE-only blocks in Nemotron-H). Sizes are whole-model (TP 1) in the model dtype.
    ``mha_kv_width`` is K+V elements per attention head of the same model without KV sharing
    or compression (``2 * head_dim``; MLA: ``qk_nope + qk_rope + v_head_dim``), the baseline
    for "what GQA / MQA / MLA saves".
    """

    name: str
    source: str
    model_type: str
    architecture: str
    dtype: str
    dtype_bytes: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    max_model_len: int
    layers: tuple[LayerSpec | None, ...]
    kv_cache_dtype_auto: KVDtype
    mha_kv_width: int = 0
    quantization: str | None = None
    notes: tuple[str, ...] = ()
    # notes that hold only for --engine hf (how a transformers release caches this model)
    hf_notes: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    # a multimodal model's vision tower and processor (planner.multimodal); None for text
    vision: VisionTower | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def attention_output_gate(self) -> bool:
        """Whether each full-attention layer packs a sigmoid output gate beside Q, doubling the
        query width of ``qkv_proj``: vLLM's Qwen3NextAttention (Qwen3-Next, Qwen3.5), unless
        the config turns it off (``getattr(config, "attn_output_gate", True)``,
        ``model_executor/models/qwen3_next.py`` 0.19.0:233-238; ``qwen3_5.py`` 0.19.0:80-81,
        144 builds the same layer)."""
        return self.model_type in OUTPUT_GATED_ATTENTION and bool(
            self.config.get("attn_output_gate", True)
        )

    @property
    def attention_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(s for s in self.layers if s is not None and s.bytes_per_token)

    @property
    def state_layers(self) -> tuple[StateSpec, ...]:
        return tuple(s for s in self.layers if isinstance(s, StateSpec))

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct layer kinds in model order (``full``, ``sliding``, ``mla`` ...)."""
        seen: dict[str, None] = {}
        for spec in self.layers:
            if spec is not None:
                seen.setdefault(spec.kind, None)
        return tuple(seen)

    @property
    def attention_type(self) -> str:
        """MHA / GQA / MQA / MLA as the literature names them, plus the mix for hybrids."""
        if any(isinstance(s, MLA) for s in self.layers):
            base = "MLA"
        elif not self.attention_layers:
            base = ""
        elif self.num_kv_heads == self.num_attention_heads:
            base = "MHA"
        elif self.num_kv_heads == 1:
            base = "MQA"
        else:
            base = "GQA"
        extras = [k for k in self.kinds if k in ("sliding", "chunked")]
        states = [k for k in self.kinds if isinstance(k, str) and k in STATE_KINDS]
        if not base:
            return "attention-free (" + " + ".join(states) + ")" if states else "no cache"
        label = base
        if extras:
            label += " + " + " + ".join(extras)
        if states:
            label = f"hybrid {label} + " + " + ".join(states)
        return label
