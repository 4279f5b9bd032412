"""Every command as users see it piped at 80 columns with NO_COLOR: the
names users type and the numbers from ``--json`` appear whole, nothing is cut with an
ellipsis, and a row can be found with grep."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
NARROW = {"COLUMNS": "80", "NO_COLOR": "1"}


def text_of(args: list[str]) -> str:
    result = runner.invoke(app, args, env=NARROW)
    assert result.exit_code in (0, 1), result.stderr
    assert "…" not in result.stdout  # nothing cut
    return result.stdout


def json_of(args: list[str]) -> object:
    return json.loads(runner.invoke(app, [*args, "--json"]).stdout)


def test_models_names_are_whole_and_greppable() -> None:
    out = text_of(["models"])
    rows = json_of(["models"])
    assert isinstance(rows, list) and rows
    lines = out.splitlines()
    for row in rows:
        # `kvplan models | grep qwen2.5-7b-instruct` finds the row, name first and whole
        hits = [line for line in lines if line.split() and line.split()[0] == row["name"]]
        assert hits, row["name"]
        assert f"{row['kv_bytes_per_token']:,}" in hits[0].split()
    assert max(len(line) for line in lines) <= 80


def test_gpus_names_and_byte_counts_are_whole() -> None:
    out = text_of(["gpus"])
    rows = json_of(["gpus"])
    assert isinstance(rows, list)
    lines = out.splitlines()
    for row in rows:
        [line] = [line for line in lines if line.split() and line.split()[0] == row["name"]]
        assert f"{row['memory_bytes']:,}" in line.split()
    assert max(len(line) for line in lines) <= 80
    assert "not shown at this width: FP8 dense, arch, link, source" in out  # named


def test_check_rows_are_greppable_by_deployment_name() -> None:
    out = text_of(["check", "examples/plans.yaml"])
    data = json_of(["check", "examples/plans.yaml"])
    assert isinstance(data, dict)
    table = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL", "ERROR"))]
    for dep in data["deployments"]:
        [row] = [line for line in table if dep["name"] in line.split()]
        assert dep["model"] in row.split() and dep["gpu"] in row.split()


def test_estimate_without_a_gpu_shows_numbers_not_prose() -> None:
    out = text_of(["estimate", "llama-3.1-8b"])
    data = json_of(["estimate", "llama-3.1-8b"])
    assert isinstance(data, dict)
    for row in data["gpus"]:
        [line] = [line for line in out.splitlines() if line.split()[:1] == [row["name"]]]
        assert f"{row['kv_cache_size_tokens']:,}" in line.split()
    assert "does not fit" not in out


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "qwen2.5-7b", "--gpu", "rtx-4090", "--max-model-len", "8192"],
        ["estimate", "llama-3.1-8b", "--gpu", "l4"],
        ["estimate", "qwen3-next-80b-a3b-thinking", "--gpu", "h200", "--tp", "2"],
        # issues 15 and 16: a cluster, its layouts and node commands, LoRA, a vision model
        ["estimate", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--gpus", "8"],
        [
            "estimate",
            "deepseek-v3",
            "--gpu",
            "h200",
            "--dp",
            "16",
            "--enable-expert-parallel",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":1}',
        ],
        [
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--max-model-len",
            "8192",
            "--enable-lora",
            "--max-loras",
            "4",
            "--max-lora-rank",
            "64",
            "--kv-offloading-size",
            "64",
        ],
        ["estimate", "qwen2.5-vl-7b", "--gpu", "h100", "--max-model-len", "32768"],
    ],
)
def test_estimate_plan_numbers_are_whole(args: list[str]) -> None:
    out = text_of(args)
    data = json_of(args)
    assert isinstance(data, dict)
    words = out.replace(",", " , ").split()  # "tokens," -> "tokens ,"
    assert f"{data['num_gpu_blocks']:,}" in out
    assert f"{data['num_gpu_blocks']:,}".split(",")[0] in words
    assert data["gpu"]["name"] in out
    vllm_command = data["commands"]["vllm"]
    # the command is wrapped with shell continuations: every flag and value is there whole
    joined = out.replace(" \\\n", " ")
    for token in vllm_command.split():
        assert token in joined
    if data["data_parallel_size"] > 1:
        assert f"{data['cluster']['kv_cache_size_tokens']:,}" in out
    for row in data["layouts"] or []:
        assert f"{row['cluster_kv_cache_size_tokens']:,}" in out.split()
    for command in data["node_commands"] or []:
        for token in command.split():
            assert token in joined


@pytest.mark.parametrize(
    "args",
    [
        [
            "simulate",
            "llama-3.1-8b",
            "--gpu",
            "a10g",
            "--workload",
            "examples/workloads/chat.yaml",
            "--block-size",
            "8,16,32",
            "--max-model-len",
            "8192",
            "--num-requests",
            "200",
        ],
        ["diagnose", "tests/fixtures/logs/vllm-v1-llama8b-h100.log", "--gpu", "h100"],
    ],
)
def test_simulate_and_diagnose_cut_nothing(args: list[str]) -> None:
    out = text_of(args)  # asserts no ellipsis
    data = json_of(args)
    assert isinstance(data, dict)
    if args[0] == "simulate":
        for run in data["runs"]:
            assert run["label"].split("=")[1] in out  # block-size=8 -> "8" in the table
            assert f"{run['num_gpu_blocks']:,}" in out
    else:
        words = {
            "wont_start": "won't start",
            "queues_at_worst_case": "queues at worst case",
            "fits_at_worst_case": "fits at worst case",
        }[data["outcome"]]
        assert words in " ".join(out.split())
        for term in data["terms"]:
            assert term["name"] in out
