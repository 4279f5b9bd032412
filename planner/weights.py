"""Weight bytes per GPU rank: exact from safetensors headers, else derived from the config.

Headers are read, never tensors: a safetensors file starts with an 8-byte little-endian header
length and a JSON header that gives every tensor's dtype, shape and byte range. On the Hub,
``huggingface_hub.get_safetensors_metadata`` fetches those headers only.

Without headers the parameter count comes from the config (attention / MLA / Mamba / linear
projections, dense or MoE MLPs, embeddings, tied or not) and the checkpoint's
``quantization_config`` sets bytes per parameter of the quantized linear layers (AWQ, GPTQ, FP8,
NVFP4, MXFP4, bitsandbytes); embeddings, norms and routers stay in the model dtype.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.errors import ConfigError, UsageError
from planner.kv_layout import get_pp_indices
from planner.layer_shapes import (
    UNGATED_MLP,
    Placement,
    config_int,
    count_of,
    dense_intermediate,
    is_moe_layer,
    num_experts_of,
    placement_of,
)
from planner.lora import buffers
from planner.model.config import MAX_CONFIG_INT
from planner.model.safetensors import read_safetensors_header as read_safetensors_header
from planner.model.specs import (
    MLA,
    GatedDeltaNetState,
    Mamba1State,
    Mamba2State,
    ModelSpec,
)
from planner.offload import offloaded_bytes
from planner.speculative import mtp_layers
from planner.units import fmt_bytes

if TYPE_CHECKING:
    from planner.deployment import Deployment
    from planner.model.load import LoadedModel

SAFETENSORS_DTYPE_BITS = {
    "F64": 64,
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "I64": 64,
    "I32": 32,
    "I16": 16,
    "I8": 8,
    "U8": 8,
    "U16": 16,
    "U32": 32,
    "U64": 64,
    "BOOL": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "E8M0": 8,
}
TIED_BY_DEFAULT = frozenset(
    {
        "bloom",
        "opt",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "mamba",
        "falcon",
        "RefinedWeb",
        "RefinedWebModel",
        "gpt2",
    }
)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|decoder\.layers)\.(\d+)\.")
MAX_TENSORS = 1_000_000  # safetensors headers list a few thousand


@dataclass(frozen=True, kw_only=True)
class Weights:
    """Weight bytes of the most-loaded GPU rank, and where the number came from."""

    bytes_per_rank: int
    total_bytes: int
    source: str  # "safetensors" (exact headers) or "config" (derived parameter count)
    parameter_count: int
    quantization: str | None
    detail: str = ""
    active_parameter_count: int = 0  # per token (MoE: routed top-k); 0 when unknown
    draft_bytes_per_rank: int = 0  # a draft checkpoint's share of bytes_per_rank
    stage_bytes: tuple[int, ...] = ()  # one GPU of each pipeline stage (max: bytes_per_rank)
    lora_bytes_per_rank: int = 0  # LoRA buffers' share of bytes_per_rank (planner.lora)
    offloaded_bytes_per_rank: int = 0  # --cpu-offload-gb: moved off the most-loaded GPU
    offloaded_bytes: int = 0  # ... and off every GPU together (pinned host memory)
    tower_bytes: int = 0  # a multimodal model's whole vision tower (whether placed or not)
    rotary_cache_bytes: int = 0  # vLLM's rotary cos/sin cache's share of bytes_per_rank


@dataclass(frozen=True, kw_only=True)
class _Parts:
    """Whole-model bytes split the way TP/PP split them."""

    embed: int
    lm_head: int
    layers: list[int]  # per decoder layer, shardable over TP
    replicated: list[int]  # per decoder layer, copied on every TP rank (norms, MLA down-projs)
    other: int  # final norm, etc. (last stage, replicated)
    params: int
    active_params: int  # parameters one token passes through (MoE: top-k experts)
    # routed experts per decoder layer (whole model; sharded over dp x tp, not tp): the
    # config path and safetensors headers both keep them apart from ``layers``
    experts: list[int] = field(default_factory=list)
    num_experts: int = 0
    # the checkpoint's MTP layers (``model.layers.{L + i}``): (shardable, replicated,
    # routed experts) each; loaded only with --speculative-config method mtp
    mtp: list[tuple[int, int, int]] = field(default_factory=list)
    tower: int = 0  # vision/audio tower and projector (first stage, TP-sharded)


def _quant_bytes_per_param(quant: Mapping[str, Any] | None, dtype_bytes: int) -> tuple[float, str]:
    """Bytes per parameter of quantized linear weights, and a label."""
    if not quant:
        return float(dtype_bytes), "none"
    where = "quantization_config"
    method = str(quant.get("quant_method") or quant.get("quant_algo") or "").lower()
    bits = config_int(quant, "bits", where) or config_int(quant, "w_bit", where)
    group = (
        config_int(quant, "group_size", where) or config_int(quant, "q_group_size", where) or 128
    )
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "autoround") and bits:
        # packed ints + an fp16 scale (and packed zero point) per group
        return bits / 8 + (2 + bits / 8) / group, f"{method} {bits}-bit"
    if method in ("fp8", "fbgemm_fp8", "fp8_dynamic"):
        return 1.0, "fp8"
    if method == "mxfp4":
        return 0.5 + 1 / 32, "mxfp4"  # e8m0 scale per 32 elements
    if method in ("nvfp4", "modelopt_fp4") or "fp4" in method:
        return 0.5 + 1 / 16, "nvfp4"  # fp8 scale per 16 elements
    if method == "bitsandbytes":
        if quant.get("load_in_4bit"):
            return 0.5 + 4 / 64, "bitsandbytes 4-bit"
        return 1.0, "bitsandbytes 8-bit"
    if method in ("compressed-tensors", "compressed_tensors", "modelopt"):
        groups = quant.get("config_groups") or {}
        for group_cfg in groups.values() if isinstance(groups, dict) else []:
            weights = group_cfg.get("weights") if isinstance(group_cfg, dict) else None
            if not isinstance(weights, dict):
                continue
            where = f"{where}.config_groups.weights"
            nbits = config_int(weights, "num_bits", where)
            if nbits:
                size = config_int(weights, "group_size", where)
                extra = 2 / size if size else 0.0
                return nbits / 8 + extra, f"{method} w{nbits}"
        algo = str(quant.get("quant_algo") or "").upper()
        if "FP8" in algo:
            return 1.0, "modelopt fp8"
        if "FP4" in algo:
            return 0.5 + 1 / 16, "modelopt nvfp4"
    return float(dtype_bytes), method or "unknown"


def _parts(spec: ModelSpec) -> _Parts:
    c = spec.config
    mt = spec.model_type
    hidden = spec.hidden_size
    name = spec.name
    vocab = config_int(c, "vocab_size", name) or config_int(c, "padded_vocab_size", name) or 32000
    quant = c.get("quantization_config") or c.get("compression_config")
    linear_bpp, _ = _quant_bytes_per_param(quant if isinstance(quant, dict) else None, 2)
    wdtype = 2  # served dtype: float32 checkpoints load in bf16
    expert_only = isinstance(quant, dict) and str(quant.get("quant_method")) == "mxfp4"
    attn_bpp = wdtype if expert_only else linear_bpp
    heads, kv, head = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    gated = mt not in UNGATED_MLP
    dense_i = dense_intermediate(c, hidden, name)
    experts = num_experts_of(c, name)
    moe_i = (
        config_int(c, "moe_intermediate_size", name)
        or config_int(c, "intermediate_size", name)
        or dense_i
    )
    shared_i = (
        config_int(c, "shared_expert_intermediate_size", name)
        + config_int(c, "n_shared_experts", name) * moe_i
    )
    if mt in ("llama4", "llama4_text"):
        shared_i = config_int(c, "intermediate_size", name)  # one shared expert of expert width
        moe_i = shared_i or dense_i
    moe_i_stored = moe_i
    if expert_only:
        # NOTE: gpt-oss. vLLM's Hopper MXFP4 MoE kernel pads the expert intermediate size to a
        # multiple of 256 (2880 -> 3072); with it the derived weights match CALIBRATION.md's
        # logged 13.47 GiB (20b) and 64.38 GiB (120b) within 0.5 %. Parameters stay unpadded.
        moe_i_stored = -(-moe_i // 256) * 256
    top_k = next(
        (
            config_int(c, k, name)
            for k in ("num_experts_per_tok", "experts_per_token", "moe_topk")
            if config_int(c, k, name) > 0
        ),
        min(2, experts or 2),
    )
    pattern = (
        c.get("hybrid_override_pattern")
        if isinstance(c.get("hybrid_override_pattern"), str)
        else None
    )
    mlp_mats = 3 if gated else 2
    output_gate = spec.attention_output_gate
    layers, replicated, routed = [], [], []
    params = active = 0
    for i, s in enumerate(spec.layers):
        shard = repl = routed_bytes = 0.0
        n = 0
        # mixer
        if isinstance(s, MLA):
            nope = config_int(c, "qk_nope_head_dim", name) or 128
            rope = s.qk_rope_head_dim
            v_dim = config_int(c, "v_head_dim", name) or nope
            q_lora = config_int(c, "q_lora_rank", name)
            if q_lora:
                repl += hidden * q_lora * attn_bpp
                shard += q_lora * heads * (nope + rope) * attn_bpp
                n += hidden * q_lora + q_lora * heads * (nope + rope)
            else:
                shard += hidden * heads * (nope + rope) * attn_bpp
                n += hidden * heads * (nope + rope)
            repl += hidden * (s.kv_lora_rank + rope) * attn_bpp
            shard += (s.kv_lora_rank * heads * (nope + v_dim) + heads * v_dim * hidden) * attn_bpp
            n += hidden * (s.kv_lora_rank + rope) + s.kv_lora_rank * heads * (nope + v_dim)
            n += heads * v_dim * hidden
        elif isinstance(s, Mamba2State):
            inner = s.intermediate_size
            conv_dim = inner + 2 * s.n_groups * s.state_size
            m = hidden * (inner + conv_dim + s.num_heads) + conv_dim * s.conv_kernel
            m += inner * hidden + 3 * s.num_heads + inner
            shard += m * linear_bpp
            n += m
        elif isinstance(s, Mamba1State):
            inner = s.intermediate_size
            auto = -(-hidden // 16)  # transformers' "auto"
            rank = c.get("time_step_rank")
            dt_rank = auto if rank == "auto" else (config_int(c, "time_step_rank", name) or auto)
            m = hidden * 2 * inner + inner * s.conv_kernel + inner * (dt_rank + 2 * s.state_size)
            m += dt_rank * inner + inner * s.state_size + inner + inner * hidden
            shard += m * linear_bpp
            n += m
        elif isinstance(s, GatedDeltaNetState):
            key_dim, value_dim = s.num_k_heads * s.head_k_dim, s.num_v_heads * s.head_v_dim
            m = hidden * (2 * key_dim + 2 * value_dim + 2 * s.num_v_heads)
            m += (2 * key_dim + value_dim) * s.conv_kernel + value_dim * hidden
            shard += m * linear_bpp
            n += m
        elif s is not None:
            q_heads = heads * (2 if output_gate else 1)  # Q and, where packed, its gate
            m = hidden * q_heads * head + 2 * hidden * kv * head + heads * head * hidden
            shard += m * attn_bpp
            n += m
        # MLP (Nemotron-H layers are a mixer or an MLP, never both)
        block = pattern[i] if pattern else None
        if block in ("M", "*") or mt in ("mamba", "falcon_mamba", "mamba2"):
            pass  # a mixer-only block: Nemotron-H's M / * layers, pure Mamba models
        elif (block == "E") or (block is None and is_moe_layer(c, mt, i, name)):
            per_expert = mlp_mats * hidden * moe_i
            shared = (mlp_mats if block is None else 2) * hidden * shared_i
            routed_bytes += experts * mlp_mats * hidden * moe_i_stored * linear_bpp
            shard += shared * attn_bpp
            repl += hidden * experts * wdtype  # router
            n += experts * per_expert + shared + hidden * experts
            active -= (experts - min(top_k, experts)) * per_expert  # idle experts per token
        else:
            m = mlp_mats * hidden * dense_i
            shard += m * attn_bpp
            n += m
        repl += 2 * hidden * wdtype  # two norms
        n += 2 * hidden
        layers.append(round(shard))
        replicated.append(round(repl))
        routed.append(round(routed_bytes))
        params += n
    tied = bool(c.get("tie_word_embeddings", mt in TIED_BY_DEFAULT))
    embed = vocab * hidden * wdtype
    lm_head = 0 if tied else vocab * hidden * wdtype
    params += vocab * hidden * (1 if tied else 2) + hidden
    # MTP layers (DeepSeek/Kimi/GLM): a decoder layer like the last one, plus eh_proj
    # (2H -> H) and enorm / hnorm / the shared head's norm; embeddings and head are shared
    mtp = [
        (
            layers[-1] + round(2 * hidden * hidden * attn_bpp),
            replicated[-1] + 3 * hidden * wdtype,
            routed[-1],
        )
        for _ in range(_mtp_count(spec) if layers else 0)
    ]
    return _Parts(
        embed=embed,
        lm_head=lm_head,
        layers=layers,
        replicated=replicated,
        other=hidden * wdtype,
        params=params,
        active_params=params + active,
        experts=routed,
        num_experts=experts,
        mtp=mtp,
    )


def _mtp_count(spec: ModelSpec) -> int:
    return mtp_layers(spec.config, spec.model_type)


def from_config(
    spec: ModelSpec, *, tp: int = 1, pp: int = 1, placement: Placement | None = None
) -> Weights:
    """Weight bytes per rank derived from the config's parameter count and quantization."""
    parts = _parts(spec)
    quant = spec.config.get("quantization_config") or spec.config.get("compression_config")
    _, label = _quant_bytes_per_param(quant if isinstance(quant, dict) else None, 2)
    tower = spec.vision
    if tower is not None:  # towers stay in the model dtype in quantized checkpoints too
        parts = replace(
            parts,
            tower=tower.bytes,
            params=parts.params + tower.params,
            active_params=parts.active_params + tower.params,
        )
    total = (
        parts.embed
        + parts.lm_head
        + sum(parts.layers)
        + sum(parts.replicated)
        + sum(parts.experts)
        + parts.other
        + parts.tower
    )
    stages = _stage_bytes(parts, len(spec.layers), placement or Placement(tp=tp, pp=pp))
    detail = f"{parts.params / 1e9:.2f} B parameters derived from the config"
    if tower is not None:
        detail += f" (vision tower {tower.params / 1e9:.2f} B)"
    return Weights(
        bytes_per_rank=max(stages),
        total_bytes=total,
        source="config",
        parameter_count=parts.params,
        active_parameter_count=parts.active_params,
        quantization=None if label == "none" else label,
        stage_bytes=tuple(stages),
        detail=detail,
        tower_bytes=parts.tower,
    )


def _stage_bytes(parts: _Parts, num_layers: int, where: Placement) -> list[int]:
    """Bytes on one GPU of each pipeline stage: the stage's shardable bytes over the attention
    TP, its routed experts over dp x tp (:meth:`Placement.expert_bytes`), replicated bytes
    whole; embeddings and the tower on the first stage, head, final norm and MTP layers on the
    last."""
    tp, pp = where.tp, where.pp
    # one DP rank without EP shards experts over tp like the rest: keep them in one sum
    fold = where.dp == 1 and not where.ep
    experts = parts.experts or [0] * num_layers
    stages = []
    for rank in range(pp):
        start, end = get_pp_indices(num_layers, rank, pp)
        shard = sum(parts.layers[start:end])
        repl = sum(parts.replicated[start:end])
        routed = experts[start:end]
        if rank == 0:
            shard += parts.embed  # vocab-parallel embedding
            if where.tower == "weights":
                shard += parts.tower
            elif where.tower == "data":
                repl += parts.tower  # a whole copy on every TP rank
        if rank == pp - 1:
            shard += parts.lm_head if parts.lm_head else (parts.embed if pp > 1 else 0)
            repl += parts.other
            if where.mtp:
                shard += sum(m[0] for m in parts.mtp)
                repl += sum(m[1] for m in parts.mtp)
                routed = [*routed, *(m[2] for m in parts.mtp)]
        if fold:
            stages.append(-(-(shard + sum(routed)) // tp) + repl)
        else:
            moe = sum(where.expert_bytes(e, parts.num_experts) for e in routed)
            stages.append(-(-shard // tp) + moe + repl)
    return stages


# --------------------------------------------------------------------------- safetensors


def _tensor_sizes(name: str, info: Any, where: str) -> tuple[int, int]:
    """(bytes, parameters) of one header entry; a malformed entry is a ConfigError."""
    if not isinstance(info, Mapping):
        raise ConfigError(f"{where}: tensor {name[:60]!r} is not a JSON object")
    shape = info.get("shape", [])
    if not isinstance(shape, list):
        raise ConfigError(f"{where}: tensor {name[:60]!r} has no shape list")
    count = 1
    for dim in shape:
        count *= count_of(dim, f"{where}: a dimension of {name[:60]!r}")
    if count > MAX_CONFIG_INT:
        raise ConfigError(f"{where}: tensor {name[:60]!r} has an implausible shape")
    offsets = info.get("data_offsets")
    if isinstance(offsets, list) and len(offsets) == 2:
        start, end = (count_of(o, f"{where}: data_offsets of {name[:60]!r}") for o in offsets)
        if end < start:
            raise ConfigError(f"{where}: tensor {name[:60]!r} ends before it starts")
        return end - start, count
    return count * SAFETENSORS_DTYPE_BITS.get(str(info.get("dtype")), 16) // 8, count


# Vision / audio towers and their projectors (Qwen2.5-VL ``visual.*``, LLaVA / Gemma 3
# ``vision_tower.*`` + ``multi_modal_projector.*``, Mllama / Llama 4 ``vision_model.*``):
# not language-model layers, whatever block index they carry.
TOWER = re.compile(
    r"(?:^|\.)(?:visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|"
    r"mm_projector|audio_tower|audio_model|image_newline|vision_embed_tokens)(?:\.|$)"
)
ROUTED_EXPERT = re.compile(r"\.experts\.")  # not shared_experts / shared_expert


def from_tensors(
    tensors: Iterable[tuple[str, Mapping[str, Any]]],
    num_layers: int,
    *,
    tp: int = 1,
    pp: int = 1,
    quantization: str | None = None,
    where: str = "safetensors header",
    placement: Placement | None = None,
    num_experts: int = 0,
    mtp_layers: int = 0,
) -> Weights:
    """Exact weight bytes from (name, {dtype, shape, data_offsets}) pairs: routed experts
    (``.experts.``) apart from the rest of their layer, MTP layers (``layers.{L + i}``,
    ``mtp.*``) apart and loaded only when ``placement.mtp``, tower tensors apart from the
    language-model layers."""
    layers = [0] * num_layers
    experts = [0] * num_layers
    mtp = [[0, 0] for _ in range(mtp_layers)]  # [non-expert, routed experts]
    embed = lm_head = other = tower = 0
    params = 0
    for number, (name, info) in enumerate(tensors):
        if name == "__metadata__":
            continue
        if number >= MAX_TENSORS:
            raise ConfigError(f"{where}: more than {MAX_TENSORS:,} tensors")
        size, count = _tensor_sizes(name, info, where)
        params += count
        match = LAYER_INDEX.search(name)
        index = int(match.group(1)) if match else -1
        if TOWER.search(name):
            tower += size
        elif mtp_layers and name.startswith("mtp."):  # Qwen3-Next: mtp.layers.0.*
            mtp[0][1 if ROUTED_EXPERT.search(name) else 0] += size
        elif 0 <= index < num_layers:
            if ROUTED_EXPERT.search(name):
                experts[index] += size
            else:
                layers[index] += size
        elif mtp_layers and num_layers <= index < num_layers + mtp_layers:
            mtp[index - num_layers][1 if ROUTED_EXPERT.search(name) else 0] += size
        elif "lm_head" in name or name.endswith("output.weight"):
            lm_head += size
        elif "embed" in name or "wte" in name or "word_embeddings" in name:
            embed += size
        else:
            other += size
    parts = _Parts(
        embed=embed,
        lm_head=lm_head,
        layers=layers,
        replicated=[0] * num_layers,
        other=other,
        params=params,
        active_params=params,
        experts=experts,
        num_experts=num_experts,
        mtp=[(m[0], 0, m[1]) for m in mtp],
        tower=tower,
    )
    total = embed + lm_head + sum(layers) + sum(experts) + other + tower + sum(map(sum, mtp))
    stages = _stage_bytes(parts, num_layers, placement or Placement(tp=tp, pp=pp))
    return Weights(
        bytes_per_rank=max(stages),
        stage_bytes=tuple(stages),
        total_bytes=total,
        source="safetensors",
        parameter_count=params,
        quantization=quantization,
        detail="exact tensor sizes from safetensors headers",
        tower_bytes=tower,
    )


def per_rank(
    model: LoadedModel, *, tp: int = 1, pp: int = 1, placement: Placement | None = None
) -> Weights:
    """Weight bytes on the most-loaded rank: exact from the fetched safetensors headers, else
    derived from the config. Pure: :func:`planner.model.load.load_model` did the fetching."""
    spec = model.spec
    where_ = placement or Placement(tp=tp, pp=pp)
    if where_.pp > spec.num_layers:  # before the stages are laid out, one per pipeline rank
        raise UsageError(f"--pp {where_.pp} is more than the model's {spec.num_layers} layers")
    if model.tensors is not None:
        # the folder names a local file's errors; the Hub's headers were parsed by the client
        local = model.tensors_where and not model.tensors_where.startswith("hub:")
        where = model.tensors_where if local else "safetensors header"
        return from_tensors(
            model.tensors,
            spec.num_layers,
            where=where,
            placement=where_,
            num_experts=num_experts_of(spec.config, spec.name),
            mtp_layers=_mtp_count(spec),
        )
    return from_config(spec, placement=where_)


def eagle_head(spec: ModelSpec, method: str, tp: int) -> Weights:
    """An EAGLE head from its config: its decoder layer(s) and the ``fc`` that fuses the
    target's hidden states (2H -> H for EAGLE, 3H -> H for EAGLE3), sharing the target's
    embeddings and lm_head as vLLM's EagleProposer does when the head brings none; an EAGLE3
    head with ``draft_vocab_size`` has its own (smaller) lm_head.

    EAGLE-LLaMA3-Instruct-8B (1 layer, H 4,096, bf16): the layer's 218.1 M parameters
    (attention 41.9 M + MLP 176.2 M + 2 norms) and fc 2 x 4,096 x 4,096 = 33.6 M: 0.47 GiB."""
    parts = _parts(spec)
    hidden, wdtype = spec.hidden_size, 2
    fused = 3 if method == "eagle3" else 2
    shard = sum(parts.layers) + sum(parts.experts) + fused * hidden * hidden * wdtype
    vocab = spec.config.get("draft_vocab_size")
    if method == "eagle3" and isinstance(vocab, int) and vocab > 0:
        shard += vocab * hidden * wdtype
    repl = sum(parts.replicated)
    per = -(-shard // tp) + repl
    return Weights(
        bytes_per_rank=per,
        total_bytes=shard + repl,
        source="config",
        parameter_count=(shard + repl) // wdtype,
        quantization=None,
        detail="EAGLE head derived from its config (embeddings and lm_head shared)",
    )


def with_lora_and_offload(dep: Deployment, target: Weights) -> Weights:
    """``target`` with ``--cpu-offload-gb`` taken off each stage's GPU and the stage's LoRA
    buffers added; the most-loaded stage may change (Llama-3.1-8B at PP 2: the last stage
    holds lm_head and its LoRA)."""
    s = dep.settings
    if not s.enable_lora and not s.cpu_offload_gb:
        return target
    stages = list(target.stage_bytes) or [target.bytes_per_rank]
    cap = s.cpu_offload_bytes
    on_gpu = [w - min(cap, w) for w in stages]
    lora_stages = [0] * len(stages)
    if s.enable_lora:
        lora_stages = list(buffers(dep.spec, s).stage_bytes)
    combined = [w + lo for w, lo in zip(on_gpu, lora_stages, strict=True)]
    busiest = max(range(len(combined)), key=lambda k: combined[k])

    detail = target.detail
    if s.cpu_offload_gb:
        detail += f"; less {fmt_bytes(stages[busiest] - on_gpu[busiest])} offloaded to the CPU"
    if s.enable_lora:
        detail += f"; + {fmt_bytes(lora_stages[busiest])} of LoRA buffers"

    return replace(
        target,
        bytes_per_rank=combined[busiest],
        stage_bytes=tuple(combined),
        lora_bytes_per_rank=lora_stages[busiest],
        offloaded_bytes_per_rank=stages[busiest] - on_gpu[busiest],
        offloaded_bytes=offloaded_bytes(stages, s),
        detail=detail,
    )


# Model types whose attention layers build vLLM's rotary embedding from the config's
# max_position_embeddings (``get_rope(max_position=config.max_position_embeddings)`` in
# ``model_executor/models/{llama,llama4,qwen2,qwen2_moe,qwen3,qwen3_moe,qwen3_next,qwen3_5,
# gpt_oss,gemma2,gemma3,mixtral}.py`` 0.19.0; Mistral and Phi-3 are llama.py's, the Qwen VL
# models run Qwen2's and Qwen3's). Other families are left at 0 (not checked).
ROTARY_MODEL_TYPES = frozenset(
    {
        "llama",
        "llama4_text",
        "mistral",
        "mixtral",
        "phi3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_5_text",
        "qwen3_5_moe_text",
        "qwen2_5_vl",
        "qwen2_vl",
        "qwen3_vl_text",
        "qwen3_vl_moe_text",
        "gpt_oss",
        "gemma2",
        "gemma3_text",
    }
)


def _rope_positions(rope: Mapping[str, Any], positions: int) -> int | None:
    """Rows of one rotary cos/sin cache for ``rope`` (None: a rope type not checked)."""
    kind = str(rope.get("rope_type") or rope.get("type") or "default")
    factor = rope.get("factor")
    scale = float(factor) if isinstance(factor, int | float) and factor > 0 else 1.0
    if kind in ("default", "mrope", "llama3"):
        rows = positions
    elif kind in ("linear", "dynamic") and "alpha" not in rope:
        rows = int(positions * scale)  # linear_scaling_rope.py :86-91, dynamic_ntk :52-62
    elif kind == "yarn":  # the original length x factor (yarn_scaling_rope.py 0.19.0:77-78)
        original = rope.get("original_max_position_embeddings") or positions
        rows = int(int(original) * scale)
    else:
        return None
    # MRoPE keeps 4 x the positions for a video's indices (mrope.py 0.19.0:236-242)
    return rows * 4 if "mrope_section" in rope else rows


def rotary_cache_bytes(spec: ModelSpec) -> int:
    """vLLM's rotary cos/sin cache on each GPU: ``RotaryEmbedding`` registers a (positions,
    rotary_dim) buffer in the model dtype at model init (``rotary_embedding/base.py``
    0.19.0:58-63), one per distinct rope (``get_rope`` caches them), and "Model loading took"
    counts it. Llama-3.1: 131,072 x 128 x 2 B = 32 MiB; Llama-4 Scout's 10,485,760 positions:
    2.5 GiB; Gemma 3 builds two (its sliding layers' local rope and the global one,
    ``gemma3.py`` 0.19.0:176-181). 0 for families not checked and attention-free models."""
    c = spec.config
    if spec.model_type not in ROTARY_MODEL_TYPES or not spec.attention_layers:
        return 0
    positions = config_int(c, "max_position_embeddings", spec.name)
    if not positions:
        return 0
    raw = c.get("rope_scaling") or c.get("rope_parameters")
    rope: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    partial = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    fraction = float(partial) if isinstance(partial, int | float) and 0 < partial <= 1 else 1.0
    rotary_dim = int(spec.head_dim * fraction)
    ropes = [rope]
    if spec.model_type == "gemma3_text":
        ropes.append({"rope_type": "default"})  # the sliding layers' local-base rope
    total = 0
    for r in ropes:
        rows = _rope_positions(r, positions)
        if rows is None:
            return 0  # a rope type not checked: none claimed
        total += rows
    return total * rotary_dim * 2  # the served dtype (bf16 / fp16)


def marlin_mxfp4_extra_bytes(spec: ModelSpec, placement: Placement, source: str) -> int:
    """What vLLM's Marlin MXFP4 MoE backend adds to one rank's routed experts (gpt-oss) over
    what kvplan stores for them (``source`` "config": the expert intermediate padded to a
    multiple of 256, the Triton/Hopper layout; "safetensors": the checkpoint's, unpadded).

    Marlin needs n % 256 == 0 and k % 128 == 0, so it pads each rank's expert intermediate to
    a multiple of 128 and the hidden size to a multiple of 256 (``quantization/mxfp4.py``
    0.10.1.1:156-167, 0.11.0:189-200; ``fused_moe/oracle/mxfp4.py`` 0.19.0:380-385), and it is
    the backend wherever triton_kernels is not: on every GPU below compute capability 9.0
    (``mxfp4.py`` 0.10.1.1:127-130, 0.11.0:95-99, 0.12.0:153-162; ``oracle/mxfp4.py``
    0.19.0:204-207). gpt-oss-120b at TP 4 (hidden 2,880 -> 3,072, 720 -> 768 per rank):
    36 layers x 128 experts x 3 x 768 x (3,072 - 2,880) x 0.53125 B = 1.00 GiB per rank."""
    c = spec.config
    quant = c.get("quantization_config")
    if not (isinstance(quant, dict) and str(quant.get("quant_method")) == "mxfp4"):
        return 0
    name, hidden = spec.name, spec.hidden_size
    experts = num_experts_of(c, name)
    moe_i = config_int(c, "moe_intermediate_size", name) or config_int(c, "intermediate_size", name)
    if not experts or not moe_i:
        return 0
    bpp = 0.5 + 1 / 32  # two e2m1 values a byte, an e8m0 scale per 32 (Marlin keeps both)
    if placement.ep:
        local_experts = -(-(experts + placement.redundant_experts) // (placement.dp * placement.tp))
        i_rank, stored_i = moe_i, moe_i
    else:
        local_experts, i_rank = experts, -(-moe_i // placement.tp)
        stored_i = i_rank
    if source == "config":
        stored_i = -(-(-(-moe_i // 256) * 256) // (1 if placement.ep else placement.tp))
    marlin = -(-i_rank // 128) * 128 * (-(-hidden // 256) * 256)
    layers = -(-spec.num_layers // placement.pp)
    extra = layers * local_experts * 3 * (marlin - stored_i * hidden) * bpp
    return max(0, round(extra))


def _marlin_mxfp4(dep: Deployment) -> bool:
    """vLLM runs gpt-oss's MXFP4 experts on Marlin on this GPU: CUDA below compute
    capability 9.0 (:func:`marlin_mxfp4_extra_bytes`), or on a newer one where the user says
    so (``--mxfp4-backend marlin``). There the install decides: without FlashInfer's MXFP4
    path, vLLM takes Marlin when the ``triton_kernels`` package is missing (``mxfp4.py``
    0.11.0:94-99, "Using Marlin backend"), and the 0.11.0 wheel neither ships it nor requires
    it (its ``Requires-Dist``), so a ``pip install vllm==0.11.0`` on an H100 runs Marlin where
    the ``vllm/vllm-openai`` image runs Triton (CALIBRATION.md's 64.38 GiB)."""
    cc = dep.gpu.cuda_capability if dep.gpu else None
    if cc is None:  # ROCm, or a GPU kvplan does not know: no Marlin there
        return False
    return cc < (9, 0) or dep.settings.mxfp4_backend == "marlin"


def _on_every_gpu(target: Weights, extra: int, **changes: Any) -> Weights:
    """``target`` with ``extra`` bytes more on every GPU of every stage (and ``changes``)."""
    return replace(
        target,
        bytes_per_rank=target.bytes_per_rank + extra,
        stage_bytes=tuple(b + extra for b in target.stage_bytes),
        **changes,
    )


def for_deployment(dep: Deployment) -> Weights:
    """The weights on the most-loaded GPU of ``dep``: the target as its settings place it,
    less what ``--cpu-offload-gb`` moves to the host (up to X GiB of each GPU's own weights),
    plus the LoRA buffers of its stage (:mod:`planner.lora`: vLLM counts them as weights), plus
    a draft checkpoint (eagle, eagle3, draft_model, dflash) on the last pipeline stage, sharded
    by the drafter's TP (:mod:`planner.speculative`)."""
    s = dep.settings
    where = placement_of(s, dep.spec)
    target = per_rank(dep.model, placement=where)
    if _marlin_mxfp4(dep):
        extra = marlin_mxfp4_extra_bytes(dep.spec, where, target.source)
        if extra:
            padding = f"{target.detail}; + {extra:,} B per GPU of Marlin MXFP4 padding"
            target = _on_every_gpu(target, extra, detail=padding)
    rotary = rotary_cache_bytes(dep.spec)
    if rotary:
        target = _on_every_gpu(target, rotary, rotary_cache_bytes=rotary)
    target = with_lora_and_offload(dep, target)
    if s.speculative is None or dep.draft is None:
        return target
    draft_tp = s.speculative.draft_tp(s.tp)
    if s.speculative.method in ("eagle", "eagle3") and dep.draft.tensors is None:
        draft = eagle_head(dep.draft.spec, s.speculative.method, draft_tp)
    else:
        draft = per_rank(dep.draft, tp=draft_tp)
    # the drafter lives on the last pipeline stage only
    stages = list(target.stage_bytes) or [target.bytes_per_rank]
    stages[-1] += draft.bytes_per_rank
    return replace(
        target,
        bytes_per_rank=max(stages),
        stage_bytes=tuple(stages),
        detail=f"{target.detail}; + {dep.draft.spec.name} draft "
        f"({draft.bytes_per_rank:,} B per GPU, {draft.source})",
        draft_bytes_per_rank=draft.bytes_per_rank,
    )
