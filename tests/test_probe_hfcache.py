"""The planner's --engine hf bytes against transformers' real cache, for every shared config.

Each supported config is built small in transformers (see probes/hfcache.py for what shrinks
and what is kept) and run with ``use_cache=True``; the planner sizes the same shrunk config.
Configs whose ``model_type`` transformers does not know are skipped with the reason.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from planner.cli import app  # noqa: E402
from planner.model.config import text_config_of  # noqa: E402
from probes.hfcache import (  # noqa: E402
    LONG_TOKENS,
    cross_check,
    cross_check_file,
    known_model_type,
    shrink_config,
)
from tests.conftest import all_fixture_folders, fixture_config  # noqa: E402

FOLDERS = all_fixture_folders()
# Layers with a sliding window or attention chunk (shrunk to 32 tokens, below the 48 run).
WINDOWED = [
    "google--gemma-2-9b-it",
    "google--gemma-3-1b-it",
    "google--medgemma-27b-it",
    "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "microsoft--Phi-3-mini-4k-instruct",
    "microsoft--Phi-3.5-mini-instruct",
    "mistralai--Mistral-7B-v0.1",
    "openai--gpt-oss-120b",
    "openai--gpt-oss-20b",
]


def text_of(folder: str) -> dict:
    return text_config_of(json.loads(fixture_config(folder).read_text()))


@pytest.fixture(scope="module")
def checks() -> dict:
    """One cross-check per supported config, shared by the tests below."""
    return {
        folder: cross_check_file(fixture_config(folder), folder)
        for folder in FOLDERS
        if known_model_type(str(text_of(folder).get("model_type")))
    }


@pytest.mark.slow  # the module fixture builds every config's transformers cache: ~14 s
@pytest.mark.parametrize("folder", FOLDERS)
def test_planner_matches_transformers_cache(folder: str, checks: dict) -> None:
    if folder not in checks:
        mt = text_of(folder).get("model_type")
        pytest.skip(f"this transformers has no built-in model_type {mt!r} (remote code only)")
    check = checks[folder]
    assert check.status == "ok", "; ".join(check.mismatches) or check.reason
    assert check.measured_bytes_per_token == check.predicted_bytes_per_token


def test_skipped_configs_are_the_remote_code_ones() -> None:
    skipped = {f for f in FOLDERS if not known_model_type(str(text_of(f).get("model_type")))}
    assert skipped == {
        "THUDM--chatglm3-6b",  # chatglm
        "internlm--internlm2-chat-7b",  # internlm2
        "moonshotai--Kimi-K2-Instruct",  # kimi_k2
        "tiiuae--falcon-40b",  # RefinedWeb (the old remote-code name of falcon)
    }


@pytest.mark.slow
@pytest.mark.parametrize("folder", WINDOWED)
@pytest.mark.xfail(
    strict=True,
    reason="transformers' DynamicSlidingWindowLayer stores cat(past, new)[:, :, -(W-1):], a "
    "view that pins the whole prompt after a prefill longer than the window (the planner "
    "sizes the W-1 tokens the cache keeps; the memory held is the full prompt until the "
    "next update, then W tokens per layer)",
)
def test_planner_matches_storage_after_long_prefill(folder: str, checks: dict) -> None:
    check = checks[folder]
    predicted = check.predicted_bytes_per_sequence[LONG_TOKENS]
    assert check.measured_storage_bytes[LONG_TOKENS] == predicted


@pytest.mark.slow
def test_sliding_window_storage_holds_the_whole_prompt(checks: dict) -> None:
    # Mistral-7B-v0.1 shrunk to 1 layer, window 32: 8 KV heads x 128 x 2 x 2 B = 4,096 B per
    # token. The cache keeps W - 1 = 31 tokens (126,976 B) but pins all 48 (196,608 B).
    check = checks["mistralai--Mistral-7B-v0.1"]
    assert check.predicted_bytes_per_token == 4_096
    assert check.measured_tensor_bytes[LONG_TOKENS] == 31 * 4_096 == 126_976
    assert check.measured_storage_bytes[LONG_TOKENS] == 48 * 4_096 == 196_608


def test_shrinking_keeps_the_cache_geometry() -> None:
    # Llama-3.1-405B: 126 layers, hidden 16,384, 128 heads / 8 KV heads of 128 -> 1 layer,
    # hidden 256 with head_dim 128 written out; KV heads and head size unchanged.
    small, changed = shrink_config(text_of("meta-llama--Llama-3.1-405B"), "405b")
    assert small["num_hidden_layers"] == 1 and small["hidden_size"] == 256
    assert (small["num_key_value_heads"], small["head_dim"]) == (8, 128)
    assert small["num_attention_heads"] == 128
    assert changed["hidden_size"] == (16_384, 256)
    # Gemma 3: one full period of 5 sliding + 1 full layers
    assert shrink_config(text_of("google--gemma-3-1b-it"), "g")[0]["num_hidden_layers"] == 6
    # Falcon-180B derives head_dim from hidden: KV heads 8 and head 64 kept, queries 232 -> 16
    falcon, _ = shrink_config(text_of("tiiuae--falcon-180B-chat"), "f")
    assert (falcon["num_kv_heads"], falcon["num_attention_heads"], falcon["hidden_size"]) == (
        8,
        16,
        1024,
    )


def test_unknown_model_type_is_skipped_with_reason() -> None:
    check = cross_check({"model_type": "chatglm", "num_layers": 2}, name="glm")
    assert check.status == "skipped" and "remote code" in check.reason


def test_cli_hf_cache() -> None:
    result = runner_invoke(["verify", "mistral-7b-v0.1", "--hf-cache"])
    assert result.exit_code == 0, result.stderr
    assert "OK" in result.stdout and "pin 196,608 B of storage" in result.stdout
    data = json.loads(runner_invoke(["verify", "qwen3-0.6b", "--hf-cache", "--json"]).stdout)
    assert data["status"] == "ok" and data["predicted_bytes_per_token"] == 4_096


def runner_invoke(args: list[str]):
    return CliRunner().invoke(app, args)
