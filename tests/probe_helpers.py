"""Tiny model configs for the probe tests: each family's cache geometry at toy widths, so a
whole probe (weights, profile, pool, bisection) runs in about a second on a CPU."""

from __future__ import annotations

from typing import Any

import planner

BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

TINY: dict[str, dict[str, Any]] = {
    "llama": {},
    "mha": {"num_key_value_heads": 4},
    "mqa": {"num_key_value_heads": 1},
    # Mistral-v0.1 style: a window on every layer
    "mistral": {"model_type": "mistral", "sliding_window": 24},
    # Gemma 3 style: 5 sliding + 1 full
    "gemma3": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "sliding_window": 24,
        "sliding_window_pattern": 6,
        "num_key_value_heads": 1,
        "head_dim": 32,
    },
    # Llama 4 style: 3 chunked + 1 global
    "llama4": {
        "model_type": "llama4_text",
        "num_hidden_layers": 4,
        "attention_chunk_size": 32,
        "no_rope_layers": [1, 1, 1, 0],
    },
    # DeepSeek-V2-Lite style MLA (q without LoRA), dense MLP
    "mla": {
        "model_type": "deepseek_v2",
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "kv_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "q_lora_rank": None,
    },
    # Mixtral style MoE
    "moe": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    # Nemotron-H style hybrid: Mamba-2, MLP, attention, MLP
    "hybrid": {
        "model_type": "nemotron_h",
        "num_hidden_layers": 4,
        "hybrid_override_pattern": "M-*-",
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "n_groups": 1,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "mamba_ssm_cache_dtype": "float32",
    },
}


def tiny_config(name: str, **overrides: Any) -> dict[str, Any]:
    config = {**BASE, **TINY[name], **overrides}
    return {k: v for k, v in config.items() if v is not None}


def tiny_spec(name: str, **overrides: Any) -> planner.ModelSpec:
    return planner.parse_config(tiny_config(name, **overrides), name=f"tiny-{name}", source="test")
