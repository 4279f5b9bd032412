"""Every shared config loads; the catalog resolves forgiving names offline and matches the
full configs; nested text configs and layer-kind rules follow vLLM."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import planner
from planner.model import catalog
from tests.conftest import all_fixture_folders, fixture_config

FOLDERS = all_fixture_folders()
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def test_fixtures_cover_the_shared_configs() -> None:
    assert len(FOLDERS) >= 50


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_shared_config_loads_and_estimates(folder: str) -> None:
    spec = planner.load_model_spec(str(fixture_config(folder)))
    assert spec.num_layers == len(spec.layers) > 0
    assert spec.attention_layers or spec.state_layers
    est = planner.estimate(spec)
    assert est.kv_bytes_per_token > 0 or est.state_bytes_per_sequence > 0


def _comparable(spec: planner.ModelSpec) -> planner.ModelSpec:
    return replace(spec, name="", source="", notes=(), config={})


@pytest.mark.parametrize("folder", FOLDERS)
def test_catalog_entry_matches_full_config(folder: str) -> None:
    """The trimmed catalog copy must parse to exactly the spec of the full config."""
    hub_id = folder.replace("--", "/", 1)
    entry = catalog.lookup(hub_id)
    assert entry is not None, f"{hub_id} missing from the catalog"
    full = planner.load_model_spec(str(fixture_config(folder)))
    from_catalog = planner.load_model_spec(hub_id)
    assert from_catalog.source == f"catalog: {entry.name}"
    assert _comparable(from_catalog) == _comparable(full)


def test_catalog_has_at_least_40_models_with_provenance() -> None:
    entries = catalog.entries()
    assert len(entries) >= 40
    assert all("config.json via github.com/" in e.provenance for e in entries)
    assert len({e.name for e in entries}) == len(entries)


@pytest.mark.parametrize(
    "name", ["llama-3.1-8b", "Llama-3.1-8B", "meta-llama/Llama-3.1-8B", " LLAMA-3.1-8B "]
)
def test_catalog_names_are_forgiving(name: str) -> None:
    spec = planner.load_model_spec(name)
    assert spec.name == "meta-llama/Llama-3.1-8B"
    assert spec.num_layers == 32


@pytest.mark.parametrize(
    ("alias", "hub_id"),
    [
        ("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
        ("gemma-2-9b", "google/gemma-2-9b-it"),
        ("mistral-7b-v0.3", "mistralai/Mistral-7B-Instruct-v0.3"),
        ("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite"),
    ],
)
def test_catalog_aliases(alias: str, hub_id: str) -> None:
    assert planner.load_model_spec(alias).name == hub_id


def test_alias_never_shadows_another_model() -> None:
    # llama-3.2-1b is a model of its own; its -instruct sibling must not take the name.
    assert planner.load_model_spec("llama-3.2-1b").name == "meta-llama/Llama-3.2-1B"


def test_local_dir_and_file_load_the_same(tmp_path: Path) -> None:
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    shutil.copy(fixture_config("Qwen--Qwen3-8B"), model_dir / "config.json")
    from_dir = planner.load_model_spec(str(model_dir))
    from_file = planner.load_model_spec(str(model_dir / "config.json"))
    assert _comparable(from_dir) == _comparable(from_file)
    assert from_dir.source == str(model_dir / "config.json")


def test_nested_text_config_with_outer_dtype() -> None:
    # medgemma-27b: layers live in text_config; torch_dtype at the top level.
    spec = planner.load_model_spec(str(fixture_config("google--medgemma-27b-it")))
    assert spec.model_type == "gemma3_text"
    assert spec.num_layers == 62 and spec.head_dim == 128
    assert spec.dtype == "bfloat16"
    assert [s.kind for s in spec.layers].count("full") == 10


def test_gemma3_pattern_from_sliding_window_pattern() -> None:
    # gemma-3-1b: 26 layers, sliding_window_pattern 6 -> layers 5, 11, 17, 23 full.
    spec = planner.load_model_spec(str(fixture_config("google--gemma-3-1b-it")))
    assert [i for i, s in enumerate(spec.layers) if s.kind == "full"] == [5, 11, 17, 23]


def test_qwen2_sliding_only_when_enabled() -> None:
    raw = json.loads(fixture_config("Qwen--Qwen2.5-7B-Instruct").read_text())
    assert {s.kind for s in planner.parse_config(raw, name="q", source="t").layers} == {"full"}
    # use_sliding_window on: layers >= max_window_layers slide (HF Qwen2Config.layer_types).
    raw.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    kinds = [s.kind for s in planner.parse_config(raw, name="q", source="t").layers]
    assert kinds == ["full"] * 20 + ["sliding"] * 8


def test_deepseek_head_dim_is_the_latent() -> None:
    spec = planner.load_model_spec("deepseek-v3")
    assert spec.head_dim == 576  # kv_lora_rank 512 + qk_rope_head_dim 64
    assert spec.num_kv_heads == 1


def test_nemotron_pattern_marks_mlp_layers_without_cache() -> None:
    spec = planner.load_model_spec("nemotron-h-56b")
    pattern = spec.config["hybrid_override_pattern"]
    assert [s is None for s in spec.layers] == [c == "-" for c in pattern]
    assert sum(s.kind == "full" for s in spec.layers if s) == pattern.count("*") == 10


def test_phi35_longrope_defaults_to_original_length() -> None:
    # vLLM: LongRoPE models default to original_max_position_embeddings (4096).
    assert planner.load_model_spec("phi-3.5-mini").max_model_len == 4096


def test_llama31_rope_llama3_factor_not_applied() -> None:
    assert planner.load_model_spec("llama-3.1-8b").max_model_len == 131_072


def test_linear_rope_factor_multiplies() -> None:
    raw = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "hidden_size": 256,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "linear", "factor": 4.0},
    }
    assert planner.parse_config(raw, name="x", source="t").max_model_len == 16_384


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed")
def test_unknown_to_kvplan_type_takes_transformers_defaults() -> None:
    # cohere2 is not in KNOWN_DEFAULTS: transformers' Cohere2Config supplies sliding_window
    # 4096; the pattern (every 4th layer global) is the Cohere2 rule.
    raw = {
        "model_type": "cohere2",
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 1024,
        "max_position_embeddings": 8192,
    }
    spec = planner.parse_config(raw, name="c", source="t")
    assert [s.kind for s in spec.layers] == ["sliding"] * 3 + ["full"] + ["sliding"] * 3 + ["full"]
    assert spec.layers[0].window == 4096
    assert any("transformers defaults used for: sliding_window" in n for n in spec.notes)


def test_remote_code_config_is_read_as_data(tmp_path: Path) -> None:
    # A config with auto_map pointing at a module that would write a file if imported.
    marker = tmp_path / "pwned"
    (tmp_path / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    raw = json.loads(fixture_config("meta-llama--Llama-3.1-8B").read_text())
    raw.update(model_type="evil_custom", auto_map={"AutoConfig": "configuration_evil.EvilConfig"})
    (tmp_path / "config.json").write_text(json.dumps(raw))
    spec = planner.load_model_spec(str(tmp_path))
    assert planner.estimate(spec).kv_bytes_per_token == 131_072
    assert not marker.exists()


def test_catalog_and_raw_json_need_no_transformers() -> None:
    code = (
        "import sys, planner; "
        f"planner.estimate(planner.load_model_spec({str(fixture_config('Qwen--Qwen3-8B'))!r})); "
        "planner.estimate(planner.load_model_spec('gemma-2-9b')); "
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
