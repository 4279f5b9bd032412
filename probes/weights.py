"""The weight tensors of one tensor-parallel rank, by name and shape (no values).

The probe occupies the weights' bytes with real-shaped tensors so that the allocator sees what
an engine's allocator sees: an embedding, per-layer projections, MLPs or experts, a head. The
shapes follow vLLM's sharding: column/row-parallel projections split their output/input over
``tp``; attention heads and KV heads split as the planner splits them (KV heads replicate when
``tp`` exceeds them); MoE experts keep every expert on every rank and split its intermediate
width; the vocabulary is padded to a multiple of 64 (``pad_vocab_size``) and split.

Layer structure by family (``model_type``):

- attention + MLP in every layer (Llama, Qwen, Mistral, Gemma, Phi, ...), MoE where the config
  says (DeepSeek ``first_k_dense_replace`` / ``moe_layer_freq``, Qwen ``decoder_sparse_step`` /
  ``mlp_only_layers``, Llama 4 ``interleave_moe_layer_step``, Jamba ``expert_layer_period``;
  Mixtral and gpt-oss: every layer), shared experts where configured;
- MLA projections for DeepSeek-style models (``q_lora_rank``, ``kv_lora_rank``,
  ``qk_nope/rope_head_dim``, ``v_head_dim``);
- Mamba-1 / Mamba-2 / Gated-DeltaNet mixers in place of attention for state layers;
- Nemotron-H: one block per layer (``hybrid_override_pattern``: M mixer, * attention, - MLP,
  E MoE), no MLP next to a mixer.

Biases, rotary tables and small per-head norms are left out (under 0.1 % of any catalog
model). Quantized checkpoints keep their packed size: fp8 linear weights 1 byte per element,
gpt-oss' mxfp4 experts 17/32 byte (4-bit values plus one scale byte per 32).

Worked example (Llama-3.1-8B, TP 1, bf16): embedding and head 128,256 x 4,096 each; per layer
q 4,096 x 4,096, k and v 1,024 x 4,096, o 4,096 x 4,096, gate+up 28,672 x 4,096, down
4,096 x 14,336, two norms of 4,096 -> 218,112,000 per layer; 32 layers + 2 x 525,336,576 +
final norm 4,096 = 8,030,261,248 parameters, 16,060,522,496 B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import ConfigError
from planner.model.specs import (
    MLA,
    Engine,
    FullAttention,
    GatedDeltaNetState,
    LayerSpec,
    Mamba1State,
    Mamba2State,
    ModelSpec,
    StateSpec,
)

# MLP without a gate (up, act, down): the classic GPT family.
UNGATED_MLP_MODEL_TYPES = frozenset(
    {"opt", "bloom", "falcon", "RefinedWeb", "RefinedWebModel", "gpt2", "gpt_bigcode", "phi"}
)
# transformers ties the head to the embedding unless a config says otherwise (the
# PretrainedConfig default); NOTE: Llama 4's text config defaults to an untied head.
UNTIED_BY_DEFAULT_MODEL_TYPES = frozenset({"llama4", "llama4_text"})
# Attention-free models: the mixer is the whole block, no MLP.
NO_MLP_MODEL_TYPES = frozenset({"mamba", "falcon_mamba", "mamba2"})
VOCAB_PADDING = 64


@dataclass(frozen=True)
class WeightSpec:
    """One weight tensor of one rank: ``quant`` tensors use the checkpoint's packed size."""

    name: str
    shape: tuple[int, ...]
    quant: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class MixerDims:
    """Per-rank widths of a layer's token mixer (attention, MLA or a state mixer)."""

    kind: str  # attention | mla | state
    q_heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    head_dim_v: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    state_in: int = 0
    state_inner: int = 0
    output_gate: bool = False  # Q packed beside its sigmoid gate (ModelSpec.attention_output_gate)


@dataclass(frozen=True)
class MLPDims:
    """Per-rank widths of a layer's MLP; ``num_experts`` 0 means dense."""

    intermediate: int
    gated: bool = True
    num_experts: int = 0
    top_k: int = 0
    shared_intermediate: int = 0


@dataclass(frozen=True)
class LayerDims:
    index: int
    mixer: MixerDims | None
    mlp: MLPDims | None


@dataclass(frozen=True)
class ModelDims:
    """Everything :mod:`probes.model` needs to build one rank of the model."""

    hidden: int
    vocab: int
    tied: bool
    layers: tuple[LayerDims, ...]
    quant_num: int = 1  # bytes per quantized element = quant_num / quant_den
    quant_den: int = 1
    quantization: str | None = None


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return default


def num_experts_of(cfg: dict[str, Any]) -> int:
    return int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)


def is_moe_layer(cfg: dict[str, Any], model_type: str, i: int) -> bool:
    """Whether layer ``i`` has routed experts, by each family's config rule."""
    if num_experts_of(cfg) <= 1:
        return False
    if model_type.startswith(("deepseek", "kimi")):
        first = int(cfg.get("first_k_dense_replace") or 0)
        freq = int(cfg.get("moe_layer_freq") or 1)
        return i >= first and i % freq == 0
    if "decoder_sparse_step" in cfg or "mlp_only_layers" in cfg:
        step = int(cfg.get("decoder_sparse_step") or 1)
        return i not in (cfg.get("mlp_only_layers") or []) and (i + 1) % step == 0
    if "interleave_moe_layer_step" in cfg:
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        return (i + 1) % step == 0
    if "expert_layer_period" in cfg:
        period = int(cfg.get("expert_layer_period") or 1)
        return i % period == int(cfg.get("expert_layer_offset") or 0)
    return True


def _mlp_dims(cfg: dict[str, Any], model_type: str, hidden: int, i: int, tp: int) -> MLPDims:
    gated = model_type not in UNGATED_MLP_MODEL_TYPES and not str(
        cfg.get("mlp_hidden_act") or ""
    ).startswith("relu2")
    dense = _get(
        cfg, "intermediate_size_mlp", "intermediate_size", "ffn_dim", "ffn_hidden_size", "n_inner"
    )
    dense = int(dense or 4 * hidden)
    if not is_moe_layer(cfg, model_type, i):
        return MLPDims(intermediate=max(1, dense // tp), gated=gated)
    expert = int(_get(cfg, "moe_intermediate_size", "intermediate_size") or dense)
    shared = _get(cfg, "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
    if shared is None and cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * expert
    if shared is None and model_type.startswith("llama4"):
        shared = int(cfg.get("intermediate_size") or expert)  # NOTE: Llama 4 shared expert
    top_k = int(_get(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk", default=1))
    return MLPDims(
        intermediate=max(1, expert // tp),
        gated=gated,
        num_experts=num_experts_of(cfg),
        top_k=top_k,
        shared_intermediate=max(0, int(shared or 0) // tp),
    )


def _mixer_dims(spec: ModelSpec, layer: LayerSpec, tp: int, kv_heads: int) -> MixerDims:
    cfg = spec.config
    if isinstance(layer, MLA):
        nope = int(cfg.get("qk_nope_head_dim") or 128)
        return MixerDims(
            kind="mla",
            q_heads=spec.num_attention_heads // tp,
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=layer.kv_lora_rank,
            qk_nope_head_dim=nope,
            qk_rope_head_dim=layer.qk_rope_head_dim,
            v_head_dim=int(cfg.get("v_head_dim") or nope),
        )
    if isinstance(layer, FullAttention):
        return MixerDims(
            kind="attention",
            q_heads=spec.num_attention_heads // tp,
            kv_heads=kv_heads,
            head_dim=layer.head_size,
            head_dim_v=layer.head_size_v,
            output_gate=spec.attention_output_gate,
        )
    if isinstance(layer, StateSpec):
        conv, _ = layer.shapes
        conv_dim = conv[0]  # already per rank
        if isinstance(layer, Mamba2State):
            inner = layer.intermediate_size // tp
            state_in = inner + conv_dim + layer.num_heads // tp  # z, xBC, dt
        elif isinstance(layer, GatedDeltaNetState):
            inner = layer.num_v_heads * layer.head_v_dim // tp
            state_in = conv_dim + inner + 2 * (layer.num_v_heads // tp)  # qkv, z, b, a
        elif isinstance(layer, Mamba1State):
            inner = layer.intermediate_size // tp
            state_in = 2 * inner  # x, z
        else:
            inner = state_in = conv_dim
        return MixerDims(kind="state", state_in=state_in, state_inner=inner)
    raise ConfigError(f"{spec.name}: no weight layout for {type(layer).__name__}")


def model_dims(spec: ModelSpec, tp: int = 1, kv_heads_per_rank: int | None = None) -> ModelDims:
    """Per-rank widths of every layer of ``spec`` (rank specs as ``LayerSpec.for_rank``).

    Args:
        spec: the model.
        tp: tensor-parallel size.
        kv_heads_per_rank: KV heads one rank stores (default ``max(1, kv // tp)``).

    Returns:
        The :class:`ModelDims`.
    """
    cfg = spec.config
    mt = spec.model_type
    kv = kv_heads_per_rank or max(1, spec.num_kv_heads // tp)
    pattern = cfg.get("hybrid_override_pattern")
    layers = []
    for i, layer in enumerate(spec.layers):
        rank = (
            None
            if layer is None
            else layer.for_rank(tp=tp, kv_dtype_bytes=1, engine=Engine.VLLM, model_dtype_bytes=2)
        )
        mixer = None if rank is None else _mixer_dims(spec, rank, tp, kv)
        if isinstance(pattern, str):  # NOTE: Nemotron-H, one block per layer: M, *, -, E
            mlp = None
            if pattern[i] == "E":
                mlp = _mlp_dims(cfg, mt, spec.hidden_size, i, tp)
            elif pattern[i] == "-":
                dense = int(cfg.get("intermediate_size") or 4 * spec.hidden_size)
                mlp = MLPDims(intermediate=max(1, dense // tp), gated=False)
        elif mt not in NO_MLP_MODEL_TYPES:
            mlp = _mlp_dims(cfg, mt, spec.hidden_size, i, tp)
        else:
            mlp = None
        layers.append(LayerDims(index=i, mixer=mixer, mlp=mlp))
    vocab = int(cfg.get("vocab_size") or 32000)
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    tied = cfg.get("tie_word_embeddings")
    if tied is None:
        tied = mt not in UNTIED_BY_DEFAULT_MODEL_TYPES
    num, den = _quant_bytes(spec.quantization)
    return ModelDims(
        hidden=spec.hidden_size,
        vocab=-(-padded // tp),
        tied=bool(tied),
        layers=tuple(layers),
        quant_num=num,
        quant_den=den,
        quantization=spec.quantization,
    )


def _quant_bytes(method: str | None) -> tuple[int, int]:
    """Bytes per quantized element as a fraction (fp8 1/1, mxfp4 17/32), else the model's."""
    if method in ("fp8", "compressed-tensors", "modelopt"):
        return 1, 1
    if method == "mxfp4":
        return 17, 32
    return 0, 1  # 0: not quantized, the model dtype


def weight_specs(dims: ModelDims) -> list[WeightSpec]:
    """Every weight tensor of one rank, embeddings first, in layer order."""
    h = dims.hidden
    quant = dims.quant_num > 0
    dense_quant = quant and dims.quantization != "mxfp4"  # NOTE: gpt-oss quantizes experts only
    out = [WeightSpec("embed", (dims.vocab, h))]
    for layer in dims.layers:
        p = f"layers.{layer.index}."
        out.append(WeightSpec(p + "input_norm", (h,)))
        m = layer.mixer
        if m is not None and m.kind == "attention":
            q_heads = m.q_heads * (2 if m.output_gate else 1)
            qkv = (q_heads + m.kv_heads) * m.head_dim + m.kv_heads * m.head_dim_v
            out.append(WeightSpec(p + "qkv", (qkv, h), dense_quant))
            out.append(WeightSpec(p + "o", (h, m.q_heads * m.head_dim_v), dense_quant))
        elif m is not None and m.kind == "mla":
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                out.append(WeightSpec(p + "q_a", (m.q_lora_rank, h), quant))
                out.append(WeightSpec(p + "q_a_norm", (m.q_lora_rank,)))
                out.append(WeightSpec(p + "q_b", (m.q_heads * qk, m.q_lora_rank), quant))
            else:
                out.append(WeightSpec(p + "q", (m.q_heads * qk, h), quant))
            out.append(WeightSpec(p + "kv_a", (m.kv_lora_rank + m.qk_rope_head_dim, h), quant))
            out.append(WeightSpec(p + "kv_a_norm", (m.kv_lora_rank,)))
            kv_b = m.q_heads * (m.qk_nope_head_dim + m.v_head_dim)
            out.append(WeightSpec(p + "kv_b", (kv_b, m.kv_lora_rank), quant))
            out.append(WeightSpec(p + "o", (h, m.q_heads * m.v_head_dim), quant))
        elif m is not None and m.kind == "state":
            out.append(WeightSpec(p + "in_proj", (m.state_in, h)))
            out.append(WeightSpec(p + "out_proj", (h, m.state_inner)))
        mlp = layer.mlp
        if mlp is None:
            continue
        out.append(WeightSpec(p + "post_norm", (h,)))
        if mlp.num_experts:
            e, i = mlp.num_experts, mlp.intermediate
            out.append(WeightSpec(p + "router", (mlp.num_experts, h)))
            out.append(WeightSpec(p + "experts_up", (e, (2 if mlp.gated else 1) * i, h), quant))
            out.append(WeightSpec(p + "experts_down", (e, h, i), quant))
            if mlp.shared_intermediate:
                s = mlp.shared_intermediate * (2 if mlp.gated else 1)
                out.append(WeightSpec(p + "shared_up", (s, h), dense_quant))
                shared_down = (h, mlp.shared_intermediate)
                out.append(WeightSpec(p + "shared_down", shared_down, dense_quant))
        else:
            i = mlp.intermediate
            out.append(WeightSpec(p + "up", ((2 if mlp.gated else 1) * i, h), dense_quant))
            out.append(WeightSpec(p + "down", (h, i), dense_quant))
    out.append(WeightSpec("final_norm", (h,)))
    if not dims.tied:
        out.append(WeightSpec("lm_head", (dims.vocab, h)))
    return out


def weight_bytes(w: WeightSpec, dims: ModelDims, dtype_bytes: int) -> int:
    """Bytes of one weight: packed size for quantized tensors, else ``numel * dtype_bytes``."""
    if w.quant and dims.quant_num:
        return -(-w.numel * dims.quant_num // dims.quant_den)
    return w.numel * dtype_bytes


def total_weight_bytes(dims: ModelDims, dtype_bytes: int) -> int:
    """Bytes of every weight of one rank (what the probe occupies before profiling)."""
    return sum(weight_bytes(w, dims, dtype_bytes) for w in weight_specs(dims))
