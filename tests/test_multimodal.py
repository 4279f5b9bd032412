"""Multimodal: vision towers, the encoder budget, the items profiled, the levers.

Every expected figure is arithmetic written out here from the configs (shared/model-configs,
copied to tests/fixtures/configs), the checkpoints' model.safetensors.index.json totals, or
vLLM 0.33's rules as ../shared/ENGINES-SCALE.md §4.3 quotes them (confirmed in the sources
planner/multimodal.py names).
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import planner
from planner.activation import activation_peak_bytes
from planner.cli import app
from planner.deployment import Deployment, ServeSettings
from planner.errors import UsageError
from planner.gpus import get_gpu
from planner.layer_shapes import Placement
from planner.model.load import load_model
from planner.multimodal import (
    MMLimits,
    parse_limits,
    parse_processor_kwargs,
    parse_tokens,
    tokens_per_item,
)
from planner.plan_types import Plan
from planner.recommend import plan
from planner.weights import per_rank
from tests.conftest import fixture_config
from tests.helpers import check_command, moe_checkpoint

runner = CliRunner()
MIB, GIB = 1 << 20, 1 << 30
QWEN_VL_7B = str(fixture_config("Qwen--Qwen2.5-VL-7B-Instruct").parent)
LLAVA = str(fixture_config("llava-hf--llava-1.5-7b-hf").parent)


def run_cli(*args: str) -> Result:
    return runner.invoke(app, list(args))


def index_total(folder: str) -> int:
    """``metadata.total_size`` of a checkpoint's model.safetensors.index.json: the bytes of
    every tensor the checkpoint ships."""
    index = fixture_config(folder).parent / "model.safetensors.index.json"
    return int(json.loads(index.read_text())["metadata"]["total_size"])


def plan_of(model: str, gpu: str = "h100", **settings: object) -> Plan:
    s = ServeSettings(**settings)  # type: ignore[arg-type]
    return plan(Deployment(model=load_model(model), gpu=get_gpu(gpu), settings=s))


# --------------------------------------------------------------------------- tower weights


def test_qwen25_vl_7b_tower_and_text_add_up_to_the_checkpoint() -> None:
    # vision_config: depth 32, hidden 1,280, intermediate 3,420 (gated, biased MLP), RMSNorm,
    # patch 14, temporal 2, 3 channels, merge 2, out 3,584
    d, i, out, wide = 1280, 3420, 3584, 1280 * 4
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (2 * d * i + 2 * i) + (i * d + d)
    tower = 32 * block + 3 * 2 * 14 * 14 * d + (d + wide * wide + wide + wide * out + out)
    assert tower == 676_550_144
    spec = planner.load_model_spec(QWEN_VL_7B)
    assert spec.vision is not None and spec.vision.params == tower
    # the text model exactly (q/k/v biases included), from the text config: 28 layers, H
    # 3,584, 4 KV heads of 128, MLP 18,944, vocab 152,064, untied
    h, kv, mlp, vocab = 3584, 512, 18944, 152064
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * mlp + 2 * h
    text = 28 * layer + 2 * vocab * h + h
    assert 2 * (tower + text) == index_total("Qwen--Qwen2.5-VL-7B-Instruct") == 16_584_333_312


def test_qwen35_builds_the_qwen3_vl_tower_and_gated_attention() -> None:
    # Qwen3.5 builds Qwen3-VL's tower (Qwen3_VisionTransformer, qwen3_5.py 0.19.0:598):
    # depth 27, hidden 1,152, MLP 4,304 (GELU, biased), LayerNorm, patch 16, temporal 2,
    # merge 2, out 5,120, 2,304 learned positions, no deepstack levels
    d, i, out, wide = 1152, 4304, 5120, 1152 * 4
    block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d)
    embed = 3 * 2 * 16 * 16 * d + d + 2304 * d  # patch conv and its bias, positions
    tower = 27 * block + embed + (2 * d + wide * wide + wide + wide * out + out)
    assert tower == 460_730_096
    config = Path("tests/fixtures/startup_configs/Qwen--Qwen3.5-27B/config.json")
    spec = planner.load_model_spec(str(config))
    assert spec.vision is not None and spec.vision.params == tower
    assert spec.vision.family == "qwen3_vl" and not spec.notes  # nothing left unsized
    # the text model: 64 layers of H 5,120 and MLP 17,408; every 4th is full attention, 24
    # heads x 256 with Q packed beside its output gate (qwen3_next.py 0.19.0:233-238: Q is
    # total_num_heads * (1 + attn_output_gate)), 4 KV heads; the other 48 are Gated DeltaNet
    # (16 key heads x 128, 48 value heads x 128, conv 4); vocab 248,320, untied. Not counted
    # here nor by kvplan: each layer's A_log / dt_bias / gated norm and q/k norms (18,944 in
    # all, 0.00007 %)
    h, mlp, vocab, key, value = 5120, 17408, 248320, 16 * 128, 48 * 128
    attention = h * 2 * 24 * 256 + 2 * h * 4 * 256 + 24 * 256 * h
    delta_net = h * (2 * key + 2 * value + 2 * 48) + (2 * key + value) * 4 + value * h
    layers = 16 * attention + 48 * delta_net + 64 * (3 * h * mlp + 2 * h)
    text = layers + 2 * vocab * h + h
    w = planner.weights.from_config(spec)
    assert w.parameter_count == text + tower == 27_356_709_616


def test_the_output_gate_follows_the_config(tmp_path: Path) -> None:
    # vLLM packs the gate unless the config turns it off (getattr(config, "attn_output_gate",
    # True)): Qwen3-Next-80B's config names no gate, so its 12 full-attention layers carry
    # 16 heads x 256 x H 2,048 more each than a config that says False
    source = fixture_config("Qwen--Qwen3-Next-80B-A3B-Thinking")
    raw = json.loads(source.read_text())
    assert "attn_output_gate" not in raw
    off = tmp_path / "off"
    off.mkdir()
    (off / "config.json").write_text(json.dumps({**raw, "attn_output_gate": False}))
    gated = planner.weights.from_config(planner.load_model_spec(str(source.parent)))
    plain = planner.weights.from_config(planner.load_model_spec(str(off)))
    assert gated.parameter_count - plain.parameter_count == 12 * 16 * 256 * 2048


def test_llava_builds_the_clip_layers_up_to_its_feature_layer() -> None:
    # CLIP ViT-L/14-336: hidden 1,024, MLP 4,096, 24 layers; vision_feature_layer -2: vLLM
    # builds 24 - 2 + 1 = 23 layers (get_layer_index) and no post_layernorm
    d, i = 1024, 4096
    layer = 4 * d + 4 * (d * d + d) + (d * i + i) + (i * d + d)
    embeddings = d + 3 * 14 * 14 * d + (24 * 24 + 1) * d + 2 * d  # cls, conv, positions, pre-LN
    projector = (d * 4096 + 4096) + (4096 * 4096 + 4096)
    spec = planner.load_model_spec(LLAVA)
    assert spec.vision is not None
    assert spec.vision.params == embeddings + 23 * layer + projector == 311_888_896
    # the checkpoint has all 24 layers and the post-LN; with the Llama text model (defaults
    # of LlamaConfig: 32 layers, H 4,096, MLP 11,008; vocab 32,064) that is its fp16 total
    h, mlp, vocab = 4096, 11008, 32064
    text = 2 * vocab * h + 32 * (4 * h * h + 3 * h * mlp + 2 * h) + h
    checkpoint = spec.vision.params + layer + 2 * d + text
    assert 2 * checkpoint == index_total("llava-hf--llava-1.5-7b-hf") == 14_126_854_144


def test_gemma3_siglip_tower_from_the_config() -> None:
    # SigLIP so400m/14 at 896 px: hidden 1,152, MLP 4,304, 27 layers, (896 / 14)^2 = 4,096
    # positions, post-LN; projector 1,152 x 5,376 (text hidden) + its RMSNorm
    d, i = 1152, 4304
    layer = 4 * d + 4 * (d * d + d) + (d * i + i) + (i * d + d)
    tower = (3 * 14 * 14 * d + d) + 4096 * d + 27 * layer + 2 * d + (d * 5376 + d)
    spec = planner.load_model_spec("gemma-3-27b-it")
    assert spec.vision is not None and spec.vision.params == tower
    # medgemma-27b was 27.01 B without its tower; the tower is 0.42 B of it now
    w = planner.weights.from_config(planner.load_model_spec("medgemma-27b-it"))
    assert w.parameter_count - tower == pytest.approx(27.01e9, rel=0.001)


def test_tower_placement_follows_the_encoder_tp_mode(tmp_path: Path) -> None:
    model = planner.load_model(str(moe_checkpoint(tmp_path, mtp_layer=False)))
    # the checkpoint of tests/helpers.py moe_checkpoint: 30 MiB language model + a 5 MiB tower
    assert per_rank(model, placement=Placement(tp=2)).bytes_per_rank == (30 + 5) * MIB // 2
    # data: a whole copy of the tower on each TP rank
    assert per_rank(model, placement=Placement(tp=2, tower="data")).bytes_per_rank == (
        30 * MIB // 2 + 5 * MIB
    )
    # off (--language-model-only, every modality limited to 0): not built at all
    assert per_rank(model, placement=Placement(tp=2, tower="off")).bytes_per_rank == 15 * MIB


def test_tower_leaves_with_the_modalities_and_stays_with_data_mode() -> None:
    tower = planner.load_model_spec(QWEN_VL_7B).vision
    assert tower is not None
    both_off = plan_of(QWEN_VL_7B, limit_mm_per_prompt=parse_limits({"image": 0, "video": 0}))
    text_only = plan_of(QWEN_VL_7B, language_model_only=True)
    default = plan_of(QWEN_VL_7B)
    assert default.weights.bytes_per_rank - text_only.weights.bytes_per_rank == tower.bytes
    assert both_off.weights.bytes_per_rank == text_only.weights.bytes_per_rank
    assert text_only.mm is not None and text_only.mm.mm_encoder_tp_mode == "off"
    assert text_only.mm.encoder_budget_tokens == 0 and text_only.vllm.encoder_activation_bytes == 0
    # video off only: the tower stays (images still use it)
    video_off = plan_of(QWEN_VL_7B, limit_mm_per_prompt=parse_limits({"video": 0}))
    assert video_off.weights.bytes_per_rank == default.weights.bytes_per_rank
    # TP 2: weights mode halves the tower (rounded up with the rest of stage 0), data keeps
    # all of it on each rank
    sharded = plan_of(QWEN_VL_7B, tp=2)
    copied = plan_of(QWEN_VL_7B, tp=2, mm_encoder_tp_mode="data")
    gap = copied.weights.bytes_per_rank - sharded.weights.bytes_per_rank
    assert abs(gap - tower.bytes // 2) <= 1


def test_data_mode_falls_back_for_a_tower_vllm_cannot_split_by_data() -> None:
    # Gemma 3 has no supports_encoder_tp_data: vLLM warns and uses weights (config/model.py)
    p = plan_of("gemma-3-27b-it", tp=2, mm_encoder_tp_mode="data")
    assert p.mm is not None and p.mm.mm_encoder_tp_mode == "weights"
    assert any("falls back to weights" in n for n in p.notes)


# --------------------------------------------------------------------------- tokens per item


def test_qwen25_vl_7b_tokens_per_image_and_video() -> None:
    tower = planner.load_model_spec(QWEN_VL_7B).vision
    assert tower is not None and tower.image_pixels == (3136, 12_845_056)
    # image: max_pixels / (patch 14 x merge 2)^2 = 12,845,056 / 784 = 16,384 tokens;
    # video: frames that fit 128,000 tokens, 2 per temporal patch: 128,000 // 16,384 = 7
    # temporal patches = 14 frames (the cap is 14) -> 7 x 16,384 = 114,688, the figures vLLM
    # logs for Qwen2.5-VL-7B (PR #12604: {'image': 16384, 'video': 114688})
    found = tokens_per_item(tower, ServeSettings(), 128_000).tokens
    assert found == {"image": 12_845_056 // (14 * 14 * 4), "video": 7 * 16_384}
    assert found == {"image": 16_384, "video": 114_688}
    # a 32,768-token context fits 2 temporal patches: 4 frames, 32,768 tokens
    assert tokens_per_item(tower, ServeSettings(), 32_768).tokens["video"] == 2 * 16_384


def test_max_pixels_from_the_processor_kwargs() -> None:
    tower = planner.load_model_spec(QWEN_VL_7B).vision
    assert tower is not None
    # Qwen's documented 1,280 x 28 x 28 = 1,003,520 pixels: 1,280 tokens (32 x 40 units)
    s = ServeSettings(mm_processor_kwargs=parse_processor_kwargs({"max_pixels": 1_003_520}))
    assert tokens_per_item(tower, s, 128_000).tokens["image"] == 1280


def test_fixed_size_families() -> None:
    gemma = planner.load_model_spec("gemma-3-4b-it").vision
    llava = planner.load_model_spec(LLAVA).vision
    assert gemma is not None and llava is not None
    # Gemma 3: mm_tokens_per_image 256; pan-and-scan (4 crops by default) adds 4 x 256
    assert tokens_per_item(gemma, ServeSettings(), 8192).tokens == {"image": 256}
    crops = ServeSettings(mm_processor_kwargs=parse_processor_kwargs({"do_pan_and_scan": True}))
    assert tokens_per_item(gemma, crops, 8192).tokens == {"image": (4 + 1) * 256}
    # LLaVA: (336 / 14)^2 = 576 patches, the CLS token dropped (strategy "default")
    assert tokens_per_item(llava, ServeSettings(), 4096).tokens == {"image": 576}


def test_llama4_needs_its_processor_tiles() -> None:
    tower = planner.load_model_spec("llama-4-scout-17b-16e-instruct").vision
    assert tower is not None
    # no preprocessor_config.json: max_patches unknown
    assert tokens_per_item(tower, ServeSettings(), 8192).tokens == {"image": None}
    # 16 tiles of 336 px + a global one, (336 / 14)^2 / 4 (pixel shuffle 0.5) = 144 each
    s = ServeSettings(mm_processor_kwargs=parse_processor_kwargs({"max_patches": 16}))
    assert tokens_per_item(tower, s, 8192).tokens == {"image": 17 * 144}


def test_unknown_tokens_are_asked_for_not_guessed() -> None:
    # Qwen2.5-VL-3B's shared config has no preprocessor_config.json beside it
    p = plan_of("qwen2.5-vl-3b-instruct")
    assert p.mm is not None and p.mm.encoder_budget_tokens is None
    assert p.vllm.encoder_activation_bytes == 0
    assert any("--mm-tokens-per-item" in n for n in p.notes)
    told = plan_of("qwen2.5-vl-3b-instruct", mm_tokens_per_item=parse_tokens("1280"))
    assert told.mm is not None and told.mm.tokens_per_item == {"image": 1280, "video": 1280}
    # both 1,280: the encoder budget is the token budget, 8,192 on an H100
    assert told.mm.encoder_budget_tokens == 8192


# --------------------------------------------------------------------------- the profile run


def test_qwen25_vl_7b_profiles_one_video_of_the_largest_size() -> None:
    p = plan_of(QWEN_VL_7B)
    mm, cap = p.mm, p.vllm
    assert mm is not None and cap.max_num_batched_tokens == 8192 and cap.max_num_seqs == 1024
    # budget = max(8,192, 114,688); the video has the most tokens; per prompt max(1,
    # min(999, 128,000 // 114,688)) = 1; items max(1, min(114,688 // 114,688, 1,024 x 1)) = 1
    assert mm.encoder_budget_tokens == 114_688
    assert (mm.profiled_modality, mm.profile_items) == ("video", 1)
    assert mm.encoder_output_bytes == 114_688 * 3584 * 2 == 822_083_584
    # the tower over 114,688 x 4 = 458,752 positions: MLP phase 3 x 1,280 + 3 x 3,420 =
    # 14,100 elements (attention's 10 x 1,280 is less) x 2 B, and 3 x 2 x 14 x 14 = 1,176
    # pixels as float32 and bf16 (6 B)
    per_position = 14_100 * 2 + 1176 * 6
    assert mm.tower_activation_bytes == 458_752 * per_position
    lm = activation_peak_bytes(planner.load_model_spec(QWEN_VL_7B), 8192, 1024)
    assert cap.encoder_activation_bytes == mm.encoder_output_bytes + (
        mm.tower_activation_bytes - lm
    )
    assert cap.activation_peak_bytes == lm + cap.encoder_activation_bytes


def test_video_off_profiles_an_image_and_frees_kv() -> None:
    p = plan_of(QWEN_VL_7B, limit_mm_per_prompt=parse_limits({"video": 0}))
    mm = p.mm
    assert mm is not None and mm.encoder_budget_tokens == 16_384
    assert (mm.profiled_modality, mm.profile_items) == ("image", 1)
    assert mm.encoder_output_bytes == 16_384 * 3584 * 2
    assert p.vllm.kv_cache_size_tokens > plan_of(QWEN_VL_7B).vllm.kv_cache_size_tokens


def test_gemma3_profiles_a_batch_of_images() -> None:
    p = plan_of("gemma-3-27b-it")
    mm = p.mm
    assert mm is not None and p.vllm.max_num_batched_tokens == 8192
    # 256 tokens an image: budget max(8,192, 256) = 8,192; items min(8,192 // 256 = 32,
    # 1,024 x min(999, 131,072 // 256)) = 32; outputs 32 x 256 x 5,376 (text hidden) x 2 B
    assert (mm.encoder_budget_tokens, mm.profile_items) == (8192, 32)
    assert mm.encoder_output_bytes == 32 * 256 * 5376 * 2
    # one image per prompt still profiles 32: 1,024 sequences x 1 image each
    one = plan_of("gemma-3-27b-it", limit_mm_per_prompt=parse_limits({"image": 1}))
    assert one.mm is not None and one.mm.profile_items == 32
    # with 16 sequences x 1 image the decoder side caps it at 16
    few = plan_of("gemma-3-27b-it", max_num_seqs=16, limit_mm_per_prompt=parse_limits({"image": 1}))
    assert few.mm is not None and few.mm.profile_items == 16


def test_qwen3_vl_outputs_carry_the_deepstack_levels() -> None:
    spec = planner.load_model_spec("qwen3-vl-32b-instruct")
    assert spec.vision is not None
    # deepstack_visual_indexes [8, 16, 24]: the encoder output is out_hidden_size x (1 + 3)
    assert spec.vision.out_width == 5120 * 4
    p = plan_of("qwen3-vl-32b-instruct", "h200", mm_tokens_per_item=parse_tokens("4096"))
    mm = p.mm
    assert mm is not None and mm.encoder_budget_tokens == 8192 and mm.profile_items == 2
    assert mm.encoder_output_bytes == 2 * 4096 * 5120 * 4 * 2


# Qwen3-VL checkpoints' processor files (the values every Qwen3-VL release ships): images up
# to 16,777,216 pixels, a video's two profiled frames up to 25,165,824 together; 16-pixel
# patches merged 2 x 2, 2 frames a temporal patch
QWEN3_VL_IMAGE = {
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
}
QWEN3_VL_VIDEO = {
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
}


def qwen3_vl_dir(tmp_path: Path) -> str:
    folder = tmp_path / "qwen3-vl-32b"
    folder.mkdir()
    folder.joinpath("config.json").write_bytes(
        fixture_config("Qwen--Qwen3-VL-32B-Instruct").read_bytes()
    )
    folder.joinpath("preprocessor_config.json").write_text(json.dumps(QWEN3_VL_IMAGE))
    folder.joinpath("video_preprocessor_config.json").write_text(json.dumps(QWEN3_VL_VIDEO))
    return str(folder)


def test_qwen3_vl_video_counts_its_timestamp_text_in_011_and_012(tmp_path: Path) -> None:
    model = qwen3_vl_dir(tmp_path)
    # the encoder's tokens: 2 frames (one temporal patch) of 25,165,824 / 2 = 12,582,912
    # pixels, 32 x 32 pixels a token: 12,288; an image: 16,777,216 / 1,024 = 16,384
    new = plan_of(model, "h200", vllm_version="0.13.0", max_model_len=131072)
    assert new.mm is not None
    assert new.mm.tokens_per_item == {"image": 16384, "video": 12288}
    assert new.mm.profiled_modality == "image"  # 16,384 > 12,288
    # 0.11-0.12: the video item is 12.5 tokens an encoder token (models/qwen3_vl.py
    # 0.11.0:674): 153,600, the budget both public 0.11 start-ups log, and now the largest
    width = 5120 * 4  # out_hidden_size x (1 + 3 deepstack levels)
    for version in ("0.11.0", "0.12.0"):
        old = plan_of(model, "h200", vllm_version=version, max_model_len=131072)
        mm = old.mm
        assert mm is not None and mm.tokens_per_item == {"image": 16384, "video": 153600}
        assert (mm.profiled_modality, mm.profile_items) == ("video", 1)
        assert mm.encoder_budget_tokens == 153600  # max(8,192 batched, 153,600)
        # the one item's 12,288 outputs are padded to 153,600 rows before they are cached:
        # to the encoder budget in 0.11 (gpu_model_runner.py 0.11.0:3369-3384), to the
        # largest item in 0.12 (0.12.0:4331-4351), the same here
        assert mm.encoder_output_bytes == 153600 * width * 2
        # the tower still encodes 12,288 tokens: 49,152 ViT positions
        assert mm.tower_activation_source == "estimate over 49,152 ViT positions"
        assert any(
            "pads each video item's 12,288 encoder outputs to 153,600 rows" in n for n in mm.notes
        )
    # a logged item (--mm-tokens-per-item, vLLM's figure) is taken with its text counted
    told = plan_of(
        model,
        "h200",
        vllm_version="0.11.0",
        max_model_len=131072,
        mm_tokens_per_item=parse_tokens("153600"),
    )
    assert told.mm is not None and told.mm.profiled_modality == "video"
    assert told.mm.tower_activation_source == "estimate over 49,152 ViT positions"


def test_gemma3_outputs_are_padded_to_the_budget_in_011_only() -> None:
    # 256 tokens an image, 8,192 batched tokens on an H100: 32 images profiled; vLLM 0.11
    # pads each image's 256 outputs to the 8,192-token budget, 0.12 to the largest item (256:
    # nothing), 0.13 keeps them as they are
    width = 5376
    padded = plan_of("gemma-3-27b-it", vllm_version="0.11.2")
    assert padded.mm is not None and padded.mm.profile_items == 32
    assert padded.mm.encoder_output_bytes == 32 * 8192 * width * 2
    for version in ("0.12.0", "0.13.0", "0.10.2"):
        kept = plan_of("gemma-3-27b-it", vllm_version=version)
        assert kept.mm is not None and kept.mm.encoder_output_bytes == 32 * 256 * width * 2


def test_skip_mm_profiling_reserves_nothing_and_says_so() -> None:
    p = plan_of(QWEN_VL_7B, skip_mm_profiling=True)
    assert p.mm is not None and not p.mm.profiled and p.mm.encoder_budget_tokens == 114_688
    assert p.vllm.encoder_activation_bytes == 0
    assert any("--skip-mm-profiling" in n for n in p.notes)


def test_the_tower_activation_knob() -> None:
    p = plan_of(QWEN_VL_7B, mm_encoder_activation_bytes=6 * GIB)
    assert p.mm is not None and p.mm.tower_activation_bytes == 6 * GIB
    lm = p.vllm.activation_peak_bytes - p.vllm.encoder_activation_bytes
    assert p.vllm.encoder_activation_bytes == 822_083_584 + (6 * GIB - lm)


def test_levers_are_planned_and_ranked_by_what_they_buy() -> None:
    p = plan_of(QWEN_VL_7B)
    changes = [lv.changes for lv in p.mm_levers]
    assert {"limit_mm_per_prompt": {"video": 0}} in changes
    assert {"mm_processor_kwargs": {"max_pixels": 1_003_520}} in changes
    assert {"language_model_only": True} in changes
    video_off = plan_of(QWEN_VL_7B, limit_mm_per_prompt=parse_limits({"video": 0}))
    lever = next(lv for lv in p.mm_levers if "limit_mm_per_prompt" in lv.changes)
    assert lever.kv_cache_size_tokens == video_off.vllm.kv_cache_size_tokens
    assert lever.kv_tokens_gained == (
        video_off.vllm.kv_cache_size_tokens - p.vllm.kv_cache_size_tokens
    )
    assert all(lv.kv_tokens_gained > 0 for lv in p.mm_levers)


# --------------------------------------------------------------------------- settings


def test_limits_parse_as_vllm_takes_them() -> None:
    assert parse_limits('{"image":2,"video":0}') == MMLimits(counts=(("image", 2), ("video", 0)))
    opts = parse_limits({"video": {"count": 1, "num_frames": 32}})
    assert opts.count("video") == 1 and opts.count("image") == 999
    assert opts.as_json() == '{"video":{"count":1,"num_frames":32}}'
    for bad in ('{"image":-1}', "[1]", '{"video":{"count":1,"fps":2}}', "{image: 2"):
        with pytest.raises(UsageError):
            parse_limits(bad)
    with pytest.raises(UsageError, match="weights or data"):
        ServeSettings(mm_encoder_tp_mode="pixels")


def test_cli_json_command_and_bad_flags() -> None:
    result = run_cli(
        "estimate",
        QWEN_VL_7B,
        "--gpu",
        "h100",
        "--limit-mm-per-prompt",
        '{"image":2,"video":0}',
        "--mm-encoder-tp-mode",
        "data",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    mm = data["mm"]
    assert mm["encoder_budget_tokens"] == 16_384 and mm["profile_items"] == 1
    assert mm["tower_weights_bytes"] == 2 * 676_550_144 and mm["mm_encoder_tp_mode"] == "data"
    command = data["commands"]["vllm"]
    args = check_command(command)
    assert args["--limit-mm-per-prompt"] == {"image": 2, "video": 0}
    assert args["--mm-encoder-tp-mode"] == "data"
    assert "--limit-mm-per-prompt" in shlex.split(command)
    bad = run_cli("estimate", QWEN_VL_7B, "--limit-mm-per-prompt", "{image")
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: --limit-mm-per-prompt")
    assert "Traceback" not in bad.output


def test_text_model_has_no_mm_block() -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--gpu", "h100", "--json")
    assert json.loads(result.stdout)["mm"] is None


def test_plans_file_keys(tmp_path: Path) -> None:
    plans = tmp_path / "plans.yaml"
    plans.write_text(
        "deployments:\n"
        f"  - {{name: vl, model: {QWEN_VL_7B}, gpu: h100,\n"
        "     limit_mm_per_prompt: {image: 2, video: 0}, mm_encoder_tp_mode: data,\n"
        "     skip_mm_profiling: false, mm_processor_kwargs: {max_pixels: 1003520}}\n"
        f"  - {{name: bad, model: {QWEN_VL_7B}, gpu: h100, language_model_only: 'yes'}}\n"
    )
    result = run_cli("check", str(plans), "--format", "json")
    assert result.exit_code == 2
    assert "language_model_only: must be true or false" in result.stderr
    plans.write_text(plans.read_text().split("  - {name: bad")[0])
    ok = run_cli("check", str(plans), "--format", "json")
    assert ok.exit_code == 0, ok.output


def test_diagnose_reads_the_encoder_line(tmp_path: Path) -> None:
    log = tmp_path / "vl.log"
    # vLLM 0.33's wording (v1/worker/gpu/mm/encoder_runner.py profile_encoder_cache) and a
    # non-default args line with the limits as a dict
    log.write_text(
        "(APIServer pid=1) INFO [utils.py:233] non-default args: {'model': "
        f"'{QWEN_VL_7B}', 'limit_mm_per_prompt': {{'image': 2, 'video': 0}}}}\n"
        "(EngineCore_DP0 pid=2) INFO [encoder_runner.py:131] Encoder cache will be initialized "
        "with a budget of 16384 tokens, and profiled with 1 image items of the maximum "
        "feature size.\n"
        "(EngineCore_DP0 pid=2) INFO [gpu_worker.py:276] Available KV cache memory: 51.00 GiB\n"
    )
    result = run_cli("diagnose", str(log), "--gpu", "h100", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["log"]["encoder_budget_tokens"] == 16_384
    assert data["log"]["encoder_profile_modality"] == "image"
    assert data["settings"]["limit_mm_per_prompt"] == {"image": 2, "video": 0}
    terms = {t["name"]: t for t in data["terms"]}
    # the plan for the same limits: 12,845,056 / 784 = 16,384 tokens, one image
    assert terms["encoder budget"]["plan"] == 16_384 and terms["encoder budget"]["diff"] == 0
    assert terms["encoder items profiled"]["plan"] == 1
    finding = next(f for f in data["findings"] if f["kind"] == "encoder-profile")
    assert "the plan has the same" in finding["text"]


def test_text_output_fits_80_columns() -> None:
    result = run_cli("estimate", QWEN_VL_7B, "--gpu", "h100")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    tower = next(line for line in lines if "vision tower" in line)
    assert "1.26 GiB" in tower  # 1,353,100,288 B
    budget = next(line for line in lines if line.startswith("  encoder: budget"))
    # what the profile run adds to the activation peak, as --json's mm.activation_bytes says
    added = json.loads(run_cli("estimate", QWEN_VL_7B, "--gpu", "h100", "--json").stdout)["mm"][
        "activation_bytes"
    ]
    assert budget == (
        "  encoder: budget 114,688 tokens, 1 video of 114,688 profiled: "
        f"+{added / 2**30:.2f} GiB activation"
    )
    # 822,083,584 B of outputs + 458,752 x 35,256 B of tower activations = 15.83 GiB
    assert round((822_083_584 + 458_752 * 35_256) / GIB, 2) == 15.83
    assert any("+" in line and "KV tokens" in line for line in lines)
    assert math.isclose(1_353_100_288 / GIB, 1.26, abs_tol=0.005)


def test_the_stated_ranges_hold_the_point_with_the_encoder_in_it() -> None:
    # the release's activation range is the language model's (planner.budget.term_ranges);
    # the encoder's profile share sits on top of both ends, as it sits in the point figure
    # (tsailiming/openshift-ai-bootstrap's L4 Qwen2.5-VL-7B start-up in 0.9.0.1 had a range
    # of 2.37-5.20 GiB around a point of 1.99 before)
    for version in (None, "0.9.0.1", "0.19.0"):
        p = plan_of(QWEN_VL_7B, "l4", max_model_len=2048, vllm_version=version)
        cap = p.vllm
        assert cap.encoder_activation_bytes > 0
        ranges = planner.budget.estimate_ranges(cap, 1)
        low, high = ranges["activation_peak_bytes"]
        assert low <= cap.activation_peak_bytes <= high
        low, high = ranges["available_kv_bytes"]
        assert low <= cap.available_kv_bytes <= high
