"""Cross-check the planner's ``--engine hf`` bytes against transformers' real cache.

For a config whose ``model_type`` the installed transformers knows, build the model from the
config (random weights, built-in classes only, never remote code), run one forward with
``use_cache=True`` and sum the bytes of the tensors in the returned cache object. The planner
sizes the *same* (shrunk) config with ``planner.estimate(spec, engine=Engine.HF,
max_model_len=L)``, so both sides see identical numbers.

Shrinking keeps the cache geometry and makes the model small enough to build in well under a
second on a CPU:

- layers: the shortest prefix that holds every layer kind of the model (one full period of
  Gemma 3's 5 sliding + 1 full, Qwen3-Next's 3 linear + 1 full, Nemotron-H's ``M-M-M-M*``);
- MLP width 64, vocabulary 128, at most 4 experts with at most 2 per token;
- ``hidden_size`` 256 with ``head_dim`` written out where the config class has a ``head_dim``
  (KV heads, head sizes, MLA ranks, Mamba heads and state sizes unchanged); where transformers
  derives the head size from ``hidden_size`` (Bloom, Falcon, OPT) the KV heads and the head
  size are kept and only the query heads shrink (MHA models keep two heads); Mamba-1 models
  keep their width because their state is ``expand x hidden_size``;
- sliding windows and attention chunks above 32 tokens become 32, so a 48-token forward
  exercises the caps.

Two byte counts are taken from the cache: **tensor bytes** (``numel x element_size`` of each
cache tensor, what a cache *keeps*) and **storage bytes** (the storages behind them, each
counted once: the memory it *holds*). They differ where a cache keeps a view:
``DynamicSlidingWindowLayer.update`` stores ``cat(past, new)[:, :, -(W - 1):]``, a view that
pins the whole concatenated tensor.

Checks per config (``L_short = 16`` tokens, below every shrunk window; ``L = 48``):

- per token: ``(tensor bytes(16) - tensor bytes(8)) / 8`` against ``kv_bytes_per_token``;
- per sequence: tensor bytes at ``L_short`` and at ``L`` against ``request_bytes``
  (KV + state): ``status`` is ``ok`` when all three agree, else ``mismatch``;
- storage: where the storages hold more than the tensors, ``storage_excess`` says how much
  (after a prefill longer than a sliding window, every windowed layer still pins the whole
  prompt until its next update; the planner sizes what the cache keeps).
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import planner
from planner.model.config import text_config_of
from planner.model.specs import Engine
from probes.plan import CacheCheck, Measurement

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SHORT_TOKENS = 16
LONG_TOKENS = 48
MAX_WINDOW = 32
SMALL_HIDDEN = 256
SMALL_MLP = 64
SMALL_VOCAB = 128
MAX_EXPERTS = 4
MLP_KEYS = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "intermediate_size_mlp",
    "ffn_dim",
    "ffn_hidden_size",
    "n_inner",
)
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOPK_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
PATTERN_KEYS = ("layer_types", "layers_block_type", "no_rope_layers", "mlp_only_layers")
STATE_HIDDEN_MODEL_TYPES = frozenset({"mamba", "falcon_mamba", "jamba"})
HEAD_COUNT_KEYS = ("num_attention_heads", "n_head", "num_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
HIDDEN_KEYS = ("hidden_size", "n_embed", "d_model")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def known_model_type(model_type: str) -> bool:
    """Whether the installed transformers has a built-in config class for ``model_type``."""
    with _quiet():
        from transformers import CONFIG_MAPPING

    return model_type in CONFIG_MAPPING


def _first(cfg: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if cfg.get(k) is not None), None)


def _prefix_layers(kinds: list[str]) -> int:
    """Shortest prefix of the layer kinds that contains every kind."""
    wanted, seen = set(kinds), set()
    for i, kind in enumerate(kinds):
        seen.add(kind)
        if seen == wanted:
            return i + 1
    return len(kinds)


def shrink_config(text: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A small config with the same cache geometry (see the module docstring).

    Args:
        text: the model's text config (``text_config_of(raw)``).
        name: for error messages.

    Returns:
        (the shrunk config dict, what was changed: key -> (old, new)).
    """
    cfg = json.loads(json.dumps(text))
    changed: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if cfg.get(key) != value:
            changed[key] = (cfg.get(key), value)
            cfg[key] = value

    spec = planner.parse_config(text, name=name, source="hfcache")
    kinds = [
        "none" if s is None else f"{s.kind}:{s.window}" for s in spec.layers
    ]  # window kinds differ by size too
    n = _prefix_layers(kinds)
    layer_key = _first(cfg, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"))
    if layer_key is not None:
        put(layer_key, n)
    for key in PATTERN_KEYS:
        if isinstance(cfg.get(key), list) and key != "mlp_only_layers":
            put(key, cfg[key][:n])
    if isinstance(cfg.get("hybrid_override_pattern"), str):
        put("hybrid_override_pattern", cfg["hybrid_override_pattern"][:n])
    mt = spec.model_type
    if mt not in ("mamba", "falcon_mamba"):  # Mamba-1: intermediate_size is the mixer width
        for key in MLP_KEYS:
            if isinstance(cfg.get(key), int) and cfg[key] > SMALL_MLP:
                put(key, SMALL_MLP)
    for key in EXPERT_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > MAX_EXPERTS:
            put(key, MAX_EXPERTS)
    for key in TOPK_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > 2:
            put(key, 2)
    for key in ("n_group", "topk_group"):  # DeepSeek-V3 grouped routing over 4 experts
        if isinstance(cfg.get(key), int) and cfg[key] > 1:
            put(key, 1)
    if cfg.get("n_shared_experts"):
        put("n_shared_experts", 1)
    if isinstance(cfg.get("vocab_size"), int):
        put("vocab_size", SMALL_VOCAB)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        value = cfg.get(key)
        if isinstance(value, int) and value >= SMALL_VOCAB or isinstance(value, list):
            put(key, 0)
    for key in ("sliding_window", "attention_chunk_size"):
        if isinstance(cfg.get(key), int) and cfg[key] > MAX_WINDOW:
            put(key, MAX_WINDOW)
    _shrink_hidden(cfg, spec, put)
    return cfg, changed


def _shrink_hidden(cfg: dict[str, Any], spec: planner.ModelSpec, put: Any) -> None:
    hidden_key = _first(cfg, HIDDEN_KEYS)
    if hidden_key is None or spec.model_type in STATE_HIDDEN_MODEL_TYPES:
        return
    hidden = cfg[hidden_key]
    if hidden <= SMALL_HIDDEN or not spec.attention_layers:
        return
    if _has_head_dim(spec.model_type) or spec.model_type in ("deepseek_v2", "deepseek_v3"):
        if "kv_lora_rank" not in cfg:
            put("head_dim", spec.head_dim)
        heads = spec.num_attention_heads or 1  # configs check hidden % heads == 0
        put(hidden_key, heads * -(-SMALL_HIDDEN // heads))
        return
    heads_key = _first(cfg, HEAD_COUNT_KEYS)
    if heads_key is None or not spec.head_dim:
        return
    kv = spec.num_kv_heads
    heads = kv * 2 if kv < spec.num_attention_heads else min(spec.num_attention_heads, 2)
    if kv == spec.num_attention_heads:  # MHA: KV heads are the heads
        kv = heads
        kv_key = _first(cfg, KV_HEAD_KEYS)
        if kv_key is not None:
            put(kv_key, kv)
    put(heads_key, heads)
    put(hidden_key, heads * spec.head_dim)


def _has_head_dim(model_type: str) -> bool:
    """Whether the config class stores ``head_dim`` (then attention uses it)."""
    with _quiet():
        from transformers import CONFIG_MAPPING

        try:
            return "head_dim" in CONFIG_MAPPING[model_type]().to_dict()
        except Exception:
            return False


def cache_bytes(cache: Any) -> tuple[int, int]:
    """(tensor bytes, storage bytes) of every tensor reachable from a cache object."""
    tensors: list[torch.Tensor] = []
    seen: set[int] = set()
    stack = [cache]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("transformers"):
            stack.extend(vars(obj).values())
    tensors = [t for t in tensors if t.dim() > 0]  # 0-d bookkeeping (window sizes), not KV
    tensor_bytes = sum(t.numel() * t.element_size() for t in tensors)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return tensor_bytes, sum(storages.values())


def _measure(model: Any, tokens: int) -> tuple[Measurement, str]:
    ids = torch.randint(0, SMALL_VOCAB, (1, tokens))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    tensor_bytes, storage_bytes = cache_bytes(cache)
    return Measurement(tokens, tensor_bytes, storage_bytes), type(cache).__name__


def cross_check(text: dict[str, Any], *, name: str) -> CacheCheck:
    """Build ``text`` (a text config) small in transformers and compare its cache with the
    planner's ``--engine hf`` figures.

    Args:
        text: the model's text config dict.
        name: display name.

    Returns:
        The :class:`CacheCheck` (``skipped`` when transformers does not know the model type).
    """
    model_type = str(text.get("model_type") or "")
    if not known_model_type(model_type):
        return CacheCheck(
            name,
            model_type,
            "skipped",
            f"transformers has no built-in model_type {model_type!r} (remote code only)",
        )
    small, changed = shrink_config(text, name)
    # the planner reads the shrunk config.json as a user would give it, not transformers'
    # re-serialisation of it, so a field transformers derives differently shows up here
    spec = planner.parse_config(small, name=name, source="hfcache")
    with _quiet():
        try:
            # the checkpoint dtype (the planner's reading: config dtype, else bf16 weights)
            model = _build(model_type, small, _TORCH_DTYPES[spec.dtype])
        except Exception as exc:  # a config transformers itself cannot build
            return CacheCheck(name, model_type, "error", f"transformers cannot build it: {exc}")
        measured = {}
        cache_class = ""
        try:
            for tokens in (8, SHORT_TOKENS, LONG_TOKENS):
                measured[tokens], cache_class = _measure(model, tokens)
        except Exception as exc:
            return CacheCheck(
                name, model_type, "error", f"forward failed: {type(exc).__name__}: {exc}"
            )
    per_token = (measured[SHORT_TOKENS].tensor_bytes - measured[8].tensor_bytes) // (
        SHORT_TOKENS - 8
    )
    check = CacheCheck(
        model=name,
        model_type=model_type,
        status="ok",
        cache_class=cache_class,
        num_layers_built=spec.num_layers,
        shrunk={k: list(v) for k, v in changed.items()},
        measured_bytes_per_token=per_token,
        measured_tensor_bytes={t: m.tensor_bytes for t, m in measured.items() if t != 8},
        measured_storage_bytes={t: m.storage_bytes for t, m in measured.items() if t != 8},
    )
    for tokens in (SHORT_TOKENS, LONG_TOKENS):
        est = planner.estimate(spec, engine=Engine.HF, max_model_len=tokens)
        check.predicted_bytes_per_token = est.kv_bytes_per_token
        check.predicted_bytes_per_sequence[tokens] = est.request_bytes
    if per_token != check.predicted_bytes_per_token:
        check.mismatches.append(
            f"bytes/token: planner {check.predicted_bytes_per_token:,}, transformers {per_token:,}"
        )
    for tokens, predicted in check.predicted_bytes_per_sequence.items():
        kept = check.measured_tensor_bytes[tokens]
        if kept != predicted:
            check.mismatches.append(
                f"{tokens} tokens: planner {predicted:,} B, transformers' cache tensors {kept:,} B"
            )
        held = check.measured_storage_bytes[tokens]
        if held != kept:
            check.storage_excess.append(
                f"{tokens} tokens: the cache tensors ({kept:,} B) pin {held:,} B of storage"
            )
    if check.mismatches:
        check.status = "mismatch"
    return check


def _build(model_type: str, small: dict[str, Any], dtype: torch.dtype) -> Any:
    """The shrunk config as a model: its causal LM, or for a vision-language model's text
    config (Qwen2.5-VL's top level, Qwen3-VL's text_config), which no causal-LM class takes,
    the text model of its ``*_text`` config class (``Qwen2_5_VLTextModel``): the same
    decoder layers, so the same cache."""
    from transformers import CONFIG_MAPPING, AutoConfig, AutoModel, AutoModelForCausalLM

    kwargs = {k: v for k, v in small.items() if k not in ("model_type", "auto_map")}
    torch.manual_seed(0)
    try:
        config = AutoConfig.for_model(model_type, **kwargs)
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    except ValueError:  # "Unrecognized configuration class ... for AutoModelForCausalLM"
        text_type = model_type if model_type.endswith("_text") else f"{model_type}_text"
        if text_type not in CONFIG_MAPPING:
            raise
        config = AutoConfig.for_model(text_type, **kwargs)
        return AutoModel.from_config(config, dtype=dtype).eval()


def cross_check_file(path: Path, name: str | None = None) -> CacheCheck:
    """:func:`cross_check` of a config.json on disk."""
    from planner.model.resolve import read_json_config  # the bounded, non-blocking reader

    raw = read_json_config(Path(path))
    return cross_check(text_config_of(raw), name=name or Path(path).parent.name)


def cross_check_spec(spec: planner.ModelSpec) -> CacheCheck:
    """:func:`cross_check` of a loaded model (its text config)."""
    return cross_check(dict(spec.config), name=spec.name)
