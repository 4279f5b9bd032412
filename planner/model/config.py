"""Turn a model's config (found by :mod:`planner.model.resolve`) into a :class:`ModelSpec`.

Fields are read the way vLLM 0.33 reads them (``transformers_utils/model_arch_config_convertor.py``,
``config/model.py``): from the text config of multimodal models, with the HF attribute aliases,
and each layer's kind decided by the model's own rules (``layer_types``, Gemma's pattern, gpt-oss'
even layers, Llama 4's NoPE layers, Nemotron-H's pattern ...). The raw JSON is the source; where an
optional field is missing and transformers knows the ``model_type``, its default is taken from
transformers' config class (``AutoConfig.for_model``, never remote code).
"""

from __future__ import annotations

import functools
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from planner.errors import ConfigError
from planner.model.specs import (
    MLA,
    ChunkedLocal,
    FullAttention,
    GatedDeltaNetState,
    KVDtype,
    LayerSpec,
    Mamba1State,
    Mamba2State,
    ModelSpec,
    SlidingWindow,
)
from planner.model.vision import tower_of, unsupported_reason

# vLLM `is_deepseek_mla` model types (model_arch_config_convertor.py) seen in released configs.
MLA_MODEL_TYPES = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_mtp",
        "glm_moe_dsa",
        "glm4_moe_lite",
        "kimi_k2",
        "kimi_linear",
        "longcat_flash",
        "pangu_ultra_moe",
        "bailing_hybrid",
    }
)
FALCON_MODEL_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "text_model_config")
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose factor is already part of max_position_embeddings (vLLM _get_and_verify_max_len).
ROPE_TYPES_WITHOUT_FACTOR = frozenset(
    {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
ATTENTION_LAYER_TYPES = frozenset(
    {
        "full_attention",
        "attention",
        "global",
        "indexed_attention",
        "deepseek_sparse_attention",
        "qwen_sparse_attention",
        "hybrid",
    }
)
STATE_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "ssm"})
NO_CACHE_LAYER_TYPES = frozenset({"mlp", "moe", "ffn", "none"})
CONFIG_MAX_BYTES = 5 * 1024 * 1024
MAX_LAYERS = 10_000  # the largest released models have a few hundred
# Sizes and counts above this are not a model (the largest real values, vocabularies and
# context lengths, are a few million); it keeps every product of them exact in a float.
MAX_CONFIG_INT = 1 << 40
# Defaults of optional fields that transformers' (5.24) config classes fill in for the catalog's
# model types, so the common path needs no transformers import; other model types ask
# transformers itself (see _transformers_defaults). Types transformers does not know (custom
# code: chatglm, internlm2, kimi_k2, Falcon's RefinedWeb) have no defaults beyond the raw JSON.
KNOWN_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {},
    "mixtral": {},
    "phi3": {},
    "opt": {},
    "bloom": {},
    "falcon": {},
    "RefinedWeb": {},
    "chatglm": {},
    "internlm2": {},
    "kimi_k2": {},
    "mistral": {"sliding_window": 4096},
    "gemma2": {"sliding_window": 4096},
    "gemma3_text": {"sliding_window": 4096},
    "gpt_oss": {"sliding_window": 128},
    "llama4_text": {"no_rope_layer_interval": 4, "attention_chunk_size": 8192},
    "qwen2": {"max_window_layers": 28, "use_sliding_window": False},
    "qwen3": {"max_window_layers": 28, "use_sliding_window": False},
    "qwen3_moe": {"use_sliding_window": False},
    "qwen3_next": {"linear_conv_kernel_dim": 4},
    "qwen3_vl_text": {},  # Qwen3VLTextConfig: no sliding-window fields
    "deepseek_v2": {"qk_nope_head_dim": 128, "v_head_dim": 128},
    "deepseek_v3": {"qk_nope_head_dim": 128, "v_head_dim": 128},
    "mamba": {"expand": 2, "state_size": 16, "conv_kernel": 4},
    "nemotron_h": {
        "expand": 2,
        "conv_kernel": 4,
        "n_groups": 8,
        "ssm_state_size": 128,
        "mamba_ssm_cache_dtype": "float32",
    },
}
# Defaults of transformers' (5.24) text config classes that a multimodal wrapper's nested
# ``text_config`` leaves out: transformers serialises sub-configs as their difference from the
# class defaults (LLaVA-1.5's text_config states 7 keys, Gemma-3-4B's no head counts), and vLLM
# reads them through those classes. Applied only to a nested text config, so a text model's
# config missing its layer count is still an error.
NESTED_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {  # LlamaConfig
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "vocab_size": 32000,
    },
    "gemma3_text": {  # Gemma3TextConfig
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "vocab_size": 262208,
    },
}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
MAX_HUB_ID = 200  # the Hub's own limit is 96 characters for each part


# --------------------------------------------------------------------------- field access


class _Fields:
    """Typed access to one config dict with HF's aliases; errors name the field."""

    def __init__(self, text: Mapping[str, Any], top: Mapping[str, Any], name: str) -> None:
        self.text = text
        self.top = top
        self.name = name
        self.model_type = str(text.get("model_type") or top.get("model_type") or "")
        self.defaults_used: list[str] = []

    def get(self, *keys: str) -> Any:
        """First present, non-null value among ``keys`` in the text config."""
        for key in keys:
            value = self.text.get(key)
            if value is not None:
                return value
        return None

    def optional(self, *keys: str) -> Any:
        """Like :meth:`get`, then transformers' default for this model type when the key is
        absent. An explicit ``null`` stays null, as it does in transformers (NOTE: Mistral-Nemo
        and Mistral-7B-v0.3 write ``"sliding_window": null`` to turn the default 4096 off)."""
        value = self.get(*keys)
        if value is not None or any(key in self.text for key in keys):
            return value
        defaults = _transformers_defaults(self.model_type)
        for key in keys:
            if defaults.get(key) is not None:
                self.defaults_used.append(key)
                return defaults[key]
        return None

    def positive_int(self, value: Any, key: str) -> int:
        """Validate one size field: a positive whole number."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.name}: {key} must be a positive integer, got {value!r}")
        if isinstance(value, float):
            if not math.isfinite(value) or value != int(value):
                raise ConfigError(f"{self.name}: {key} must be a positive integer, got {value!r}")
            value = int(value)
        if value <= 0:
            raise ConfigError(f"{self.name}: {key} must be a positive integer, got {value!r}")
        if value > MAX_CONFIG_INT:
            raise ConfigError(
                f"{self.name}: {key} {_short_int(value)} is beyond any real model "
                f"(at most {MAX_CONFIG_INT:,})"
            )
        return int(value)

    def require_int(self, *keys: str) -> int:
        value = self.get(*keys)
        if value is None:
            raise ConfigError(
                f"{self.name}: config has no {keys[0]}"
                + (f" (or {', '.join(keys[1:])})" if keys[1:] else "")
                + "; is this a decoder language model's config.json?"
            )
        return self.positive_int(value, next(k for k in keys if self.text.get(k) is not None))

    def optional_int(self, *keys: str, default: int | None = None) -> int | None:
        value = self.optional(*keys)
        if value is None:
            return default
        return self.positive_int(value, keys[0])


def _short_int(value: int | float) -> str:
    text = f"{value:,}" if isinstance(value, int) else repr(value)
    return text if len(text) <= 30 else f"of {len(str(int(value))):,} digits"


@functools.lru_cache(maxsize=64)
def _transformers_defaults(model_type: str) -> Mapping[str, Any]:
    """Defaults of transformers' config class for ``model_type`` ({} if unknown or absent).

    Only consulted for optional fields (windows, patterns, state sizes), never for layer or head
    counts: a config missing those is an error, not something to fill with a default.
    """
    if model_type in KNOWN_DEFAULTS:
        return KNOWN_DEFAULTS[model_type]
    if not model_type or os.environ.get("KVPLAN_NO_TRANSFORMERS"):
        return {}

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" noise
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # heavy import: only when a field is missing and the type is not in KNOWN_DEFAULTS
            from transformers import CONFIG_MAPPING, AutoConfig
    except ImportError:
        return {}
    if model_type not in CONFIG_MAPPING:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # for_model builds the built-in config class: remote code cannot be involved.
            config = AutoConfig.for_model(model_type)
    except Exception:  # a config class that cannot build with no arguments
        return {}
    return dict(config.to_dict())


# --------------------------------------------------------------------------- parsing


def text_config_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The language-model part of a config (``get_text_config()``): nested for VLMs, with the
    class defaults a nested text config leaves out (:data:`NESTED_TEXT_DEFAULTS`)."""
    for key in TEXT_CONFIG_KEYS:
        nested = raw.get(key)
        if isinstance(nested, dict) and nested:
            merged = dict(nested)
            # dtype and quantization fall back to the outer config (vLLM does the same).
            for outer in ("torch_dtype", "dtype", "quantization_config", "compression_config"):
                if merged.get(outer) is None and raw.get(outer) is not None:
                    merged[outer] = raw[outer]
            for name in _nested_defaults_used(merged):
                merged[name] = NESTED_TEXT_DEFAULTS[str(merged.get("model_type"))][name]
            return merged
    return dict(raw)


def _nested_defaults_used(text: Mapping[str, Any]) -> list[str]:
    """The class defaults a nested text config leaves out (``text`` as nested)."""
    defaults = NESTED_TEXT_DEFAULTS.get(str(text.get("model_type") or ""), {})
    return [key for key in defaults if text.get(key) is None]


def _nested_text(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    for key in TEXT_CONFIG_KEYS:
        nested = raw.get(key)
        if isinstance(nested, dict) and nested:
            return nested
    return None


def parse_config(
    raw: Mapping[str, Any],
    *,
    name: str,
    source: str,
    label: str | None = None,
    preprocessor: Mapping[str, Any] | None = None,
    video_preprocessor: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Build the model's :class:`ModelSpec` from a config dict (as read from config.json).

    Args:
        raw: the parsed ``config.json`` (top level; nested ``text_config`` is handled here).
        name: the model's display name (hub id or catalog name).
        source: where the config came from, for the user (``catalog``, a path, ``hub:...``).
        label: how error messages name the config (default ``name``; a local file's path).
        preprocessor, video_preprocessor: a multimodal model's ``preprocessor_config.json``
            (and Qwen3-VL's ``video_preprocessor_config.json``), when at hand: the processor's
            pixel budget sets the tokens per image (:mod:`planner.multimodal`).

    Returns:
        The whole-model spec: per-layer cache specs at TP 1 in the model dtype.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: config must be a JSON object, got {type(raw).__name__}")
    text = text_config_of(raw)
    nested = _nested_text(raw)
    f = _Fields(text, raw, label or name)
    f.defaults_used.extend(_nested_defaults_used(nested) if nested is not None else [])
    model_type = f.model_type
    notes: list[str] = []
    hf_notes: list[str] = []

    num_layers = _num_layers(f)
    is_mla = model_type in MLA_MODEL_TYPES and f.get("kv_lora_rank") is not None
    has_attention = model_type not in ("mamba", "falcon_mamba", "mamba2")
    num_heads = (
        f.require_int("num_attention_heads", "n_head", "n_heads", "num_heads")
        if (has_attention)
        else (f.optional_int("num_attention_heads", "n_head", "num_heads") or 0)
    )
    hidden = f.require_int("hidden_size", "n_embed", "n_embd", "d_model")
    num_kv_heads = _num_kv_heads(f, num_heads, hidden) if has_attention else 0
    head_dim = _head_dim(f, num_heads, hidden, is_mla, notes) if has_attention else 0

    dtype = _model_dtype(f)
    dtype_bytes = DTYPE_BYTES[dtype]
    kinds = _layer_kinds(f, num_layers, notes)
    layers = _layer_specs(f, kinds, num_kv_heads, head_dim, dtype_bytes, is_mla, notes)
    if f.model_type in FALCON_MODEL_TYPES and _falcon_new_arch(f, hidden):
        if f.model_type == "falcon":
            # NOTE: Falcon 40B/180B in transformers' own FalconAttention: from 5.25 it caches
            # num_kv_heads (modeling_falcon.py 5.25.0:297-301); up to 5.24 _split_heads
            # broadcast K and V to every query head first (5.24.0:257-261).
            hf_notes.append(
                f"transformers before 5.25 caches K and V for all {num_heads} query heads "
                f"({num_heads // num_kv_heads}x these --engine hf bytes); 5.25 and later cache "
                f"the {num_kv_heads} KV heads"
            )
        else:
            # NOTE: RefinedWeb (Falcon's remote code, modelling_RW.py) broadcasts K and V to
            # every query head before caching them, so --engine hf holds num_attention_heads
            # heads; vLLM caches num_kv_heads.
            layers = [
                replace(s, hf_num_kv_heads=num_heads) if isinstance(s, FullAttention) else s
                for s in layers
            ]
    kv_auto, quant = _kv_dtype_auto(f, dtype, notes)
    if f.defaults_used:
        notes.append("transformers defaults used for: " + ", ".join(sorted(set(f.defaults_used))))
    architectures = raw.get("architectures") or []

    vision = tower_of(
        raw,
        text_hidden=hidden,
        dtype_bytes=dtype_bytes,
        name=label or name,
        preprocessor=preprocessor,
        video_preprocessor=video_preprocessor,
    )
    if vision is None and unsupported_reason(raw):
        notes.append(f"vision tower not sized: {unsupported_reason(raw)}")
    return ModelSpec(
        name=name,
        source=source,
        model_type=model_type or "unknown",
        architecture=str(architectures[0])
        if isinstance(architectures, list) and architectures
        else "",
        dtype=dtype,
        dtype_bytes=dtype_bytes,
        hidden_size=hidden,
        num_attention_heads=num_heads,
        num_kv_heads=1 if is_mla else num_kv_heads,
        head_dim=head_dim,
        max_model_len=_derived_max_model_len(f, notes),
        layers=tuple(layers),
        kv_cache_dtype_auto=kv_auto,
        mha_kv_width=_mha_kv_width(f, head_dim, is_mla),
        quantization=quant,
        notes=tuple(notes),
        hf_notes=tuple(hf_notes),
        config=dict(text),
        vision=vision,
    )


def _num_layers(f: _Fields) -> int:
    pattern = f.get("hybrid_override_pattern")
    keys = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    if f.get(*keys) is None and isinstance(pattern, str) and pattern:
        return len(pattern)  # NOTE: Nemotron-H configs of transformers 5.x count from the pattern
    n = f.require_int(*keys)
    if n > MAX_LAYERS:
        raise ConfigError(f"{f.name}: {n:,} layers is not a plausible model (limit {MAX_LAYERS:,})")
    return n


def _falcon_new_arch(f: _Fields, hidden: int) -> bool:
    """NOTE: Falcon. RWConfig forces the new decoder architecture for hidden 8192 (falcon-40b)."""
    return bool(f.get("new_decoder_architecture")) or (f.model_type != "falcon" and hidden == 8192)


def _num_kv_heads(f: _Fields, num_heads: int, hidden: int) -> int:
    if f.model_type in FALCON_MODEL_TYPES:
        if _falcon_new_arch(f, hidden):
            return f.require_int("num_kv_heads", "n_head_kv", "num_key_value_heads")
        if f.get("multi_query") is None or f.get("multi_query"):
            return 1
        return num_heads
    if f.model_type == "chatglm":
        # NOTE: ChatGLM uses multi_query_group_num only with multi_query_attention.
        if f.get("multi_query_attention"):
            return f.require_int("multi_query_group_num")
        return num_heads
    attn_config = f.get("attn_config")
    if isinstance(attn_config, dict) and attn_config.get("kv_n_heads") is not None:
        return f.positive_int(attn_config["kv_n_heads"], "attn_config.kv_n_heads")  # DBRX / MPT
    keys = (
        "n_head_kv",
        "num_kv_heads",
        "num_key_value_heads",
        "multi_query_group_num",
        "num_attention_groups",
    )
    value = f.get(*keys)
    if value is None:
        return num_heads
    kv = f.positive_int(value, next(k for k in keys if f.text.get(k) is not None))
    if kv > num_heads or num_heads % kv:
        raise ConfigError(
            f"{f.name}: {kv} KV heads do not divide {num_heads} attention heads; "
            "check num_key_value_heads"
        )
    return kv


def _head_dim(f: _Fields, num_heads: int, hidden: int, is_mla: bool, notes: list[str]) -> int:
    if is_mla:
        # NOTE: DeepSeek. HF sets head_dim = qk_rope_head_dim; the cache holds the latent instead.
        lora = f.positive_int(f.get("kv_lora_rank"), "kv_lora_rank")
        rope = f.positive_int(f.get("qk_rope_head_dim"), "qk_rope_head_dim")
        if f.get("head_dim") is not None and f.get("head_dim") != lora + rope:
            notes.append(
                f"MLA cache head {lora + rope} = kv_lora_rank + qk_rope_head_dim "
                f"(config head_dim {f.get('head_dim')} is not the cache's head size)"
            )
        return lora + rope
    explicit = f.get("head_dim")
    if explicit is not None and not (isinstance(explicit, int | float) and explicit == 0):
        return f.positive_int(explicit, "head_dim")
    for key in ("hidden_size_per_head", "attention_head_dim"):  # PLaMo, Nemotron-H
        if f.get(key) is not None:
            return f.positive_int(f.get(key), key)
    if hidden % num_heads:
        raise ConfigError(
            f"{f.name}: hidden_size {hidden} is not a multiple of {num_heads} heads and the "
            "config has no head_dim"
        )
    return hidden // num_heads


def _mha_kv_width(f: _Fields, head_dim: int, is_mla: bool) -> int:
    if not is_mla:
        return 2 * head_dim
    nope = f.optional_int("qk_nope_head_dim", default=128) or 128
    rope = f.positive_int(f.get("qk_rope_head_dim"), "qk_rope_head_dim")
    v_dim = f.optional_int("v_head_dim", default=nope) or nope
    return nope + rope + v_dim


def _model_dtype(f: _Fields) -> str:
    value = f.get("dtype", "torch_dtype")
    if value is None:
        return "bfloat16"  # vLLM: safetensors dtype, else float32 -> bf16 on SM80+
    text = str(value).replace("torch.", "").lower()
    text = {
        "fp16": "float16",
        "half": "float16",
        "bf16": "bfloat16",
        "float": "float32",
        "fp32": "float32",
    }.get(text, text)
    if text not in DTYPE_BYTES:
        raise ConfigError(f"{f.name}: unsupported torch_dtype {value!r}")
    return text


def _kv_dtype_auto(f: _Fields, dtype: str, notes: list[str]) -> tuple[KVDtype, str | None]:
    """What ``--kv-cache-dtype auto`` means for this checkpoint, and its quantization method.

    vLLM resolves auto to fp8 when the checkpoint ships KV scales (compressed-tensors
    ``kv_cache_scheme`` or ModelOpt ``kv_cache_quant_algo``); otherwise it is the model dtype,
    with float32 served as bf16.
    """
    quant = f.get("quantization_config", "compression_config")
    method: str | None = None
    kv = KVDtype.BF16 if dtype in ("bfloat16", "float32") else KVDtype.FP16
    if isinstance(quant, dict):
        method = str(quant.get("quant_method") or quant.get("quant_algo") or "unknown")
        algo = quant.get("kv_cache_quant_algo")
        nested = quant.get("quantization")
        if isinstance(nested, dict):
            algo = algo or nested.get("kv_cache_quant_algo")
        if quant.get("kv_cache_scheme") or (isinstance(algo, str) and "FP8" in algo.upper()):
            kv = KVDtype.FP8
            notes.append("checkpoint ships fp8 KV scales: kv-cache-dtype auto = fp8")
    return kv, method


def _derived_max_model_len(f: _Fields, notes: list[str]) -> int:
    lengths = [
        f.positive_int(f.text[k], k)
        for k in MAX_LEN_KEYS
        if f.text.get(k) is not None and not isinstance(f.text.get(k), bool)
    ]
    if not lengths:
        notes.append("config states no maximum length; vLLM assumes 2048")
        return 2048
    length = min(lengths)
    rope = f.get("rope_scaling", "rope_parameters")
    if isinstance(rope, dict) and "gemma3" not in f.model_type:
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type == "longrope" and f.get("original_max_position_embeddings"):
            # NOTE: Phi-3.5. vLLM defaults LongRoPE models to their original (short) length.
            return f.positive_int(f.get("original_max_position_embeddings"), "original_max")
        factor = rope.get("factor")
        if rope_type not in ROPE_TYPES_WITHOUT_FACTOR and isinstance(factor, int | float):
            if factor > 0 and math.isfinite(factor):
                length = int(length * factor)
    return length


def _layer_kinds(f: _Fields, n: int, notes: list[str]) -> list[str]:
    """Each layer's kind: full, sliding, chunked, mamba1, mamba2, linear or none."""
    mt = f.model_type
    pattern = f.get("hybrid_override_pattern")
    if isinstance(pattern, str):  # Nemotron-H: M = Mamba2, * = attention, - = MLP, E = MoE
        if len(pattern) != n:
            raise ConfigError(
                f"{f.name}: hybrid_override_pattern has {len(pattern)} entries for {n} layers"
            )
        return [{"M": "mamba2", "*": "full"}.get(c, "none") for c in pattern]
    read = f.optional if mt == "jamba" else f.get
    period, offset = read("attn_layer_period"), read("attn_layer_offset")
    if period is not None and offset is not None:  # Jamba
        p = f.positive_int(period, "attn_layer_period")
        return ["full" if i % p == offset else "mamba1" for i in range(n)]
    for key in ("layer_types", "layers_block_type"):
        types = f.get(key)
        if types is not None:
            return _kinds_from_layer_types(f, key, types, n)
    if mt in ("mamba", "falcon_mamba"):
        return ["mamba1"] * n
    if mt in ("mamba2",):
        return ["mamba2"] * n
    interval = f.get("full_attention_interval")
    if interval is not None:  # Qwen3-Next / Qwen3.5: every interval-th layer is full attention
        k = f.positive_int(interval, "full_attention_interval")
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(n)]
    window = _sliding_window(f)
    if mt in ("gemma2", "gpt_oss") and window:
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if mt in ("gemma3", "gemma3_text", "cohere2") and window:
        default = 6 if mt.startswith("gemma3") else 4
        k = f.positive_int(
            f.optional("sliding_window_pattern") or default, "sliding_window_pattern"
        )
        return ["sliding" if (i + 1) % k else "full" for i in range(n)]
    if mt in ("llama4", "llama4_text") and f.get("attention_chunk_size"):
        nope = f.get("no_rope_layers")
        if not nope:
            k = f.positive_int(f.optional("no_rope_layer_interval") or 4, "no_rope_layer_interval")
            nope = [int((i + 1) % k != 0) for i in range(n)]
        if not isinstance(nope, list) or len(nope) < n:
            raise ConfigError(f"{f.name}: no_rope_layers must list one flag per layer")
        return ["chunked" if nope[i] else "full" for i in range(n)]
    if mt.startswith(("qwen2", "qwen3")) and "use_sliding_window" in f.text:
        if not f.get("use_sliding_window") or not window:
            return ["full"] * n
        first = f.optional_int("max_window_layers", default=0) or 0
        return ["sliding" if i >= first else "full" for i in range(n)]
    if window:
        # vLLM: with no layer_types, CacheConfig.sliding_window applies to every layer.
        notes.append(f"sliding window {window} on every layer (config sliding_window)")
        return ["sliding"] * n
    return ["full"] * n


def _kinds_from_layer_types(f: _Fields, key: str, types: Any, n: int) -> list[str]:
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{f.name}: {key} must be a list of strings")
    if len(types) != n:
        raise ConfigError(f"{f.name}: {key} has {len(types)} entries for {n} layers")
    kinds = []
    state_kind = (
        "mamba2"
        if f.model_type in ("nemotron_h", "granitemoehybrid", "zamba2", "bamba")
        else "linear"
    )
    if f.model_type in ("mamba", "falcon_mamba", "jamba"):
        state_kind = "mamba1"
    for t in types:
        low = t.lower()
        if low in ATTENTION_LAYER_TYPES:
            kinds.append("full")
        elif low in ("sliding_attention", "local", "sliding"):
            kinds.append("sliding")
        elif low in ("chunked_attention",):
            kinds.append("chunked")
        elif low in STATE_LAYER_TYPES:
            kinds.append(state_kind)
        elif low in NO_CACHE_LAYER_TYPES:
            kinds.append("none")
        else:
            raise ConfigError(f"{f.name}: unknown layer type {t!r} in {key}")
    return kinds


def _sliding_window(f: _Fields) -> int | None:
    value = f.optional("sliding_window")
    if value is None or value == 0:  # vLLM: 0 means no window
        return None
    return f.positive_int(value, "sliding_window")


def _layer_specs(
    f: _Fields,
    kinds: list[str],
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
    is_mla: bool,
    notes: list[str],
) -> list[LayerSpec | None]:
    builders: dict[str, Callable[[], LayerSpec | None]] = {"none": lambda: None}
    if any(k in ("full", "sliding", "chunked") for k in kinds):
        if is_mla:
            latent = MLA(
                kv_lora_rank=f.positive_int(f.get("kv_lora_rank"), "kv_lora_rank"),
                qk_rope_head_dim=f.positive_int(f.get("qk_rope_head_dim"), "qk_rope_head_dim"),
                dtype_bytes=dtype_bytes,
            )
            builders["full"] = lambda: latent
        else:
            v_dim = f.get("v_head_dim") if f.model_type not in MLA_MODEL_TYPES else None
            head_v = f.positive_int(v_dim, "v_head_dim") if v_dim is not None else head_dim
            full = FullAttention(
                num_kv_heads=num_kv_heads,
                head_size=head_dim,
                head_size_v=head_v,
                dtype_bytes=dtype_bytes,
            )
            builders["full"] = lambda: full
            if "sliding" in kinds:
                window = _sliding_window(f)
                if window is None:
                    raise ConfigError(f"{f.name}: sliding layers but no sliding_window")
                sliding = SlidingWindow(
                    num_kv_heads=num_kv_heads,
                    head_size=head_dim,
                    head_size_v=head_v,
                    dtype_bytes=dtype_bytes,
                    sliding_window=window,
                )
                builders["sliding"] = lambda: sliding
            if "chunked" in kinds:
                chunk = f.positive_int(f.get("attention_chunk_size"), "attention_chunk_size")
                chunked = ChunkedLocal(
                    num_kv_heads=num_kv_heads,
                    head_size=head_dim,
                    head_size_v=head_v,
                    dtype_bytes=dtype_bytes,
                    chunk_size=chunk,
                )
                builders["chunked"] = lambda: chunked
    if "mamba1" in kinds:
        builders["mamba1"] = _mamba1_builder(f, dtype_bytes)
    if "mamba2" in kinds:
        builders["mamba2"] = _mamba2_builder(f, dtype_bytes, notes)
    if "linear" in kinds:
        builders["linear"] = _gdn_builder(f, dtype_bytes)
    unsupported = sorted(set(kinds) - set(builders))
    if unsupported:  # e.g. sliding-window MLA (DeepSeek-V4), not modelled yet
        raise ConfigError(
            f"{f.name}: {'/'.join(unsupported)} layers are not supported with "
            f"{'MLA' if is_mla else 'this attention'}"
        )
    return [builders[k]() for k in kinds]


def _mamba1_builder(f: _Fields, dtype_bytes: int) -> Callable[[], LayerSpec]:
    hidden = f.require_int("hidden_size", "n_embed", "d_model")
    expand = f.optional_int("mamba_expand", "expand", default=2) or 2
    intermediate = expand * hidden  # Jamba; state-spaces/mamba configs also write it out
    if f.model_type != "jamba" and f.get("intermediate_size") is not None:
        intermediate = f.positive_int(f.get("intermediate_size"), "intermediate_size")
    spec = Mamba1State(
        intermediate_size=intermediate,
        state_size=f.optional_int("mamba_d_state", "state_size", default=16) or 16,
        conv_kernel=f.optional_int("mamba_d_conv", "conv_kernel", default=4) or 4,
        conv_dtype_bytes=dtype_bytes,
        ssm_dtype_bytes=dtype_bytes,
    )
    return lambda: spec


def _mamba2_builder(f: _Fields, dtype_bytes: int, notes: list[str]) -> Callable[[], LayerSpec]:
    heads = f.optional_int("mamba_num_heads", default=None)
    head_dim = f.optional_int("mamba_head_dim", default=None)
    if heads is None or head_dim is None:
        raise ConfigError(f"{f.name}: Mamba-2 layers need mamba_num_heads and mamba_head_dim")
    ssm_bytes = dtype_bytes
    if f.model_type == "nemotron_h":
        # NOTE: Nemotron-H. vLLM keeps the SSM state in mamba_ssm_cache_dtype, float32 by default.
        name = str(f.get("mamba_ssm_cache_dtype") or "float32").replace("torch.", "")
        ssm_bytes = DTYPE_BYTES.get(name, 4)
        notes.append(f"Mamba SSM state kept in {name} (vLLM NemotronH default)")
    spec = Mamba2State(
        intermediate_size=heads * head_dim,
        n_groups=f.optional_int("n_groups", "mamba_n_groups", default=1) or 1,
        num_heads=heads,
        head_dim=head_dim,
        state_size=f.optional_int("ssm_state_size", "mamba_d_state", default=128) or 128,
        conv_kernel=f.optional_int("conv_kernel", "mamba_d_conv", default=4) or 4,
        conv_dtype_bytes=dtype_bytes,
        ssm_dtype_bytes=ssm_bytes,
        ssm_dtype_fixed=f.model_type == "nemotron_h",
    )
    return lambda: spec


def _gdn_builder(f: _Fields, dtype_bytes: int) -> Callable[[], LayerSpec]:
    ssm_bytes = dtype_bytes
    fixed = bool(f.get("mamba_ssm_dtype"))
    if fixed:  # NOTE: Qwen3.5 names its recurrent-state dtype
        ssm_bytes = DTYPE_BYTES.get(str(f.get("mamba_ssm_dtype")).replace("torch.", ""), ssm_bytes)
    spec = GatedDeltaNetState(
        num_k_heads=f.require_int("linear_num_key_heads"),
        num_v_heads=f.require_int("linear_num_value_heads"),
        head_k_dim=f.require_int("linear_key_head_dim"),
        head_v_dim=f.require_int("linear_value_head_dim"),
        conv_kernel=f.optional_int("linear_conv_kernel_dim", default=4) or 4,
        conv_dtype_bytes=dtype_bytes,
        ssm_dtype_bytes=ssm_bytes,
        ssm_dtype_fixed=fixed,
    )
    return lambda: spec


# --------------------------------------------------------------------------- sources
