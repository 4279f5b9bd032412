"""A multimodal model's vision tower as vLLM builds it, read from its config (and processor
config): the model stage's part of :mod:`planner.multimodal`, with no serve settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.errors import ConfigError

# Models vLLM 0.33 no longer serves (registry _PREVIOUSLY_SUPPORTED_MODELS).
UNSERVED = {"mllama": "vLLM removed MllamaForConditionalGeneration in 0.10.2"}
# Qwen-VL towers kvplan sizes; Qwen3.5 (dense and MoE) builds Qwen3-VL's
# (``Qwen3_VisionTransformer``, ``model_executor/models/qwen3_5.py`` 0.19.0:598, 822).
QWEN_VL_TOPS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
# Gemma3ImageProcessor's pan-and-scan default (transformers): at most 4 crops.
GEMMA3_DEFAULT_CROPS = 4


@dataclass(frozen=True, kw_only=True)
class VisionTower:
    """A multimodal model's tower as vLLM builds it, from the config (and the processor's
    ``preprocessor_config.json`` where one is at hand).

    Attributes:
        family: ``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``gemma3``, ``llava`` or ``llama4``.
        modalities: what the processor takes (``image``, ``video``).
        params: parameters of the tower and projector vLLM builds (LLaVA: only the CLIP
            layers up to ``vision_feature_layer``).
        dtype_bytes: bytes per parameter (the model dtype; checkpoints keep towers unquantized).
        hidden, intermediate, gated, depth: the ViT's width, MLP width and layers.
        patch_input: pixel values per ViT position (channels x temporal patch x patch^2).
        positions_per_token: ViT positions per language-model token (Qwen merge^2 = 4,
            Gemma 3 4,096 / 256 = 16, LLaVA 577 / 576, Llama 4 577 / 144).
        out_width: elements per token the encoder hands the language model (its hidden size,
            x 4 for Qwen3-VL's three deepstack levels).
        supports_data_tp: ``--mm-encoder-tp-mode data`` is honoured.
        unit: Qwen-VL pixels per token side (patch x merge); 0 for fixed-size families.
        patch, merge, temporal: Qwen-VL's patch, spatial merge and temporal patch sizes.
        image_pixels, video_pixels: (min_pixels, max_pixels) of the processor's image and
            video sizes, None where no processor config says.
        fixed_tokens: tokens per image for the fixed-size families (Gemma 3 per crop).
        max_patches: Llama 4's tiles per image (processor ``max_patches``), None if unknown.
        pan_and_scan: Gemma 3's processor crops images (``do_pan_and_scan``).
        processor: where the processor values came from (``preprocessor_config.json``,
            ``config``) or "".
    """

    family: str
    model_type: str
    modalities: tuple[str, ...]
    params: int
    dtype_bytes: int
    hidden: int
    intermediate: int
    gated: bool
    depth: int
    patch_input: int
    positions_per_token: float
    out_width: int
    supports_data_tp: bool
    unit: int = 0
    patch: int = 0
    merge: int = 1
    temporal: int = 1
    image_pixels: tuple[int, int] | None = None
    video_pixels: tuple[int, int] | None = None
    fixed_tokens: int = 0
    max_patches: int | None = None
    pan_and_scan: bool = False
    processor: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def bytes(self) -> int:
        return self.params * self.dtype_bytes


def _int(c: Mapping[str, Any], key: str, name: str, default: int | None = None) -> int:
    value = c.get(key)
    if value is None:
        if default is None:
            raise ConfigError(f"{name}: vision_config has no {key}")
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 40:
        raise ConfigError(f"{name}: vision_config {key} must be a positive integer, got {value!r}")
    return value


def _vit_layer(d: int, i: int, *, gated: bool, norm: int) -> int:
    """One pre-norm ViT block: two norms (``norm`` parameters each per channel: 1 RMSNorm, 2
    LayerNorm), q/k/v and output projections with biases, the MLP with biases."""
    mlp = 2 * d * i + 2 * i + i * d + d if gated else d * i + i + i * d + d
    return 2 * norm * d + 3 * d * d + 3 * d + d * d + d + mlp


def pixel_bound(pre: Mapping[str, Any] | None, edge: str, key: str) -> int | None:
    """A pixel bound from a processor config: ``size.{edge}`` or the flat ``{key}``."""
    if not pre:
        return None
    size = pre.get("size")
    value = size.get(edge) if isinstance(size, Mapping) else None
    if value is None:
        value = pre.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def tower_of(
    raw: Mapping[str, Any],
    *,
    text_hidden: int,
    dtype_bytes: int,
    name: str,
    preprocessor: Mapping[str, Any] | None = None,
    video_preprocessor: Mapping[str, Any] | None = None,
) -> VisionTower | None:
    """The tower of a multimodal config (None for a text model, or a family kvplan does not
    size: a note on the spec says so). ``preprocessor`` is ``preprocessor_config.json``,
    ``video_preprocessor`` Qwen3-VL's ``video_preprocessor_config.json``."""
    vision = raw.get("vision_config")
    top = str(raw.get("model_type") or "")
    if not isinstance(vision, Mapping) or not vision:
        return None
    v: Mapping[str, Any] = vision
    source = "preprocessor_config.json" if preprocessor else ""
    if top in QWEN_VL_TOPS:
        qwen3 = top.startswith("qwen3")
        patch = _int(v, "patch_size", name, 14)
        merge = _int(v, "spatial_merge_size", name, 2)
        temporal = _int(v, "temporal_patch_size", name, 2)
        channels = _int(v, "in_channels", name, v.get("in_chans") or 3)
        depth = _int(v, "depth", name)
        if top == "qwen2_vl":
            d = _int(v, "embed_dim", name)
            i = int(d * float(v.get("mlp_ratio") or 4))
            out = _int(v, "hidden_size", name, text_hidden)
        else:
            d = _int(v, "hidden_size", name)
            i = _int(v, "intermediate_size", name)
            out = _int(v, "out_hidden_size", name, text_hidden)
        gated = top == "qwen2_5_vl"
        norm = 1 if gated else 2  # Qwen2.5-VL: RMSNorm; Qwen2-VL / Qwen3-VL: LayerNorm
        wide = d * merge * merge
        merger = norm * d + wide * wide + wide + wide * out + out
        params = (
            depth * _vit_layer(d, i, gated=gated, norm=norm) + channels * temporal * patch**2 * d
        )
        params += merger
        levels = 1
        if qwen3:
            params += d + _int(v, "num_position_embeddings", name, 2304) * d  # conv bias, pos
            stack = v.get("deepstack_visual_indexes") or []
            levels += len(stack) if isinstance(stack, list) else 0
            params += (levels - 1) * (2 * wide + wide * wide + wide + wide * out + out)
        video = video_preprocessor or (None if qwen3 else preprocessor)
        return VisionTower(
            family="qwen3_vl" if qwen3 else top,
            model_type=top,
            modalities=("image", "video"),
            params=params,
            dtype_bytes=dtype_bytes,
            hidden=d,
            intermediate=i,
            gated=gated,
            depth=depth,
            patch_input=channels * temporal * patch * patch,
            positions_per_token=float(merge * merge),
            out_width=out * levels,
            supports_data_tp=True,
            unit=patch * merge,
            patch=patch,
            merge=merge,
            temporal=temporal,
            image_pixels=pixel_bounds(preprocessor),
            video_pixels=pixel_bounds(video),
            processor=source,
        )
    if top == "gemma3":
        d = _int(v, "hidden_size", name)
        i = _int(v, "intermediate_size", name)
        layers = _int(v, "num_hidden_layers", name)
        patch = _int(v, "patch_size", name)
        image = _int(v, "image_size", name)
        channels = _int(v, "num_channels", name, 3)
        positions = (image // patch) ** 2
        tokens = _int(raw, "mm_tokens_per_image", name, 256)
        params = channels * patch * patch * d + d + positions * d  # conv (bias), positions
        params += layers * _vit_layer(d, i, gated=False, norm=2) + 2 * d  # + post_layernorm
        params += d * text_hidden + d  # mm_input_projection_weight, mm_soft_emb_norm
        crops = bool(preprocessor.get("do_pan_and_scan")) if preprocessor else False
        return VisionTower(
            family="gemma3",
            model_type=top,
            modalities=("image",),
            params=params,
            dtype_bytes=dtype_bytes,
            hidden=d,
            intermediate=i,
            gated=False,
            depth=layers,
            patch_input=channels * patch * patch,
            positions_per_token=positions / tokens,
            out_width=text_hidden,
            supports_data_tp=False,
            patch=patch,
            fixed_tokens=tokens,
            pan_and_scan=crops,
            max_patches=pan_and_scan_crops(preprocessor),
            processor="config" + (" + preprocessor_config.json" if preprocessor else ""),
        )
    if top == "llava" and str(v.get("model_type") or "clip_vision_model") == "clip_vision_model":
        d = _int(v, "hidden_size", name)
        i = _int(v, "intermediate_size", name)
        layers = _int(v, "num_hidden_layers", name)
        patch = _int(v, "patch_size", name)
        image = _int(v, "image_size", name)
        channels = _int(v, "num_channels", name, 3)
        feature = raw.get("vision_feature_layer", -2)
        if isinstance(feature, list):
            feature = min(feature) if all(isinstance(f, int) for f in feature) else -2
        if not isinstance(feature, int) or isinstance(feature, bool):
            feature = -2
        built = layers + feature + 1 if feature < 0 else feature  # vLLM get_layer_index
        built = min(max(built, 1), layers)
        grid = (image // patch) ** 2
        full = str(raw.get("vision_feature_select_strategy") or "default") == "full"
        tokens = grid + 1 if full else grid
        params = d + channels * patch * patch * d + (grid + 1) * d + 2 * d  # cls, conv, pos, pre
        params += built * _vit_layer(d, i, gated=False, norm=2)
        params += d * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
        if built == layers:
            params += 2 * d  # post_layernorm only when every layer is built
        notes = (
            f"vLLM builds {built} of the CLIP tower's {layers} layers "
            f"(vision_feature_layer {feature})",
        )
        return VisionTower(
            family="llava",
            model_type=top,
            modalities=("image",),
            params=params,
            dtype_bytes=dtype_bytes,
            hidden=d,
            intermediate=i,
            gated=False,
            depth=built,
            patch_input=channels * patch * patch,
            positions_per_token=(grid + 1) / tokens,
            out_width=text_hidden,
            supports_data_tp=False,
            patch=patch,
            fixed_tokens=tokens,
            processor="config",
            notes=notes,
        )
    if top == "llama4":
        d = _int(v, "hidden_size", name)
        i = _int(v, "intermediate_size", name)
        layers = _int(v, "num_hidden_layers", name)
        patch = _int(v, "patch_size", name)
        image = _int(v, "image_size", name)
        channels = _int(v, "num_channels", name, 3)
        ratio = float(v.get("pixel_shuffle_ratio") or 0.5)
        p_in = _int(v, "projector_input_dim", name, 4096)
        p_out = _int(v, "projector_output_dim", name, 4096)
        vis_out = _int(v, "vision_output_dim", name, p_out)
        grid = (image // patch) ** 2
        per_tile = grid // round(1 / (ratio * ratio))
        bias = bool(v.get("multi_modal_projector_bias"))
        params = channels * patch * patch * d + d + (grid + 1) * d + 4 * d  # unfold, cls, pos, 2 LN
        params += layers * _vit_layer(d, i, gated=False, norm=2)
        adapter_in = int(d / (ratio * ratio))
        params += adapter_in * p_in + p_in * p_out + ((p_in + p_out) if bias else 0)
        params += vis_out * text_hidden  # multi_modal_projector.linear_1 (no bias)
        return VisionTower(
            family="llama4",
            model_type=top,
            modalities=("image",),
            params=params,
            dtype_bytes=dtype_bytes,
            hidden=d,
            intermediate=i,
            gated=False,
            depth=layers,
            patch_input=channels * patch * patch,
            positions_per_token=(grid + 1) / per_tile,
            out_width=text_hidden,
            supports_data_tp=True,
            patch=patch,
            fixed_tokens=per_tile,
            max_patches=max_patches_of(preprocessor),
            processor=source,
        )
    return None


def pixel_bounds(pre: Mapping[str, Any] | None) -> tuple[int, int] | None:
    high = pixel_bound(pre, "longest_edge", "max_pixels")
    if high is None:
        return None
    return pixel_bound(pre, "shortest_edge", "min_pixels") or 0, high


def pan_and_scan_crops(pre: Mapping[str, Any] | None) -> int | None:
    value = pre.get("pan_and_scan_max_num_crops") if pre else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def max_patches_of(pre: Mapping[str, Any] | None) -> int | None:
    value = pre.get("max_patches") if pre else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def unsupported_reason(raw: Mapping[str, Any]) -> str | None:
    """Why kvplan sizes no tower for a config that has one (None: sized, or no tower)."""
    top = str(raw.get("model_type") or "")
    if top in UNSERVED:
        return UNSERVED[top]
    if isinstance(raw.get("vision_config"), Mapping) and raw.get("vision_config"):
        return f"kvplan does not size the vision tower of model_type {top!r}"
    return None
