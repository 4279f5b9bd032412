"""Advice from traffic (``estimate -w`` / ``--avg-prompt-tokens``), the recommendation's basis,
``--engine sglang|trtllm`` with a GPU, and prefix sharing stated as requests running at once.

Expected values come from arithmetic in each test."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.plan_types import Plan
from planner.simulate.workload import Request, Workload
from tests.helpers import GUIDE_ARGS, guide_plan, guide_pool_blocks, parse_command, plan_for

runner = CliRunner()
GIB, MIB = 1 << 30, 1 << 20
# Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B per token, so a
# 16-token block is 2 MiB. A 202 MiB pool is 101 blocks: 100 usable, vLLM's null block aside.
POOL = 101 * 2 * MIB


def uniform(n: int, prompt: int, output: int) -> Workload:
    return Workload(
        name="uniform", source="test", requests=tuple(Request(prompt, output) for _ in range(n))
    )


def small_pool(**kwargs: object) -> Plan:
    """Llama-3.1-8B on the 101-block pool, max_model_len 1,024, an 8,192-token step budget."""
    return plan_for(
        "llama-3.1-8b",
        None,
        kv_cache_memory_bytes=POOL,
        max_model_len=1024,
        max_num_batched_tokens=8192,
        **kwargs,
    )


def test_the_largest_max_num_seqs_under_the_target_with_no_preemptions() -> None:
    # 40 identical requests, 100 prompt + 28 output tokens: each holds 7 blocks (100 tokens)
    # at admission and 8 (up to 127 tokens) at the end, and all of a wave grow together.
    # Peak = 8 x max_num_seqs of 100 usable blocks: 11 -> 88 % (under 90 %), 12 -> 96 %
    # (over the target, no preemption yet), 13 -> 104 blocks: preempts.
    p = small_pool(max_num_seqs=64, workload=uniform(40, 100, 28))
    assert p.vllm.num_gpu_blocks == 101
    rec, advice = p.recommended, p.advice
    assert rec is not None and advice is not None
    assert (rec.basis, rec.max_num_seqs) == ("workload", 11)
    assert (rec.preemptions, rec.usage_max) == (0, 0.88)
    assert advice.next_up is not None
    assert (advice.next_up.max_num_seqs, advice.next_up.usage_max) == (12, 0.96)
    # the user's 64: all 40 admitted (7 blocks each would be 280), so the pool runs out
    assert advice.yours.max_num_seqs == 64 and advice.yours.preemptions > 0
    # an explicit pool is never resized
    assert rec.gpu_memory_utilization == p.vllm.gpu_memory_utilization
    assert "--max-num-seqs 11" in p.commands["vllm"]


def test_a_lower_target_gives_fewer_sequences() -> None:
    # target 80 %: 8 x 10 = 80 blocks is the most (8 x 11 = 88 > 80)
    p = small_pool(workload=uniform(40, 100, 28), target_kv_usage=0.8)
    assert p.recommended is not None and p.recommended.max_num_seqs == 10


def test_an_under_used_pool_gets_a_lower_utilisation_that_puts_p90_in_band() -> None:
    # Llama-3.1-8B on an H100 (a pool of ~28,000 2-MiB blocks at 0.92): 100 requests of
    # 2,000 tokens hold 125 blocks each, 12,500 in all, under half the pool, so every
    # max_num_seqs up to vLLM's default (1,024) passes and the pool is what is oversized.
    # One 0.01 step of the H100 is ~405 blocks, finer than the 80-90 % band (~1,500 blocks).
    w = uniform(100, 1900, 100)
    p = plan_for("llama-3.1-8b", "h100", max_model_len=4096, workload=w)
    rec = p.recommended
    assert rec is not None and rec.basis == "workload"
    assert rec.max_num_seqs == 1024
    assert rec.gpu_memory_utilization < 0.92
    assert rec.preemptions == 0 and rec.usage_p90 is not None and rec.usage_max is not None
    assert 0.8 <= rec.usage_p90 <= 0.9 and rec.usage_max <= 0.9
    # one step (0.01) lower and the replay breaks the band or the target
    lower = plan_for(
        "llama-3.1-8b",
        "h100",
        max_model_len=4096,
        gpu_memory_utilization=round(rec.gpu_memory_utilization - 0.01, 2),
        workload=w,
    )
    assert lower.advice is not None
    y = lower.advice.yours
    assert y.preemptions > 0 or y.usage_p90 > 0.9 or y.usage_max > 0.9


def test_estimate_json_with_a_workload_file() -> None:
    result = runner.invoke(
        app,
        [
            *GUIDE_ARGS,
            "--max-model-len",
            "8192",
            "--max-num-seqs",
            "32",
            "-w",
            "examples/workloads/chat.yaml",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    rec, work = data["recommended"], data["workload"]
    assert rec["basis"] == "workload"
    assert rec["preemptions"] == 0 and rec["usage_max"] <= 0.9
    assert work["recommended"]["max_num_seqs"] == rec["max_num_seqs"]
    assert work["yours"]["max_num_seqs"] == 32
    # the chat trace holds far less than max_model_len per request: more than the worst
    # case's 15 requests (7,687 usable blocks // 512, tests/helpers.guide_pool_blocks(32))
    # run within 90 % of the pool
    assert rec["max_num_seqs"] > data["worst_case_running"] == 15
    assert parse_command(data["commands"]["vllm"])["max-num-seqs"] == str(rec["max_num_seqs"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--avg-prompt-tokens", "500"], "together"),
        (["--worst-case", "--avg-prompt-tokens", "5", "--avg-output-tokens", "5"], "--worst"),
        (["--avg-prompt-tokens", "0", "--avg-output-tokens", "5"], "--avg-prompt-tokens"),
        (["--target-kv-usage", "1.5"], "--target-kv-usage"),
    ],
)
def test_traffic_flags_are_checked(flags: list[str], message: str) -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "h100", *flags])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.startswith("Error: ")


def test_averages_make_a_workload() -> None:
    result = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--max-model-len",
            "8192",
            "--avg-prompt-tokens",
            "1000",
            "--avg-output-tokens",
            "250",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["recommended"]["basis"] == "workload"
    assert data["workload"]["requests"] == 1000
    assert data["workload"]["source"] == "--avg-prompt-tokens/--avg-output-tokens"


def test_worst_case_basis() -> None:
    # Qwen2.5-7B, 24 GiB, gmu 0.9: 7,477 usable blocks (tests/helpers.guide_pool_blocks(256)
    # less the null block), 512 per 8,192-token request: 0.9 x 7,477 // 512 = 13 all fit
    p = guide_plan(
        max_model_len=8192,
        worst_case=True,
    )
    assert p.recommended is not None
    assert guide_pool_blocks(256) - 1 == 7_477
    assert (p.recommended.basis, p.recommended.max_num_seqs) == ("worst_case", 13)
    assert p.recommended.worst_case_running == 13


def test_prefix_sharing_is_stated_as_requests_running_at_once() -> None:
    # 800 shared tokens = 50 blocks of 16. Without sharing 7,477 // 512 = 14 requests of
    # 8,192 tokens fit; with it the first holds 512 blocks and each other 512 - 50 = 462:
    # 1 + (7,477 - 512) // 462 = 16.
    p = guide_plan(
        max_model_len=8192,
        shared_prefix_tokens=800,
        requests=100,
    )
    ps = p.prefix_sharing
    assert ps is not None
    assert (ps.blocks_saved, ps.running_without, ps.running_with) == (99 * 50, 14, 16)
    result = runner.invoke(
        app,
        [
            *GUIDE_ARGS,
            "--max-model-len",
            "8192",
            "--shared-prefix",
            "800",
        ],
        env={"COLUMNS": "80", "NO_COLOR": "1"},
    )
    text = " ".join(result.stdout.split())
    assert "with it 16 requests of 8,192 tokens run at once instead of 14" in text


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_other_engine_with_a_gpu_is_planned_on_that_gpu(engine: str) -> None:
    args = ["estimate", "qwen2.5-7b-instruct", "--gpu", "h100", "--max-model-len", "8192"]
    result = runner.invoke(app, [*args, "--engine", engine, "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    mine = data["engine_plan"]
    assert mine["engine"] == engine and mine["outcome"] != "wont_start"
    # the same figures as that engine's row of vLLM's comparison table
    row = next(e for e in data["engines"] if e["engine"] == engine)
    assert mine["max_total_tokens"] == row["max_total_tokens"]
    assert mine["command"] == data["commands"][engine]
    assert data["gpu"]["name"] == "h100"  # the GPU is not dropped
    text = runner.invoke(app, [*args, "--engine", engine], env={"COLUMNS": "80"}).stdout
    name = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}[engine]
    assert text.splitlines()[0].startswith(f"Qwen/Qwen2.5-7B-Instruct on h100 (79.18 GiB), {name}")
    assert "vLLM on the same GPU, for comparison:" in text


def test_another_engine_that_wont_start_exits_1_after_its_plan() -> None:
    # SGLang on an L4: its pool holds far fewer than the 131,072 tokens of one request
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "l4", "--engine", "sglang", "--json"]
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["engine_plan"]["outcome"] == "wont_start"
    assert data["engine_plan"]["max_total_tokens"] < 131_072
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "Error: meta-llama/Llama-3.1-8B won't start with these settings (sglang): "
    )
