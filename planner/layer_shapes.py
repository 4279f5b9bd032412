"""The shapes of a checkpoint's layers that both its weights (:mod:`planner.weights`) and its LoRA
buffers (:mod:`planner.lora`) follow: MoE layers and their experts, the dense MLP width, where
a multimodal tower sits, the config's counts read bounded."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.errors import ConfigError
from planner.model.config import MAX_CONFIG_INT
from planner.model.specs import (
    ModelSpec,
)
from planner.multimodal import tower_mode

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from planner.deployment import ServeSettings


# Models whose MLP has two matrices (up, down) instead of gated three (gate, up, down).
UNGATED_MLP = frozenset(
    {
        "opt",
        "bloom",
        "falcon",
        "RefinedWeb",
        "RefinedWebModel",
        "gpt2",
        "gpt_bigcode",
        "phi",
        "nemotron_h",
        "starcoder2",
        "gpt_neox",
    }
)


def config_int(
    c: Mapping[str, Any], key: str, name: str, default: int = 0, minimum: int = 0
) -> int:
    """An optional whole-number field of the config (``default`` when absent or null)."""
    value = c.get(key)
    return default if value is None else count_of(value, f"{name}: {key}", minimum=minimum)


def dense_intermediate(c: Mapping[str, Any], hidden: int, name: str) -> int:
    for key in (
        "intermediate_size_mlp",
        "intermediate_size",
        "ffn_hidden_size",
        "ffn_dim",
        "n_inner",
    ):
        value = config_int(c, key, name)
        if value:
            return value
    return 4 * hidden


def num_experts_of(c: Mapping[str, Any], name: str) -> int:
    for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        value = config_int(c, key, name)
        if value:
            return value
    return 0


def is_moe_layer(c: Mapping[str, Any], model_type: str, i: int, name: str) -> bool:
    if not num_experts_of(c, name):
        return False
    if model_type.startswith("deepseek") or model_type in ("kimi_k2", "kimi_linear"):
        first = config_int(c, "first_k_dense_replace", name)
        freq = config_int(c, "moe_layer_freq", name) or 1
        return i >= first and i % freq == 0
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        dense = c.get("mlp_only_layers")
        if isinstance(dense, list) and i in dense:
            return False
        step = config_int(c, "decoder_sparse_step", name) or 1
        return (i + 1) % step == 0
    if model_type in ("llama4", "llama4_text"):
        step = config_int(c, "interleave_moe_layer_step", name) or 1
        return (i + 1) % step == 0
    return True


def placement_of(settings: ServeSettings, model: ModelSpec | None = None) -> Placement:
    """Where ``settings`` put the weights of ``model`` (:class:`Placement`; its vision tower
    by :func:`planner.multimodal.tower_mode`)."""
    spec = settings.speculative
    return Placement(
        tp=settings.tp,
        pp=settings.pp,
        dp=settings.dp,
        ep=settings.enable_expert_parallel,
        redundant_experts=settings.num_redundant_experts,
        mtp=spec is not None and spec.method == "mtp",
        tower=tower_mode(model.vision, settings) if model is not None else "weights",
    )


def count_of(value: Any, what: str, *, minimum: int = 0) -> int:
    """A whole number from a config or header (integral floats too), within what a real model
    has; anything else is a :class:`ConfigError` naming ``what``."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (minimum <= value <= MAX_CONFIG_INT)
    ):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ConfigError(
            f"{what} must be a whole number from {minimum} to {MAX_CONFIG_INT:,}, got {shown}"
        )
    return value


@dataclass(frozen=True, kw_only=True)
class Placement:
    """How one engine spreads a checkpoint over its GPUs (vLLM 0.33).

    ``tp`` x ``pp`` GPUs per DP rank; routed experts spread over ``dp x tp`` GPUs
    (``FusedMoEParallelConfig.make``: "MoE layers will be sharded according to the product
    of the tensor ... and data parallel sizes"), TP-sharded without EP, whole experts with
    ``ep`` (``ceil((E + R) / (dp x tp))`` on the most-loaded GPU, ``R`` redundant EPLB
    experts); everything else is sharded by the attention TP of one DP rank only. ``mtp``
    loads the checkpoint's MTP layers on the last stage; ``tower`` places a multimodal model's
    vision tower (:func:`planner.multimodal.tower_mode`).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False
    redundant_experts: int = 0
    mtp: bool = False
    # the vision tower (first stage): "weights" TP-sharded, "data" a whole copy per TP rank,
    # "off" not built (--language-model-only, every modality limited to 0)
    tower: str = "weights"

    @property
    def expert_gpus(self) -> int:
        return self.dp * self.tp

    def expert_bytes(self, layer_experts: int, num_experts: int) -> int:
        """Routed-expert bytes of one MoE layer on the most-loaded GPU."""
        if not layer_experts:
            return 0
        if self.ep and num_experts:
            local = -(-(num_experts + self.redundant_experts) // self.expert_gpus)
            return -(-layer_experts * local // num_experts)
        return -(-layer_experts // self.expert_gpus)
