"""CLI output: the JSON contract, the human view, and `kvplan models`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from planner.cli import app
from tests.conftest import fixture_config

runner = CliRunner()

CONTRACT = {
    "model": str,
    "engine": str,
    "kv_cache_dtype": str,
    "kv_dtype_bytes": int,
    "tensor_parallel_size": int,
    "pipeline_parallel_size": int,
    "block_size": int,
    "max_model_len": int,
    "kv_bytes_per_token": int,
    "state_bytes_per_sequence": int,
    "kv_bytes_per_sequence": int,
    "layer_groups": list,
}


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["estimate", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_json_contract_keys_and_integer_bytes() -> None:
    data = run_json(
        "Qwen/Qwen3-8B", "--tp", "2", "--kv-cache-dtype", "fp8", "--max-model-len", "32768"
    )
    for key, kind in CONTRACT.items():
        assert isinstance(data[key], kind), key
    # 36 layers x (8 / 2) kv x 2 x 128 x 1 B = 36,864; 32,768 tokens = 2,048 full blocks.
    assert data["kv_bytes_per_token"] == 36_864
    assert data["kv_bytes_per_sequence"] == 36_864 * 32_768
    assert data["kv_cache_dtype"] == "fp8" and data["kv_dtype_bytes"] == 1
    assert data["tensor_parallel_size"] == 2 and data["block_size"] == 16
    assert data["layer_groups"] == [
        {
            "kind": "full",
            "num_layers": 36,
            "bytes_per_token": 1_024,
            "window": None,
            "state_bytes_per_sequence": 0,
        }
    ]


def test_json_is_deterministic() -> None:
    first = runner.invoke(app, ["estimate", "gemma-2-9b", "--json"]).stdout
    assert first == runner.invoke(app, ["estimate", "gemma-2-9b", "--json"]).stdout


def test_every_human_number_is_in_json() -> None:
    human = runner.invoke(app, ["estimate", "gpt-oss-20b"]).stdout
    data = run_json("gpt-oss-20b")
    for value in (
        data["kv_bytes_per_token"],
        data["kv_bytes_per_sequence"],
        data["vllm"]["bytes_per_block"],
        data["examples"][1]["total_bytes"],
    ):
        assert f"{value:,}" in human


def test_human_view_names_units_and_kinds() -> None:
    result = runner.invoke(app, ["estimate", "gemma-2-9b"])
    assert result.exit_code == 0
    out = result.stdout
    assert "GQA + sliding" in out
    assert "GiB" in out and "2^30" in out
    assert "sliding (W=4,096)" in out


def test_local_config_path(tmp_path) -> None:
    data = run_json(str(fixture_config("google--gemma-3-1b-it")))
    # 26 layers x 1 kv x 2 x 256 x 2 B = 26,624 B/token
    assert data["kv_bytes_per_token"] == 26_624
    assert data["source"].endswith("config.json")


def test_engine_flag_changes_layout() -> None:
    assert run_json("llama-3.1-8b", "--engine", "trtllm")["block_size"] == 32
    sglang = run_json("llama-3.1-8b", "--engine", "sglang")
    assert sglang["block_size"] == 1 and sglang["vllm"] is None


def test_warning_goes_to_stderr_and_json_stays_clean() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--max-model-len", "200000", "--json"])
    assert result.exit_code == 0
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in result.stderr
    assert json.loads(result.stdout)["max_model_len"] == 200_000


def test_models_lists_the_catalog() -> None:
    result = runner.invoke(app, ["models", "--json"])
    rows = json.loads(result.stdout)
    assert len(rows) >= 40
    by_name = {r["name"]: r for r in rows}
    # DeepSeek-V3: 61 x 576 x 2 = 70,272; Llama-3.1-8B: 32 x 8 x 256 x 2 = 131,072
    assert by_name["deepseek-v3"]["kv_bytes_per_token"] == 70_272
    assert by_name["llama-3.1-8b"]["kv_bytes_per_token"] == 131_072
    assert by_name["llama-3.1-8b"]["num_kv_heads"] == 8
    assert "full" in by_name["llama-3.1-8b"]["kinds"]
    table = runner.invoke(app, ["models"]).stdout
    assert "llama-3.1-8b" in table and "131,072" in table


@pytest.mark.parametrize("args", [["--help"], ["estimate", "--help"], ["models", "--help"]])
def test_help(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0
    assert "Usage" in result.stdout


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from planner.cli import app; "
        "assert not {'torch', 'transformers', 'huggingface_hub'} & set(sys.modules), "
        "sorted({'torch', 'transformers', 'huggingface_hub'} & set(sys.modules))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_memory_bar_never_outgrows_its_width() -> None:
    # 100 GiB of headroom on an 80 GiB GPU: the parts add up to more than the GPU, and the bar
    # used to grow with them (to a MemoryError at --headroom 10^25).
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--headroom", "100GiB"]
    )
    assert result.exit_code == 1, result.stderr  # nothing is left for KV: it won't start
    assert "✗ Won't start" in result.stdout
    [bar] = [line for line in result.stdout.splitlines() if line.startswith("  [")]
    assert len(bar) == len("  [") + 64 + len("]")


def test_json_never_prints_nan_or_infinity() -> None:
    from planner.render._output import to_json

    text = to_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": (float("-inf"),)})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": [None]}


@pytest.mark.parametrize("command", ["estimate", "simulate", "diagnose", "verify"])
def test_max_model_len_help_names_the_auto_fit(command: str) -> None:
    # vLLM's --max-model-len -1 fits the longest context the pool holds; each command takes it
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "-1 is vLLM's auto-fit: the longest that fits the KV pool" in text
