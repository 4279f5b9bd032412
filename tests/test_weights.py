"""Weights: exact from safetensors headers (local and Hub), else from the config."""

from __future__ import annotations

import json
import shutil
import struct
import types
from pathlib import Path

import pytest

import planner
from planner.deployment import Deployment, ServeSettings
from planner.gpus import get_gpu
from planner.model.load import load_model, local_headers, with_headers
from planner.weights import from_config, from_tensors, per_rank, read_safetensors_header
from tests.conftest import fixture_config


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A valid safetensors file (header + zero bytes); returns the data size in bytes."""
    bits = {"BF16": 16, "F32": 32, "F8_E4M3": 8}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = bits[dtype] // 8
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)
    return offset


TINY = {  # a 2-layer model: embed 100 x 8, per layer q (8 x 8) + mlp (8 x 16), lm_head
    "model.embed_tokens.weight": ("BF16", [100, 8]),
    "model.layers.0.self_attn.q_proj.weight": ("BF16", [8, 8]),
    "model.layers.0.mlp.up_proj.weight": ("BF16", [16, 8]),
    "model.layers.1.self_attn.q_proj.weight": ("BF16", [8, 8]),
    "model.layers.1.mlp.up_proj.weight": ("F8_E4M3", [16, 8]),
    "model.norm.weight": ("F32", [8]),
    "lm_head.weight": ("BF16", [100, 8]),
}


def tiny_model(tmp_path: Path) -> Path:
    config = json.loads(fixture_config("meta-llama--Llama-3.1-8B").read_text())
    config.update(
        num_hidden_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=16,
        vocab_size=100,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {k: v for k, v in TINY.items() if "layers.1" not in k},
    )
    write_safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {k: v for k, v in TINY.items() if "layers.1" in k},
    )
    return tmp_path


def test_local_safetensors_headers_give_exact_bytes(tmp_path: Path) -> None:
    w = per_rank(load_model(str(tiny_model(tmp_path))), tp=1, pp=1)
    # embed 1,600 + layer0 (128 + 256) + layer1 (128 + 128 fp8) + norm 32 + lm_head 1,600
    assert w.source == "safetensors"
    assert w.total_bytes == 1600 + 384 + 256 + 32 + 1600
    assert w.bytes_per_rank == w.total_bytes
    assert w.parameter_count == 800 + 64 + 128 + 64 + 128 + 8 + 800


def test_safetensors_split_over_pipeline_stages(tmp_path: Path) -> None:
    w = per_rank(load_model(str(tiny_model(tmp_path))), tp=1, pp=2)
    # stage 0: embed + layer 0 = 1,984; stage 1: layer 1 + norm + lm_head = 1,888
    assert w.bytes_per_rank == 1600 + 384


def test_safetensors_header_refuses_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 5) + b"nope!")
    with pytest.raises(planner.ConfigError, match="header is not valid JSON"):
        read_safetensors_header(bad)
    bad.write_bytes(b"abc")
    with pytest.raises(planner.ConfigError, match="too short"):
        read_safetensors_header(bad)


def test_hub_safetensors_metadata(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def info(dtype: str, shape: list[int], start: int, size: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(dtype=dtype, shape=shape, data_offsets=(start, start + size))

    meta = types.SimpleNamespace(
        files_metadata={
            "model.safetensors": types.SimpleNamespace(
                tensors={
                    "model.embed_tokens.weight": info("BF16", [100, 8], 0, 1600),
                    "model.layers.0.mlp.up_proj.weight": info("BF16", [16, 8], 1600, 256),
                    "model.layers.1.mlp.up_proj.weight": info("BF16", [16, 8], 1856, 256),
                }
            )
        }
    )
    calls = []

    def fake(repo: str, revision: str | None = None) -> types.SimpleNamespace:
        calls.append((repo, revision))
        return meta

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", fake)
    shutil.copy(tiny_model(tmp_path) / "config.json", tmp_path / "c.json")
    spec = planner.parse_config(
        json.loads((tmp_path / "c.json").read_text()), name="acme/tiny", source="hub:acme/tiny"
    )
    w = per_rank(with_headers(spec, revision="v1", offline=False), tp=2, pp=1)
    assert calls == [("acme/tiny", "v1")]
    assert w.source == "safetensors" and w.total_bytes == 2112
    assert w.bytes_per_rank == 2112 // 2


def test_hub_metadata_unavailable_falls_back_to_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", offline)
    spec = planner.parse_config(
        json.loads(fixture_config("Qwen--Qwen3-8B").read_text()), name="acme/q", source="hub:acme/q"
    )
    assert per_rank(with_headers(spec, offline=False), tp=1, pp=1).source == "config"


@pytest.mark.parametrize(
    ("name", "params_b"),
    [
        ("llama-3.1-8b", 8.03),
        ("llama-3.1-70b", 70.55),
        ("qwen3-32b", 32.76),
        ("mixtral-8x7b-v0.1", 46.70),
        ("deepseek-v3", 671.03),
        ("qwen3-30b-a3b", 30.53),
    ],
)
def test_parameter_counts_match_published_sizes(name: str, params_b: float) -> None:
    # Published totals: Llama-3.1-8B 8.03 B, 70B 70.55 B, Qwen3-32B 32.8 B, Mixtral-8x7B 46.7 B,
    # DeepSeek-V3 671 B (without the 14 B MTP module), Qwen3-30B-A3B 30.5 B.
    assert from_config(planner.load_model_spec(name)).parameter_count / 1e9 == pytest.approx(
        params_b, rel=0.01
    )


def test_quantized_checkpoints_shrink_weights() -> None:
    raw = json.loads(fixture_config("meta-llama--Llama-3.1-8B").read_text())
    bf16 = from_config(planner.parse_config(raw, name="b", source="t")).total_bytes
    raw["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}
    awq = from_config(planner.parse_config(raw, name="a", source="t"))
    assert awq.quantization == "awq 4-bit"
    # linear layers at 0.5 + 2.5/128 B/param; embeddings and lm_head stay bf16 (2 x 1.05 GB)
    assert 0.3 * bf16 < awq.total_bytes < 0.4 * bf16


def test_tensor_parallel_shards_weights() -> None:
    spec = planner.load_model_spec("llama-3.1-70b")
    one, four = from_config(spec, tp=1), from_config(spec, tp=4)
    # everything but the (replicated) norms splits four ways
    assert one.bytes_per_rank / 4 <= four.bytes_per_rank < one.bytes_per_rank / 4 * 1.001


@pytest.mark.parametrize(
    "name",
    [
        "llama-3.1-8b",
        "qwen3-0.6b",
        "gemma-2-9b",
        "deepseek-v2-lite",
        "qwen3-30b-a3b",
        "nemotron-h-56b",
        "qwen3-next-80b-a3b",
        "falcon-7b",
        "phi-4",
        "mixtral-8x7b-v0.1",
    ],
)
def test_config_weights_match_the_probes_tensor_shapes(name: str) -> None:
    """Two independent counts must agree: planner.weights (bytes by formula) and the tensor
    shapes `kvplan verify` allocates (probes/weights.py). (Pure Mamba-1 is left out: the probe
    models its mixer as in/out projections only, 4 % under the 2.77 B published parameters the
    planner counts.)"""
    pytest.importorskip("torch")
    from probes.weights import model_dims, total_weight_bytes

    spec = planner.load_model_spec(name)
    assert from_config(spec).total_bytes == pytest.approx(
        total_weight_bytes(model_dims(spec), 2), rel=0.001
    )


def test_pure_mamba_has_no_mlp() -> None:
    # state-spaces/mamba-2.8b: 2.77 B parameters published; each block is a Mamba mixer only.
    w = from_config(planner.load_model_spec("mamba-2.8b"))
    assert w.parameter_count == pytest.approx(2.77e9, rel=0.01)


def test_mamba_time_step_rank_auto_is_transformers_default() -> None:
    # transformers' MambaConfig writes time_step_rank "auto" = ceil(hidden / 16); the config
    # derivation used to call int("auto") on it.
    raw = json.loads(fixture_config("state-spaces--mamba-2.8b-hf").read_text())
    spec = planner.parse_config(raw, name="m", source="t")
    auto = planner.parse_config({**raw, "time_step_rank": "auto"}, name="m", source="t")
    assert raw["time_step_rank"] == -(-raw["hidden_size"] // 16) == 160
    assert from_config(auto).bytes_per_rank == from_config(spec).bytes_per_rank


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"moe_intermediate_size": "768"}, "moe_intermediate_size must be a whole number"),
        ({"n_shared_experts": [1]}, "n_shared_experts must be a whole number"),
        ({"decoder_sparse_step": 0.5}, "decoder_sparse_step must be a whole number"),
        ({"vocab_size": -5}, "vocab_size must be a whole number from 0"),
        ({"intermediate_size": 2**50}, "intermediate_size must be a whole number from 0 to"),
    ],
)
def test_malformed_optional_sizes_are_config_errors(change: dict, fragment: str) -> None:
    raw = json.loads(fixture_config("Qwen--Qwen3-30B-A3B").read_text())
    spec = planner.parse_config({**raw, **change}, name="q", source="t")
    with pytest.raises(planner.ConfigError, match=fragment):
        from_config(spec)


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ({"a": 5}, "tensor 'a' is not a JSON object"),
        ({"a": {"shape": "8x8"}}, "tensor 'a' has no shape list"),
        ({"a": {"shape": [8, -1]}}, "a dimension of 'a' must be a whole number"),
        ({"a": {"shape": [2**30, 2**30]}}, "tensor 'a' has an implausible shape"),
        ({"a": {"shape": [8], "data_offsets": [10, 2]}}, "tensor 'a' ends before it starts"),
        ({"a": {"shape": [8], "data_offsets": ["0", 2]}}, "data_offsets of 'a' must be"),
    ],
)
def test_malformed_safetensors_entries_are_config_errors(
    tmp_path: Path, header: dict, fragment: str
) -> None:
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(planner.ConfigError, match=fragment):
        from_tensors(local_headers(tmp_path) or (), 2, where=str(tmp_path))


def test_marlin_pads_gpt_oss_experts_below_compute_capability_9() -> None:
    # vLLM's Marlin MXFP4 MoE kernel (the backend below SM 9.0: quantization/mxfp4.py
    # 0.11.0:95-99) pads each rank's expert intermediate to a multiple of 128 and the hidden
    # size to one of 256 (0.11.0:189-200); kvplan's Hopper layout pads the intermediate to 256.
    from planner.weights import for_deployment
    from tests.helpers import deployment

    def weights(gpu: str, tp: int = 1) -> int:
        return for_deployment(deployment("gpt-oss-120b", gpu=gpu, tp=tp)).bytes_per_rank

    # TP 4: 720 -> 768 per rank either way; hidden 2,880 -> 3,072: + 1.01 GiB per rank.
    # dennislee22's 4 x A100 0.10.1.1 log (tests/data/vllm_startups.json) then comes within
    # 0.02 GiB, not 0.99.
    extra = 36 * 128 * 3 * 768 * (3072 - 2880) * (0.5 + 1 / 32)
    assert weights("a100-80gb", 4) - weights("h100", 4) == round(extra)
    # TP 1, gpt-oss-20b: 2,880 -> 2,944 (Marlin) against 3,072 (kvplan's Hopper layout)
    small = 24 * 32 * 3 * (2944 * 3072 - 3072 * 2880) * (0.5 + 1 / 32)
    dep = deployment("gpt-oss-20b", gpu="a100-80gb")
    hopper = deployment("gpt-oss-20b", gpu="h100")
    assert for_deployment(dep).bytes_per_rank - for_deployment(hopper).bytes_per_rank == round(
        small
    )


def test_a_stated_marlin_mxfp4_backend_pads_gpt_oss_on_hopper_too() -> None:
    # On Hopper the install decides: without triton_kernels (the 0.11.0 wheel neither ships nor
    # requires it) vLLM takes Marlin (quantization/mxfp4.py 0.11.0:94-99). TP 1, gpt-oss-120b:
    # 2,880 -> 2,944 x 3,072 (Marlin) against kvplan's 3,072 x 2,880: vllm#23278's Marlin H100
    # log "Model loading took 65.97 GiB" against 64.38 with Triton (CALIBRATION.md).
    from planner.weights import for_deployment
    from tests.helpers import deployment

    def weights(**flags: str) -> int:
        return for_deployment(deployment("gpt-oss-120b", gpu="h100", **flags)).bytes_per_rank

    extra = 36 * 128 * 3 * (2944 * 3072 - 3072 * 2880) * (0.5 + 1 / 32)
    assert weights(mxfp4_backend="marlin") - weights() == round(extra)
    assert weights(mxfp4_backend="triton") == weights()
    # below compute capability 9.0 Marlin is the only backend, whatever is stated
    a100 = for_deployment(deployment("gpt-oss-120b", gpu="a100-80gb", mxfp4_backend="triton"))
    assert (
        a100.bytes_per_rank
        == for_deployment(deployment("gpt-oss-120b", gpu="a100-80gb")).bytes_per_rank
    )


def test_vllms_rotary_cache_is_in_the_weights_it_measures() -> None:
    # vLLM's "Model loading took" holds the rotary cos/sin cache each GPU builds at model init:
    # (positions, rotary_dim) in the model dtype, one per distinct rope (rotary_embedding/
    # base.py 0.19.0:58-63). Public logs: Llama-3.1-8B loads 14.99 GiB where the checkpoint is
    # 16,060,522,496 B = 14.96 GiB (tests/data/vllm_startups.json, 20 logs); Qwen3-8B 15.27
    # where it is 15.26.
    from planner.weights import rotary_cache_bytes

    def cache(name: str) -> int:
        return rotary_cache_bytes(planner.load_model_spec(name))

    assert cache("llama-3.1-8b") == 131_072 * 128 * 2  # 32 MiB
    assert cache("qwen3-8b") == 40_960 * 128 * 2
    assert cache("llama-4-scout-17b-16e-instruct") == 10_485_760 * 128 * 2  # 2.5 GiB
    # MRoPE keeps 4 x the positions for a video's indices (mrope.py 0.19.0:236-242)
    assert cache("qwen3-vl-32b-instruct") == 4 * 262_144 * 128 * 2
    # YaRN: the original length x factor (yarn_scaling_rope.py 0.19.0:77-78): 4,096 x 32
    assert cache("gpt-oss-20b") == 4_096 * 32 * 64 * 2
    # Gemma 3: the global rope (linear, factor 8: linear_scaling_rope.py :86-91) and the
    # sliding layers' local one (gemma3.py 0.19.0:176-181)
    assert cache("gemma-3-27b-it") == (131_072 * 8 + 131_072) * 128 * 2
    # a family whose model file was not read (DeepSeek's YaRN may keep fp32): none claimed
    assert cache("deepseek-v3") == 0
    dep = Deployment(
        model=planner.load_model("llama-3.1-8b"), gpu=get_gpu("h100"), settings=ServeSettings()
    )
    w = planner.weights.for_deployment(dep)
    assert w.rotary_cache_bytes == 131_072 * 128 * 2
    assert w.bytes_per_rank == 16_060_522_496 + 131_072 * 128 * 2  # 14.99 GiB, as logged
