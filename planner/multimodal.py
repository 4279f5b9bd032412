"""Multimodal models as vLLM 0.33 serves them: the vision tower's weights, the encoder budget and
what the profile run holds for it (``../shared/ENGINES-SCALE.md`` §4.3, confirmed in the 0.33
sources named below).

- **Tower weights** are part of "Model loading took". ``--mm-encoder-tp-mode weights`` (the
  default) shards them over the TP ranks; ``data`` keeps a whole copy on each rank and splits
  the images instead (``vllm/config/multimodal.py`` ``mm_encoder_tp_mode``; only models with
  ``supports_encoder_tp_data``: Qwen2/2.5/3-VL, Llama 4 here; others fall back to ``weights``,
  ``vllm/config/model.py``). The tower is not built at all when every modality it serves has
  ``--limit-mm-per-prompt`` 0, or with ``--language-model-only``
  (``vllm/model_executor/models/interfaces.py`` ``_mark_tower_model``: ``StageMissingLayer``),
  and under the default Model Runner V2 only on the first pipeline stage.
- **Tokens per item**: the processor's largest item (``get_mm_max_tokens_per_item``): Qwen-VL
  from ``max_pixels`` (``preprocessor_config.json``, or ``--mm-processor-kwargs``), the patch
  and merge sizes, and for video the frames that fit ``max_model_len`` (at most 14, 2 per
  temporal patch: ``qwen2_vl.py``); Gemma 3 ``mm_tokens_per_image`` (x crops with
  pan-and-scan); LLaVA the CLIP patch grid; Llama 4 144 tokens per 336-px tile, ``max_patches``
  tiles and a global one (``mllama4.py``).
- **Encoder budget** (``vllm/v1/core/encoder_cache_manager.py`` ``compute_mm_encoder_budget``):
  ``max(max_num_batched_tokens, largest item)`` for both the compute budget and the cache.
- **Items profiled** (``vllm/multimodal/encoder_budget.py`` ``MultiModalBudget._get_max_items``):
  the modality with the most tokens per item (ties: the later name), ``per_prompt = max(1,
  min(limit, max_model_len // tokens))``, ``items = max(1, min(budget // tokens, max_num_seqs
  x per_prompt))`` (chunked prefill is on in V1).
- **Profile run** (``vllm/v1/worker/gpu/model_runner.py`` ``profile_run`` and
  ``gpu/mm/encoder_runner.py`` ``profile_encoder_cache``, first pipeline rank): the tower runs
  on ``items`` dummy items of the largest size, their outputs stay in the encoder cache on the
  GPU while the language model's dummy batch runs, then the cache is cleared. The activation
  peak is therefore ``encoder outputs + max(tower activations, language-model activations)``.
  ``--skip-mm-profiling`` leaves both out (vLLM: the user owns the risk).
- **Releases** (:mod:`planner.vllm_rules`): in 0.11-0.12 Qwen3-VL's video item counts 12.5
  tokens of timestamp text per encoder token (``qwen3_vl_video_text``), and the cached
  outputs are padded, to the encoder budget in 0.11 and to the largest item in 0.12
  (``encoder_output_padding``); the tower still encodes the item's own tokens.

Worked example (Qwen2.5-VL-7B, its ``preprocessor_config.json``: max_pixels 12,845,056, patch
14, merge 2, temporal patch 2; max_model_len 128,000): an image of at most 12,845,056 / 28^2
= 16,384 tokens; a video of 14 frames (7 temporal patches) x 16,384 = 114,688 tokens, the
figures vLLM logs (PR #12604: ``{'image': 16384, 'video': 114688}``). The encoder budget is
114,688 tokens, profiled with 1 video item; its outputs are 114,688 x 3,584 x 2 B = 0.77 GiB
and its tower runs over 114,688 x 4 = 458,752 patches. ``--limit-mm-per-prompt
'{"video":0}'`` profiles 1 image of 16,384 tokens instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.config.multimodal import DEFAULT_LIMIT as DEFAULT_LIMIT
from planner.config.multimodal import MODES as MODES
from planner.config.multimodal import MMLimits as MMLimits
from planner.config.multimodal import MMProcessorKwargs as MMProcessorKwargs
from planner.config.multimodal import MMTokens as MMTokens
from planner.config.multimodal import check_mode as check_mode
from planner.config.multimodal import parse_limits as parse_limits
from planner.config.multimodal import parse_processor_kwargs as parse_processor_kwargs
from planner.config.multimodal import parse_tokens as parse_tokens
from planner.model.vision import VisionTower as VisionTower
from planner.model.vision import pixel_bound
from planner.model.vision import tower_of as tower_of
from planner.model.vision import unsupported_reason as unsupported_reason

if TYPE_CHECKING:
    from planner.deployment import ServeSettings

# Qwen2-VL's video frames per item at most (qwen2_vl.py _MAX_FRAMES_PER_VIDEO); Qwen3-VL
# profiles 2 frames (DUMMY_VIDEO_NUM_FRAMES) at the video processor's pixel budget.
QWEN_MAX_FRAMES = 14
QWEN_MAX_ASPECT = 200  # get_image_size_with_most_features: no aspect ratio above 200
# Tower activation per ViT position, in elements of the model dtype, besides the input
# pixels: the residual stream, its norm and the MLP's (intermediate x 3 gated, x 2 not)
# intermediate width during the MLP, or q/k/v with their rotated copies (about 8 x hidden)
# during attention, whichever is larger; one layer at a time (inference frees the previous).
# The pixels arrive as float32 and are cast to the model dtype (both alive).
PIXEL_BYTES = 4
# Qwen3-VL's video item in 0.11-0.12: tokens counted per encoder token, its timestamp text
# included (planner.vllm_rules, ``qwen3_vl_video_text``)
VIDEO_TEXT_PER_TOKEN = 12.5


# --------------------------------------------------------------------------- tokens per item


def smart_resize(height: int, width: int, factor: int, low: int, high: int) -> tuple[int, int]:
    """Qwen-VL's resize (transformers ``smart_resize``): both sides multiples of ``factor``,
    the area within [low, high] pixels, the aspect ratio kept as closely as that allows."""
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > high:
        beta = math.sqrt(height * width / high)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < low:
        beta = math.sqrt(low / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def largest_image(unit: int, max_pixels: int) -> tuple[int, int]:
    """vLLM's ``get_image_size_with_most_features`` for Qwen-VL: ``max_pixels // unit^2``
    tokens factored into the squarest (height, width) in units with an aspect ratio of at
    most 200, fewer tokens if none is."""
    tokens = max_pixels // (unit * unit)
    for n in range(tokens, 0, -1):
        low = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        if n // low / low <= QWEN_MAX_ASPECT:
            return unit * low, unit * (n // low)
    return unit, unit


def _qwen_tokens(
    t: VisionTower, height: int, width: int, frames: int, bounds: tuple[int, int]
) -> int:
    h, w = smart_resize(height, width, t.unit, bounds[0], bounds[1])
    grid_t = max((frames + (-frames % t.temporal)) // t.temporal, 1)
    return grid_t * (h // t.patch) * (w // t.patch) // (t.merge * t.merge)


def _scoped(kwargs: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The processor kwargs one modality sees: flat keys, then its ``images_kwargs`` /
    ``videos_kwargs`` (vLLM routes flat keys into every scope that takes them)."""
    merged = {k: v for k, v in kwargs.items() if not k.endswith("_kwargs")}
    nested = kwargs.get(scope)
    if isinstance(nested, Mapping):
        merged.update(nested)
    return merged


def _overridepixel_bounds(
    base: tuple[int, int] | None, kwargs: Mapping[str, Any]
) -> tuple[int, int] | None:
    low = pixel_bound(kwargs, "shortest_edge", "min_pixels")
    high = pixel_bound(kwargs, "longest_edge", "max_pixels")
    if base is None and high is None:
        return None
    start = base or (0, 0)
    return (low if low is not None else start[0], high if high is not None else start[1])


@dataclass(frozen=True, kw_only=True)
class ItemTokens:
    """The largest item of each modality in tokens (None where kvplan cannot tell), and how
    each was found."""

    tokens: dict[str, int | None]
    how: dict[str, str]
    # rows the encoder outputs for the largest item, where they differ from ``tokens``
    # (Qwen3-VL's video in 0.11-0.12 counts its timestamp text: ``qwen3_vl_video_text``)
    rows: dict[str, int] = field(default_factory=dict)

    def encoder_rows(self, modality: str) -> int | None:
        return self.rows.get(modality, self.tokens.get(modality))


def tokens_per_item(t: VisionTower, s: ServeSettings, max_model_len: int) -> ItemTokens:
    """The largest item per modality, as vLLM's processor reports it (see the module notes);
    ``--mm-tokens-per-item`` wins where given."""
    kwargs = s.mm_processor_kwargs.data if s.mm_processor_kwargs else {}
    told = s.mm_tokens_per_item
    tokens: dict[str, int | None] = {}
    how: dict[str, str] = {}
    for m in t.modalities:
        given = told.get(m) if told else None
        if given is not None:
            tokens[m], how[m] = given, "--mm-tokens-per-item"
    if t.unit:
        image = _overridepixel_bounds(t.image_pixels, _scoped(kwargs, "images_kwargs"))
        where = "--mm-processor-kwargs" if image != t.image_pixels else t.processor
        if image is not None and "image" not in tokens:
            height, width = largest_image(t.unit, image[1])
            tokens["image"] = _qwen_tokens(t, height, width, 1, image)
            how["image"] = f"max_pixels {image[1]:,} ({where})"
        if "video" not in tokens:
            base = t.video_pixels if t.family == "qwen3_vl" else t.image_pixels
            video = _overridepixel_bounds(base, _scoped(kwargs, "videos_kwargs"))
            if t.family == "qwen3_vl" and video is not None:
                # 2 frames at the video processor's budget, which counts the temporal patch
                height, width = largest_image(t.unit, video[1] // t.temporal)
                tokens["video"] = _qwen_tokens(t, height, width, 2, video)
                how["video"] = f"2 frames at max_pixels {video[1]:,}"
            elif t.family != "qwen3_vl" and video is not None and image is not None:
                height, width = largest_image(t.unit, image[1])
                frame = _qwen_tokens(t, height, width, 1, video)
                fit = max_model_len // frame * t.temporal if max_model_len >= frame else 1
                frames = max(min(max(fit, 1), QWEN_MAX_FRAMES), 1)
                tokens["video"] = _qwen_tokens(t, height, width, frames, video)
                how["video"] = f"{frames} frames of {frame:,} tokens"
    elif t.family == "gemma3":
        crops_on = kwargs.get("do_pan_and_scan", t.pan_and_scan)
        if "image" not in tokens:
            crops = 0
            if crops_on:
                crops = int(kwargs.get("pan_and_scan_max_num_crops") or t.max_patches or 4)
                crops = crops if crops >= 2 else 0
            tokens["image"] = (crops + 1) * t.fixed_tokens
            how["image"] = f"mm_tokens_per_image {t.fixed_tokens}" + (
                f" x {crops + 1} (pan-and-scan)" if crops else ""
            )
    elif t.family == "llava" and "image" not in tokens:
        tokens["image"] = t.fixed_tokens
        how["image"] = "the CLIP patch grid (config)"
    elif t.family == "llama4" and "image" not in tokens:
        tiles = kwargs.get("max_patches", t.max_patches)
        if isinstance(tiles, int) and not isinstance(tiles, bool) and tiles > 0:
            chunks = 1 if tiles == 1 else tiles + 1
            tokens["image"] = chunks * t.fixed_tokens
            how["image"] = f"{tiles} tiles + 1 global of {t.fixed_tokens} tokens (max_patches)"
    for m in t.modalities:
        tokens.setdefault(m, None)
    rows: dict[str, int] = {}
    clip = tokens.get("video")
    if t.family == "qwen3_vl" and s.rules.qwen3_vl_video_text and clip is not None:
        if told and told.get("video") is not None:  # vLLM's figure, the text counted
            rows["video"] = max(1, round(clip / VIDEO_TEXT_PER_TOKEN))
        else:
            rows["video"] = clip
            tokens["video"] = int(clip * VIDEO_TEXT_PER_TOKEN)
            how["video"] += f" (x {VIDEO_TEXT_PER_TOKEN} for its timestamp text)"
    return ItemTokens(tokens=tokens, how=how, rows=rows)


# --------------------------------------------------------------------------- the profile


@dataclass(frozen=True, kw_only=True)
class MMProfile:
    """JSON ``mm``: what a multimodal model adds on one GPU (the most-loaded, first-stage one).

    Attributes:
        tower_weights_bytes: the tower and projector on this GPU (in ``weights_bytes``).
        tower_total_bytes: the whole tower; ``tower_source`` says how it was sized.
        mm_encoder_tp_mode: how the tower spreads over TP (``weights``/``data``), ``off`` when
            vLLM does not build it.
        limits: items per prompt by modality as vLLM resolves them (999 unless limited).
        tokens_per_item: the largest item of each enabled modality (None: unknown).
        encoder_budget_tokens: vLLM's encoder compute budget and cache size (both the same
            with default settings); None when unknown, 0 with no modality enabled.
        profiled_modality, profile_items: what the profile run encodes.
        encoder_output_bytes: the encoder outputs the profile run holds on the GPU.
        tower_activation_bytes: the tower's working set over those items (an estimate, or
            ``--mm-encoder-activation``).
        activation_bytes: what all this adds to vLLM's activation peak (0 when skipped).
        profiled: vLLM profiles the encoder (not ``--skip-mm-profiling``).
    """

    family: str
    modalities: list[str]
    tower_weights_bytes: int
    tower_total_bytes: int
    tower_source: str
    mm_encoder_tp_mode: str
    limits: dict[str, int]
    tokens_per_item: dict[str, int | None]
    tokens_source: dict[str, str]
    encoder_budget_tokens: int | None
    profiled_modality: str | None
    profile_items: int | None
    encoder_output_bytes: int
    tower_activation_bytes: int
    tower_activation_source: str
    activation_bytes: int
    profiled: bool
    notes: list[str]


def limits_of(t: VisionTower, s: ServeSettings) -> dict[str, int]:
    """Items per prompt by modality as vLLM resolves them (``get_limit_per_prompt``)."""
    if s.language_model_only:
        return dict.fromkeys(t.modalities, 0)
    return {
        m: (s.limit_mm_per_prompt.count(m) if s.limit_mm_per_prompt else DEFAULT_LIMIT)
        for m in t.modalities
    }


def tower_mode(t: VisionTower | None, s: ServeSettings) -> str:
    """``weights`` (TP-sharded), ``data`` (a copy per TP rank) or ``off`` (not built); a
    tower kvplan does not size (known only from safetensors headers) stays TP-sharded unless
    ``--language-model-only``."""
    if s.language_model_only:
        return "off"
    if t is None:
        return "weights"
    if not any(limits_of(t, s).values()):
        return "off"
    if s.mm_encoder_tp_mode == "data" and t.supports_data_tp:
        return "data"
    return "weights"


def tower_bytes_per_rank(total: int, mode: str, tp: int) -> int:
    if mode == "off":
        return 0
    return total if mode == "data" else -(-total // tp)


def tower_activation(t: VisionTower, positions: int, tp: int) -> int:
    """Bytes the tower's forward holds over ``positions`` ViT positions on one rank, sharded
    over ``tp`` (1 in data mode): see :data:`PIXEL_BYTES` and the module notes."""
    d, i = t.hidden, t.intermediate
    mlp = (3 if t.gated else 2) * i
    working = max(3 * d + -(-mlp // tp), 2 * d + -(-8 * d // tp))
    return positions * (working * t.dtype_bytes + t.patch_input * (PIXEL_BYTES + t.dtype_bytes))


def profile(
    t: VisionTower,
    s: ServeSettings,
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    lm_activation_bytes: int,
    tower_total_bytes: int,
    tower_source: str,
) -> MMProfile:
    """The encoder budget, items profiled and the memory they add (see the module notes)."""
    limits = limits_of(t, s)
    mode = tower_mode(t, s)
    notes: list[str] = list(t.notes)
    if s.mm_encoder_tp_mode == "data" and not t.supports_data_tp and mode != "off":
        notes.append(
            f"vLLM does not run {t.family}'s tower in --mm-encoder-tp-mode data; it falls back "
            "to weights (TP-sharded)"
        )
    if s.limit_mm_per_prompt:
        unknown = [m for m, _ in s.limit_mm_per_prompt.counts if m not in t.modalities]
        if unknown:
            notes.append(
                f"--limit-mm-per-prompt names {', '.join(unknown)}, which {t.family} does not "
                f"take (it takes {', '.join(t.modalities)})"
            )
    if s.pp > 1 and mode != "off":
        notes.append(
            "the tower and its profile run sit on the first pipeline stage; kvplan counts "
            "them on the rank it plans (the most-loaded)"
        )
    tp = s.tp
    weights = tower_bytes_per_rank(tower_total_bytes, mode, tp)
    enabled = [m for m in t.modalities if limits[m] > 0]
    found = tokens_per_item(t, s, max_model_len)
    tokens = {m: found.tokens[m] for m in enabled}
    how = {m: found.how[m] for m in enabled if m in found.how}
    base = dict(
        family=t.family,
        modalities=list(t.modalities),
        tower_weights_bytes=weights,
        tower_total_bytes=tower_total_bytes,
        tower_source=tower_source,
        mm_encoder_tp_mode=mode,
        limits=limits,
        tokens_per_item=tokens,
        tokens_source=how,
        profiled=not s.skip_mm_profiling,
    )
    if not enabled:
        notes.append(
            "every modality is off (--language-model-only or --limit-mm-per-prompt 0): vLLM "
            "builds no tower and no encoder cache"
        )
        return MMProfile(
            **base,  # type: ignore[arg-type]
            encoder_budget_tokens=0,
            profiled_modality=None,
            profile_items=0,
            encoder_output_bytes=0,
            tower_activation_bytes=0,
            tower_activation_source="",
            activation_bytes=0,
            notes=notes,
        )
    missing = [m for m in enabled if tokens[m] is None]
    if missing:
        notes.append(
            f"tokens per {'/'.join(missing)} item unknown: {unknown_why(t, missing)}; the "
            "encoder budget and the profile run's encoder memory are not counted (give "
            "--mm-tokens-per-item"
            + (", or --mm-processor-kwargs '{\"max_pixels\":N}'" if t.unit else "")
            + (", or --mm-processor-kwargs '{\"max_patches\":N}'" if t.family == "llama4" else "")
            + ")"
        )
        return MMProfile(
            **base,  # type: ignore[arg-type]
            encoder_budget_tokens=None,
            profiled_modality=None,
            profile_items=None,
            encoder_output_bytes=0,
            tower_activation_bytes=0,
            tower_activation_source="",
            activation_bytes=0,
            notes=notes,
        )
    known = {m: n for m, n in tokens.items() if n is not None}
    largest = max(known.values())
    budget = max(max_num_batched_tokens, largest)
    modality, per_item = max(known.items(), key=lambda kv: (kv[1], kv[0]))
    per_prompt = max(1, min(limits[modality], max_model_len // per_item))
    items = max(1, min(budget // per_item, max_num_seqs * per_prompt))
    rows = found.encoder_rows(modality) or per_item
    padding = s.rules.encoder_output_padding
    cached = max(rows, budget if padding == "budget" else per_item if padding == "item" else 0)
    out = items * cached * t.out_width * t.dtype_bytes
    if cached > rows:
        to = "the encoder budget" if padding == "budget" else "the largest item's tokens"
        notes.append(
            f"vLLM {s.vllm_version or s.rules.name}'s profile run pads each {modality} "
            f"item's {rows:,} encoder outputs to {cached:,} rows ({to}) before caching them"
        )
    if s.mm_encoder_activation_bytes is not None:
        tower_act, act_how = s.mm_encoder_activation_bytes, "--mm-encoder-activation"
    else:
        on_rank = -(-items // tp) if mode == "data" else items
        positions = math.ceil(on_rank * rows * t.positions_per_token)
        tower_act = tower_activation(t, positions, 1 if mode == "data" else tp)
        act_how = f"estimate over {positions:,} ViT positions"
    added = out + max(0, tower_act - lm_activation_bytes) if not s.skip_mm_profiling else 0
    if s.skip_mm_profiling:
        notes.append(
            "--skip-mm-profiling: vLLM reserves nothing for the encoder; a request with "
            f"{modality}s may need {(out + tower_act) / (1 << 30):.2f} GiB more than the KV "
            "cache leaves (keep it free with --headroom or a lower gpu_memory_utilization)"
        )
    return MMProfile(
        **base,  # type: ignore[arg-type]
        encoder_budget_tokens=budget,
        profiled_modality=modality,
        profile_items=items,
        encoder_output_bytes=out,
        tower_activation_bytes=tower_act,
        tower_activation_source=act_how,
        activation_bytes=added,
        notes=notes,
    )


def unknown_why(t: VisionTower, missing: list[str]) -> str:
    if t.unit:
        what = (
            "video processor's max_pixels"
            if t.family == "qwen3_vl" and missing == ["video"]
            else "processor's max_pixels"
        )
        return f"they follow the {what}, and no preprocessor_config.json was found"
    if t.family == "llama4":
        return "they follow the processor's max_patches, and no preprocessor_config.json was found"
    return "kvplan cannot derive them"
