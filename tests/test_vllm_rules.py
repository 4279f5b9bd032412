"""vLLM's budget per release and entrypoint (issue 12): the sampler warm-up as the activation
peak, CUDA graphs from the captured sizes, the rules that moved between releases, and the
spread of the estimated terms. Expected values are arithmetic shown here or vLLM's sources."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner import load_model_spec
from planner.budget import (
    activation_peak_bytes,
    cuda_graph_estimate_bytes,
    cuda_graph_sizes,
    estimate_ranges,
)
from planner.cli import app
from planner.errors import UsageError
from planner.vllm_rules import parse_version, rules_for
from tests.helpers import deployment, plan_for

runner = CliRunner()
GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("0.10.1.1", (0, 10, 1, 1)),
        ("v0.33.0", (0, 33, 0)),
        ("0.11.0rc2", (0, 11, 0)),
        ("0.6.6.post1", (0, 6, 6)),
        ("0.11.0+582e4e37.nv25.11", (0, 11, 0)),
    ],
)
def test_versions_parse(text: str, parsed: tuple[int, ...]) -> None:
    assert parse_version(text) == parsed


def test_a_non_version_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not a vLLM version"):
        parse_version("latest")
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--vllm-version", "banana"])
    assert result.exit_code == 2 and result.stderr.startswith("Error: ")


@pytest.mark.parametrize(
    ("version", "gmu", "graphs", "one_line"),
    [
        # vllm/config/cache.py: 0.9 through 0.19.1, 0.92 from 0.20.0; envs.py
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "1" from 0.20.0; one log line from 0.28.0
        ("0.10.1.1", 0.9, False, False),
        ("0.19.1", 0.9, False, False),
        ("0.20.0", 0.92, True, False),
        ("0.27.0", 0.92, True, False),
        ("0.28.0", 0.92, True, True),
        (None, 0.92, True, True),
    ],
)
def test_the_rules_move_with_the_release(
    version: str | None, gmu: float, graphs: bool, one_line: bool
) -> None:
    rules = rules_for(version)
    assert (rules.default_gmu, rules.subtracts_cuda_graphs, rules.one_line_capacity_log) == (
        gmu,
        graphs,
        one_line,
    )
    p = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, vllm_version=version)
    assert p.vllm.gpu_memory_utilization == gmu
    assert (p.vllm.cuda_graph_bytes > 0) is graphs
    assert len(p.vllm.log_lines) == (2 if one_line else 3)


def test_batch_defaults_follow_the_entrypoint_and_the_release() -> None:
    # EngineArgs.get_batch_defaults (0.33): an H100 gets 8,192 / 1,024 under vllm serve and
    # 16,384 / 1,024 in the LLM class; a 24 GiB card 2,048 / 256 and 8,192 / 256
    for gpu, entrypoint, expected in [
        ("h100", "serve", (8192, 1024)),
        ("h100", "llm", (16384, 1024)),
        ("rtx-4090", "serve", (2048, 256)),
        ("rtx-4090", "llm", (8192, 256)),
        # the >= 160 GiB tier from 0.28.0; before it a B200 took the >= 70 GiB defaults
        ("b200", "serve", (16384, 1024)),
    ]:
        p = plan_for("llama-3.1-8b", gpu, max_model_len=16_000, entrypoint=entrypoint)
        assert (p.vllm.max_num_batched_tokens, p.vllm.max_num_seqs) == expected, gpu
    old = plan_for("llama-3.1-8b", "b200", max_model_len=16_000, vllm_version="0.27.0")
    assert (old.vllm.max_num_batched_tokens, old.vllm.max_num_seqs) == (8192, 1024)
    # A100s kept the small defaults from 0.9.0 (PR #17885); 0.8.5 gave an A100-80GB the large
    a100 = plan_for("llama-3.1-8b", "a100-80gb", max_model_len=16_000, vllm_version="0.8.5")
    assert (a100.vllm.max_num_batched_tokens, a100.vllm.max_num_seqs) == (8192, 1024)


def test_the_activation_peak_is_the_sampler_warm_up() -> None:
    spec = load_model_spec("llama-3.1-8b")  # vocab 128,256, hidden 4,096
    # vllm serve on an H100: 8,192 tokens, 1,024 rows -> CALIBRATION.md's measured 4.76 GiB
    serve = activation_peak_bytes(spec, 8192, 1024)
    assert serve == 1024 * 128_256 * 4 * 9515 // 1000 + 8192 * 4096 * 2553 // 1000 + 27_100_000
    assert round(serve / GIB, 2) == 4.76
    # the rows are min(tokens, max_num_seqs): the LLM class on a small GPU (8,192 / 256) costs
    # a quarter of the sampler term, not four times vllm serve's
    llm = activation_peak_bytes(spec, 8192, 256)
    assert llm == 256 * 128_256 * 4 * 9515 // 1000 + 8192 * 4096 * 2553 // 1000 + 27_100_000
    assert llm < serve / 3
    # a small max_num_seqs shrinks it again; a pooling runner has no sampler at all
    assert activation_peak_bytes(spec, 2048, 8) < GIB // 10
    pooling = activation_peak_bytes(spec, 8192, 1024, runner="pooling")
    assert pooling == 8192 * 4096 * 2553 // 1000 + 27_100_000


def test_pooling_runner_leaves_more_kv() -> None:
    gen = plan_for("llama-3.1-8b", "h100", max_model_len=16_000)
    pool = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, runner="pooling")
    sampler = 1024 * 128_256 * 4 * 9515 // 1000
    assert pool.vllm.available_kv_bytes - gen.vllm.available_kv_bytes == sampler


def test_cuda_graph_sizes_follow_vllms_default_capture_list() -> None:
    # 1, 2, 4, then multiples of 8 below 256, then every 16 up to min(2 x seqs, 512)
    assert cuda_graph_sizes(256, 8192) == [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    assert len(cuda_graph_sizes(256, 8192)) == 3 + 31 + 17 == 51
    assert cuda_graph_sizes(4, 8192) == [1, 2, 4, 8]  # up to 2 x 4
    assert cuda_graph_sizes(1024, 128) == [1, 2, 4, *range(8, 129, 8)]  # capped by the tokens
    dep = deployment("llama-3.1-8b", max_model_len=16_000, max_num_seqs=256)
    from planner.kv_layout import estimate

    est = estimate(dep.spec, dep.settings, None, batch_sizes=())
    # 32 layers x 51 sizes x 0.32 MiB
    assert cuda_graph_estimate_bytes(est) == 32 * 51 * 335_544


def test_every_estimated_term_has_its_measured_spread() -> None:
    p = plan_for("llama-3.1-8b", "h100", max_model_len=16_000)
    ranges = estimate_ranges(p.vllm, 1)
    act = p.vllm.activation_peak_bytes
    assert ranges["activation_peak_bytes"] == (act - round(1.1 * GIB), act + GIB // 10)
    low, high = ranges["available_kv_bytes"]
    assert low < p.vllm.available_kv_bytes < high
    # the KV memory moves opposite to the terms: the widest terms give its narrowest end
    spread_up = sum(r[1] - b for r, b in zip(list(ranges.values())[:3], _terms(p), strict=True))
    assert p.vllm.available_kv_bytes - low == spread_up
    # a fixed pool is exact
    fixed = plan_for("llama-3.1-8b", None, kv_cache_memory_bytes=20 * GIB, max_model_len=16_000)
    assert estimate_ranges(fixed.vllm, 1)["available_kv_bytes"] == (20 * GIB, 20 * GIB)


def _terms(p):  # type: ignore[no-untyped-def]
    return (p.vllm.activation_peak_bytes, p.vllm.non_torch_bytes, p.vllm.cuda_graph_bytes)


def test_json_carries_the_version_and_the_ranges() -> None:
    result = runner.invoke(
        app,
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--vllm-version", "0.11.0", "--json"],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["vllm_version"] == "0.11.0"
    assert data["gpu_memory_utilization"] == 0.9 and data["cuda_graph_bytes"] == 0
    low, high = data["estimate_ranges"]["available_kv_bytes"]
    assert low <= data["available_kv_bytes"] <= high
    # 0.11 logs the token count and the concurrency on two lines
    assert data["vllm_log"][1].startswith("GPU KV cache size: ")
    assert data["vllm_log"][2].startswith("Maximum concurrency for 131,072 tokens")


def test_diagnose_takes_the_logs_release() -> None:
    from pathlib import Path

    from planner.diagnose import diagnose_file
    from planner.gpus import get_gpu

    log = Path(__file__).parent / "fixtures" / "logs" / "vllm-v1-llama8b-h100.log"
    dg = diagnose_file(log, model="llama-3.1-8b", gpu=get_gpu("h100"))
    assert dg.sources["gpu_memory_utilization"].startswith("log line")
    terms = {t.name: t for t in dg.terms}
    # 0.11.0 sized the KV cache before capturing graphs: the plan subtracts none
    assert terms["CUDA graphs"].plan == 0
