"""Byte sizes need a unit, and releases kvplan does not model are refused."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from tests.conftest import fixture_config

runner = CliRunner()


@pytest.mark.parametrize(
    ("flag", "value"), [("--gpu-memory", "24"), ("--kv-cache-memory", "10"), ("--headroom", "2")]
)
def test_bare_numbers_for_byte_sizes_are_refused(flag: str, value: str) -> None:
    # "--gpu-memory 24" was read as 24 bytes
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", flag, value])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: {flag} '{value}': add a unit (GiB, GB), e.g. {value}GiB; a bare number would "
        "be bytes"
    )


def test_sizes_with_a_unit_and_zero_are_taken() -> None:
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu-memory", "24GiB", "--headroom", "0", "--json"]
    )
    assert result.exit_code in (0, 1), result.stderr
    assert '"memory_bytes": 25769803776' in result.stdout  # 24 x 2^30


def test_releases_before_the_v1_engine_are_refused() -> None:
    # vllm_rules.RULES starts at 0.8.5, the V1 engine; 0.6.3 would print V1 lines for V0
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--vllm-version", "0.6.3"]
    )
    assert result.exit_code == 2
    assert "give --vllm-version 0.8.5 or newer" in result.stderr
    ok = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--vllm-version", "0.8.5", "--json"]
    )
    assert ok.exit_code in (0, 1), ok.stderr


def test_a_local_directory_is_served_by_its_path(tmp_path: Path) -> None:
    # "vllm serve my-llama" works only from the parent folder: the path, and the hub id
    folder = tmp_path / "my-llama"
    folder.mkdir()
    config = json.loads(fixture_config("Qwen--Qwen2.5-7B-Instruct").read_text())
    config["_name_or_path"] = "Qwen/Qwen2.5-7B-Instruct"
    (folder / "config.json").write_text(json.dumps(config))
    result = runner.invoke(
        app, ["estimate", str(folder), "--gpu", "h100", "--max-model-len", "8192", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    words = shlex.split(data["commands"]["vllm"])
    assert words[:3] == ["vllm", "serve", str(folder.resolve())]  # not the bare "my-llama"
    assert any("serve the hub id Qwen/Qwen2.5-7B-Instruct" in n for n in data["plan_notes"])


def test_transformers_naive_cache_is_checked_for_the_batch() -> None:
    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 x 2 B = 57,344 B/token; a contiguous
    # cache for 128 x 8,192 tokens is 128 x 8,192 x 57,344 B = 56 GiB, more than the L40S's
    # pool; the batch that fits is what the JSON's max_concurrency says
    args = ["estimate", "qwen2.5-7b", "--engine", "hf", "--gpu", "l40s", "--max-model-len"]
    big = runner.invoke(app, [*args, "8192", "--batch", "128", "--json"])
    assert big.exit_code == 1
    plan = json.loads(big.stdout)["engine_plan"]
    assert plan["outcome"] == "wont_start" and plan["max_running_requests"] == 128
    assert 128 * 8192 * 57344 > plan["available_kv_bytes"]
    assert "56.00 GiB" in big.stderr
    fits = int(plan["max_concurrency"])
    small = runner.invoke(app, [*args, "8192", "--batch", str(fits), "--json"])
    assert small.exit_code == 0
    assert json.loads(small.stdout)["engine_plan"]["outcome"] == "fits_at_worst_case"


def test_rejected_requests_are_counted_in_the_advice(tmp_path: Path) -> None:
    # 355 of 500 requests are 6,100 tokens, longer than --max-model-len 4,096: 71 %
    trace = tmp_path / "long.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"prompt_tokens": 6000 if i < 355 else 1000, "output_tokens": 100}) + "\n"
            for i in range(500)
        )
    )
    args = ["estimate", "qwen2.5-7b", "--gpu", "l40s", "--max-model-len", "4096", "-w", str(trace)]
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["workload"]["rejected"] == 355
    words = "355 of 500 requests (71 %) are longer than max_model_len 4,096"
    assert data["recommended"]["reason"].startswith(words)
    text = runner.invoke(app, args).stdout
    assert f"! {words}" in " ".join(text.split())
