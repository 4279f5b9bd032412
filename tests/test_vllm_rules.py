"""vLLM's budget per release and entrypoint: the sampler warm-up as the activation
peak, CUDA graphs from the captured sizes, the rules that moved between releases, and the
spread of the estimated terms. Expected values are arithmetic shown here or vLLM's sources."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner import load_model_spec
from planner.activation import (
    activation_peak_bytes,
    cuda_graph_count,
    cuda_graph_estimate_bytes,
    cuda_graph_modes,
    cuda_graph_sizes,
)
from planner.budget import estimate_ranges
from planner.cli import app
from planner.errors import UsageError
from planner.vllm_rules import SAMPLER_CHOICES, parse_version, rules_for
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


V0110, V0190, V0330 = rules_for("0.11.0"), rules_for("0.19.0"), rules_for("0.33.0")


def test_the_sampler_per_release() -> None:
    # topk_topp_sampler.py: the sort of 0.11.0 (:183-204) and 0.16.0 (:262 "logits.sort"), the
    # Triton masking from 0.17.0 (0.17.0/0.17.1/0.18.0:251 "if HAS_TRITON and
    # logits.shape[0] >= 8"), FlashInfer by default from 0.24.0 (envs.py 0.24.0:796-800
    # VLLM_USE_FLASHINFER_SAMPLER ... else True)
    versions = ("0.10.1.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.23.0", "0.24.0")
    assert [rules_for(v).sampler for v in versions] == [
        "sort",
        "sort",
        "triton",
        "triton",
        "triton",
        "triton",
        "flashinfer",
    ]
    assert (V0110.sampler_copies_milli, V0190.sampler_copies_milli) == (9515, 3700)
    assert V0330.sampler_copies_milli == 1500


def test_the_activation_peak_per_release() -> None:
    spec = load_model_spec("llama-3.1-8b")  # vocab 128,256, hidden 4,096, intermediate 14,336
    held = 8192 * 4096 * 2553 // 1000
    forward = 8192 * 2 * (3 * 14_336 + 4 * 4096)  # 0.91 GiB
    # v0.11.0, vllm serve on an H100 (8,192 / 1,024): CALIBRATION.md's measured 4.76 GiB
    serve = activation_peak_bytes(spec, 8192, 1024, rules=V0110)
    assert serve == 1024 * 128_256 * 4 * 9515 // 1000 + held + 27_100_000
    assert round(serve / GIB, 2) == 4.76
    # 0.19.0: the Triton top-k/top-p keeps 3.70 copies; issue 23 quotes 1.89 GiB logged
    v19 = activation_peak_bytes(spec, 8192, 1024, rules=V0190)
    assert v19 == 1024 * 128_256 * 4 * 3700 // 1000 + held + 27_100_000
    assert round(v19 / GIB, 2) == 1.92
    # 0.33 (FlashInfer, 1.5 copies: 0.73 GiB + 0.08): the forward over 8,192 tokens is larger
    v33 = activation_peak_bytes(spec, 8192, 1024, rules=V0330)
    assert v33 == forward + 27_100_000
    assert activation_peak_bytes(spec, 8192, 1024) == v33  # the newest by default
    # the rows are min(tokens, max_num_seqs): the LLM class on a small GPU (8,192 / 256) costs
    # a quarter of the sampler term, not four times vllm serve's
    llm = activation_peak_bytes(spec, 8192, 256, rules=V0110)
    assert llm == 256 * 128_256 * 4 * 9515 // 1000 + held + 27_100_000
    # a pooling runner has no sampler at all: the forward is its peak in every release
    for rules in (V0110, V0190, V0330):
        pooling = activation_peak_bytes(spec, 8192, 1024, runner="pooling", rules=rules)
        assert pooling == forward + 27_100_000
    # the forward's MLP is sharded: at TP 2 it is 0.58 GiB, under the sampler's 0.73 + 0.08
    # (the logits are gathered whole on every rank), which is then the peak
    tp2_forward = 8192 * 2 * (3 * 7168 + 4 * 4096)
    sampler33 = 1024 * 128_256 * 4 * 1500 // 1000
    assert tp2_forward < sampler33 + held
    tp2 = activation_peak_bytes(spec, 8192, 1024, rules=V0330, tp=2)
    assert tp2 == sampler33 + held + 27_100_000


def test_vllm_version_changes_the_activation_and_the_kv() -> None:
    # gpt-oss-20b (vocab 201,088) on an H100, vllm serve defaults: 1,024 x 201,088 x 4 B =
    # 0.77 GiB per copy; 9.515 copies in 0.11, 3.70 in 0.19, 1.5 in 0.33
    plans = {
        v: plan_for("gpt-oss-20b", "h100", max_model_len=16_000, vllm_version=v)
        for v in ("0.11.0", "0.19.0", "0.33.0")
    }
    acts = {v: p.vllm.activation_peak_bytes for v, p in plans.items()}
    assert acts["0.11.0"] > acts["0.19.0"] > acts["0.33.0"]
    one = 1024 * 201_088 * 4
    assert acts["0.11.0"] - acts["0.19.0"] == one * 9515 // 1000 - one * 3700 // 1000


def test_pooling_runner_leaves_more_kv() -> None:
    gen = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, vllm_version="0.11.0")
    pool = plan_for(
        "llama-3.1-8b", "h100", max_model_len=16_000, runner="pooling", vllm_version="0.11.0"
    )
    sampler = 1024 * 128_256 * 4 * 9515 // 1000
    held = 8192 * 4096 * 2553 // 1000
    forward = 8192 * 2 * (3 * 14_336 + 4 * 4096)
    assert pool.vllm.available_kv_bytes - gen.vllm.available_kv_bytes == sampler + held - forward


def test_cuda_graph_sizes_follow_vllms_default_capture_list() -> None:
    # from 0.11.1: 1, 2, 4, then multiples of 8 below 256, then every 16 up to
    # min(2 x seqs, 512) (config/vllm.py 0.11.1:876-890, 0.19.0:1424-1440)
    assert cuda_graph_sizes(256, 8192) == [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    assert len(cuda_graph_sizes(256, 8192)) == 3 + 31 + 17 == 51
    assert cuda_graph_sizes(4, 8192) == [1, 2, 4, 8]  # up to 2 x 4
    assert cuda_graph_sizes(1024, 128) == [1, 2, 4, *range(8, 129, 8)]  # capped by the tokens
    # through 0.11.0: multiples of 8 all the way (config/__init__.py 0.11.0:594-611)
    old = cuda_graph_sizes(256, 8192, (0, 11, 0))
    assert old == [1, 2, 4, *range(8, 513, 8)] and len(old) == 3 + 64 == 67
    assert cuda_graph_sizes(256, 8192, (0, 11, 1)) == cuda_graph_sizes(256, 8192)


def test_cuda_graphs_count_both_modes_from_0110() -> None:
    # FULL_AND_PIECEWISE from 0.11.0 (config/__init__.py 0.11.0:361-366): a PIECEWISE graph
    # per size and a FULL one per decode size <= max_num_seqs (gpu_model_runner.py
    # 0.11.0:3453-3466); PIECEWISE only in 0.10 (config/__init__.py 0.10.2:3389-3393).
    # vllm#27782 logs 67 PIECEWISE + 35 FULL at 256 sequences in 0.11.0.
    assert cuda_graph_count(256, 2048, release=(0, 11, 0)) == 67 + (3 + 32) == 102
    assert cuda_graph_count(256, 2048, release=(0, 19, 0)) == 51 + 35 == 86
    assert cuda_graph_count(256, 2048, release=(0, 10, 2)) == 67
    assert cuda_graph_count(256, 2048, release=(0, 19, 0), runner="pooling") == 51
    # 1,024 sequences: every captured size is a decode size too
    assert cuda_graph_count(1024, 8192, release=(0, 19, 0)) == 2 * 51
    dep = deployment("llama-3.1-8b", max_model_len=16_000, max_num_seqs=256)
    from planner.kv_layout import estimate

    est = estimate(dep.spec, dep.settings, None, batch_sizes=())
    # 32 layers x 86 graphs x 0.20 MiB; 0.39 MiB where the all-reduces are NCCL's
    assert cuda_graph_estimate_bytes(est) == 32 * 86 * round(0.20 * 2**20)
    nccl = cuda_graph_estimate_bytes(est, nccl_all_reduce=True)
    assert nccl == 32 * 86 * (round(0.20 * 2**20) + round(0.19 * 2**20))


def test_the_capture_sizes_follow_each_releases_rules() -> None:
    # 0.21.0 captures max_num_batched_tokens itself when it is under the largest size
    # (config/vllm.py 0.21.0:1580-1584): 256 sequences, 300 tokens -> the grid up to 300
    # (8 ... 248, 256, 272, 288) and 300
    grid = [1, 2, 4, *range(8, 256, 8), 256, 272, 288]
    assert cuda_graph_sizes(256, 300, (0, 20, 0)) == grid
    assert cuda_graph_sizes(256, 300, (0, 21, 0)) == [*grid, 300]
    # 0.28.0: data-center Blackwell (compute capability 10.x) captures up to 1,024 tokens, not
    # 512 (config/vllm.py 0.28.0:1936-1939): 3 + 31 + (1,024 - 256) / 16 + 1 = 83 sizes
    assert len(cuda_graph_sizes(1024, 8192, (0, 28, 0), blackwell=True)) == 3 + 31 + 49 == 83
    assert len(cuda_graph_sizes(1024, 8192, (0, 27, 1), blackwell=True)) == 51
    assert len(cuda_graph_sizes(1024, 8192, (0, 28, 0))) == 51  # not Blackwell
    # 0.29.0: a drafter's query length q = 1 + k adds the request counts times q that fit
    # under 2 x seqs x q (config/vllm.py 0.29.0:2030-2090): 4 sequences, k = 2 -> the grid up
    # to 24 and 3 x (1, 2, 4) = 3, 6, 12
    assert cuda_graph_sizes(4, 8192, (0, 28, 0), decode_query_len=3) == [1, 2, 4, 8, 16, 24]
    spec = cuda_graph_sizes(4, 8192, (0, 29, 0), decode_query_len=3)
    assert spec == [1, 2, 3, 4, 6, 8, 12, 16, 24]
    # 0.33.0: max_num_seqs itself, off the grid (config/vllm.py 0.33.0:2549-2550): 100
    # sequences -> 1, 2, 4, 8 ... 200 and 100
    assert 100 not in cuda_graph_sizes(100, 8192, (0, 30, 0))
    assert 100 in cuda_graph_sizes(100, 8192, (0, 33, 0))
    assert len(cuda_graph_sizes(100, 8192, (0, 33, 0))) == 3 + 25 + 1


def test_the_graph_modes_as_vllm_logs_them() -> None:
    # vllm#48214 (a pooling model, 0.24.0's gpu_model_runner.py:6483): "Profiling CUDA graph
    # memory: PIECEWISE=51 (largest=512)", no FULL graphs for a pooling runner
    assert cuda_graph_modes(256, 8192, release=(0, 24, 0), runner="pooling") == {
        "PIECEWISE": (51, 512)
    }
    assert cuda_graph_modes(256, 2048, release=(0, 24, 0)) == {
        "PIECEWISE": (51, 512),
        "FULL": (35, 256),
    }
    # LoRA on: every graph without adapters and with max_loras + 1 (cudagraph_specialize_lora
    # True by default; v1/cudagraph_dispatcher.py 0.19.0:110-126, 180-223)
    lora = cuda_graph_modes(256, 2048, release=(0, 19, 0), lora=True)
    assert lora == {"PIECEWISE": (2 * 51, 512), "FULL": (2 * 35, 256)}
    assert cuda_graph_count(256, 2048, release=(0, 19, 0), lora=True) == 2 * 86
    # releases before 0.19 were not read: LoRA leaves the count as it is
    assert cuda_graph_count(256, 2048, release=(0, 18, 0), lora=True) == 86


def test_an_l4_with_lora_budgets_twice_the_graphs() -> None:
    # Llama-3.1-8B on an L4 (newest rules, 256 sequences, 2,048 batched tokens): 32 layers x
    # 2 x (51 + 35) graphs x 0.20 MiB
    plain = plan_for("llama-3.1-8b", "l4", max_model_len=8192)
    lora = plan_for("llama-3.1-8b", "l4", max_model_len=8192, enable_lora=True, max_loras=4)
    per = round(0.20 * 2**20)
    assert (plain.vllm.max_num_seqs, plain.vllm.max_num_batched_tokens) == (256, 2048)
    assert plain.vllm.cuda_graph_bytes == 32 * 86 * per
    assert lora.vllm.cuda_graph_bytes == 32 * 2 * 86 * per


def test_a_b200_from_028_budgets_the_graphs_up_to_1024_tokens() -> None:
    # Llama-3.1-8B on a B200 (compute capability 10.0; >= 160 GiB: 16,384 batched tokens and
    # 1,024 sequences from 0.28): 83 PIECEWISE + 83 FULL graphs against 51 + 51 in 0.27.1
    per = round(0.20 * 2**20)
    new = plan_for("llama-3.1-8b", "b200", max_model_len=8192, vllm_version="0.28.0")
    old = plan_for("llama-3.1-8b", "b200", max_model_len=8192, vllm_version="0.27.1")
    assert new.vllm.max_num_seqs == old.vllm.max_num_seqs == 1024
    assert new.vllm.cuda_graph_bytes == 32 * (83 + 83) * per
    assert old.vllm.cuda_graph_bytes == 32 * (51 + 51) * per


def test_the_27782_graph_capture_is_modelled_by_its_graph_count() -> None:
    # vllm#27782 (4 x RTX 4090, TP 4, custom all-reduce off: > 2 PCIe GPUs), 0.11.0,
    # Qwen3-30B-A3B, 48 layers: "Graph capturing finished in 28 secs, took 1.88 GiB"
    plan = plan_for("qwen3-30b-a3b", "rtx-4090", tp=4, interconnect="pcie", vllm_version="0.11.0")
    graphs = 48 * (67 + 35) * (round(0.20 * 2**20) + round(0.19 * 2**20))
    assert plan.vllm.graphs_after_sizing_bytes == graphs
    assert abs(graphs / 2**30 - 1.88) < 0.03


def test_every_estimated_term_has_its_measured_spread() -> None:
    p = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, vllm_version="0.11.0")
    ranges = estimate_ranges(p.vllm, 1)
    act = p.vllm.activation_peak_bytes
    # the sort sampler: 0.1 GiB higher at most; at the low end FlashInfer's sampler, which
    # 0.11.0 runs wherever FlashInfer is installed (topk_topp_sampler.py 0.11.0:39-56): 1,024
    # rows x 128,256 x 4 B x 1.5 + the held hidden states, under the forward over 8,192
    # tokens, so the forward + 27 MB, less 0.1 GiB and the forward's 20 %
    forward = 8192 * 2 * (3 * 14_336 + 4 * 4096)
    assert 1024 * 128_256 * 4 * 1500 // 1000 + 8192 * 4096 * 2553 // 1000 < forward
    flashinfer_low = forward + 27_100_000 - GIB // 10 - forward // 5
    assert ranges["activation_peak_bytes"] == (flashinfer_low, act + GIB // 10)
    low, high = ranges["available_kv_bytes"]
    assert low < p.vllm.available_kv_bytes < high
    # the KV memory moves opposite to the terms: the widest terms give its narrowest end
    spread_up = sum(r[1] - b for r, b in zip(list(ranges.values())[:3], _terms(p), strict=True))
    assert p.vllm.available_kv_bytes - low == spread_up
    # a fixed pool is exact
    fixed = plan_for("llama-3.1-8b", None, kv_cache_memory_bytes=20 * GIB, max_model_len=16_000)
    assert estimate_ranges(fixed.vllm, 1)["available_kv_bytes"] == (20 * GIB, 20 * GIB)


def test_the_activation_range_covers_the_other_sampler() -> None:
    # 0.33 defaults to FlashInfer's sampler (1.5 copies); without FlashInfer vLLM takes the
    # Triton path (3.70): the range's top is that peak, 1,024 x 128,256 x 4 x 3.70 + the held
    # hidden states + 27 MB, plus 8 % of the sampler and 0.1 GiB
    p = plan_for("llama-3.1-8b", "h100", max_model_len=16_000)
    low, high = estimate_ranges(p.vllm, 1)["activation_peak_bytes"]
    sampler = 1024 * 128_256 * 4 * 1500 // 1000
    triton = 1024 * 128_256 * 4 * 3700 // 1000 + 8192 * 4096 * 2553 // 1000 + 27_100_000
    forward = 8192 * 2 * (3 * 14_336 + 4 * 4096)
    # the forward is the plan's peak here, good to 20 % either way
    assert high == triton + sampler * 8 // 100 + GIB // 10 + forward // 5
    assert low == forward + 27_100_000 - GIB // 10 - forward // 5


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


def test_cli_post_allocation_outcome_and_flags() -> None:
    base = ["estimate", "gpt-oss-20b", "--gpu", "h100", "--vllm-version", "0.19.0"]
    base += ["--max-model-len", "16000", "--json"]
    died = runner.invoke(app, [*base, "--gpu-memory-utilization", "0.95"])
    assert died.exit_code == 1
    data = json.loads(died.stdout)
    assert data["outcome"] == "wont_start" and data["wont_start_term"] == "sampler_warmup"
    assert data["start_changes"][0] == {"gpu_memory_utilization": 0.94}
    after = data["after_sizing"]
    assert after["cuda_graph_bytes"] + after["warmup_bytes"] > after["free_bytes"]
    assert "warming up sampler with 1024 dummy requests" in died.stderr
    assert "try --gpu-memory-utilization 0.94" in died.stderr
    started = runner.invoke(app, [*base, "--gpu-memory-utilization", "0.9"])
    assert started.exit_code == 0, started.stderr
    busy = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--gpu-free-memory", "40GiB"]
    )
    assert busy.exit_code == 1 and "Free memory on device (39.50/79.18 GiB)" in busy.stderr
    bad = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--interconnect", "x"])
    assert bad.exit_code == 2 and "--interconnect must be one of nvlink, xgmi, pcie" in bad.stderr


def test_the_sampler_the_log_names() -> None:
    # --sampler: FlashInfer's, or the release's native one (the sort to 0.16, the Triton
    # masking from 0.17); stating it leaves no other to range over
    assert SAMPLER_CHOICES == ("flashinfer", "native")
    assert rules_for("0.10.1.1").sampler == "sort"  # pip install vllm: no FlashInfer
    assert rules_for("0.10.1.1").with_sampler("flashinfer").sampler == "flashinfer"
    assert rules_for("0.10.1.1").with_sampler("native").sampler == "sort"
    assert rules_for("0.19.0").with_sampler("native").sampler == "triton"
    assert rules_for("0.33.0").with_sampler("native").sampler == "triton"
    assert rules_for("0.33.0").with_sampler(None) is rules_for("0.33.0")
    assert rules_for("0.11.0").with_sampler("flashinfer").sampler_stated
    with pytest.raises(UsageError, match="--sampler must be one of flashinfer, native"):
        rules_for("0.11.0").with_sampler("sort")


def test_flashinfer_installed_in_0_10_shrinks_the_activation() -> None:
    # dennislee22's 0.10.1.1 A100 run with flashinfer-python installed logs "Using FlashInfer
    # for top-p & top-k sampling." (tests/data/vllm_startups.json). Qwen2.5-7B (vocab
    # 152,064, hidden 3,584, intermediate 18,944) at vllm serve's A100 defaults, 2,048 tokens
    # / 256 rows: the sort keeps 256 x 152,064 x 4 x 9.515 = 1.38 GiB of logits copies,
    # FlashInfer 1.5 copies = 0.22 GiB, under the forward over 2,048 tokens (0.27 GiB)
    kw = {"max_model_len": 16_384, "vllm_version": "0.10.1.1", "gpu_memory_utilization": 0.5}
    native = plan_for("qwen2.5-7b-instruct", "a100-80gb", **kw)
    flashinfer = plan_for("qwen2.5-7b-instruct", "a100-80gb", sampler="flashinfer", **kw)
    held = 2048 * 3584 * 2553 // 1000
    forward = 2048 * 2 * (3 * 18_944 + 4 * 3584)
    sort = 256 * 152_064 * 4 * 9515 // 1000
    assert native.vllm.activation_peak_bytes == sort + held + 27_100_000
    assert 256 * 152_064 * 4 * 1500 // 1000 + held < forward
    assert flashinfer.vllm.activation_peak_bytes == forward + 27_100_000
    gained = flashinfer.vllm.available_kv_bytes - native.vllm.available_kv_bytes
    assert gained == sort + held - forward
    # the log's 24.83 GiB (gmu 0.5) is inside the stated range of the FlashInfer plan
    low, high = estimate_ranges(flashinfer.vllm, 1)["available_kv_bytes"]
    assert low <= 24.83 * GIB <= high


def test_rocm_runs_the_native_sampler() -> None:
    # TopKTopPSampler takes FlashInfer's forward_cuda only if current_platform.is_cuda(),
    # False on ROCm (v1/sample/ops/topk_topp_sampler.py 0.11.0:38, 0.19.0:37, 0.33.0:242);
    # without VLLM_ROCM_USE_AITER=1 (envs.py 0.33.0:1267) it is forward_native
    assert [rules_for(v).on_rocm().sampler for v in ("0.11.0", "0.19.0", "0.33.0")] == [
        "sort",
        "triton",
        "triton",
    ]
    # --sampler flashinfer cannot make ROCm run it, and no other sampler may run instead
    stated = rules_for("0.33.0").with_sampler("flashinfer").on_rocm()
    assert stated.sampler == "triton" and stated.sampler_stated
    # Llama-3.1-8B on an MI300X (191.98 GiB: the >= 160 GiB tier, 16,384 / 1,024): the Triton
    # top-k/top-p's 3.70 fp32-logits copies over 1,024 rows plus the held hidden states are
    # the peak (1.97 GiB), over the forward's 16,384 x 2 x (3 x 14,336 + 4 x 4,096) B = 1.88
    plan = plan_for("llama-3.1-8b", "mi300x", max_model_len=16_000)
    held = 16_384 * 4096 * 2553 // 1000
    assert plan.vllm.activation_peak_bytes == 1024 * 128_256 * 4 * 3700 // 1000 + held + 27_100_000
    # the same deployment on an NVIDIA GPU of that size keeps FlashInfer's 1.5 copies: the
    # forward is the peak there
    b200 = plan_for("llama-3.1-8b", "b200", max_model_len=16_000)
    forward = 16_384 * 2 * (3 * 14_336 + 4 * 4096)
    assert b200.vllm.activation_peak_bytes == forward + 27_100_000


def test_the_mi300x_falls_in_the_large_gpu_tier_from_0_28() -> None:
    # vllm-project/vllm#53961 (rocm): "#51726's >=160GiB tier captures MI300X (191.98 GiB),
    # doubling max_num_batched_tokens": OPENAI_API_SERVER 16384 (from 8192) for
    # device_memory >= 160 GiB; before it the 70 GiB branch ("For GPUs like H100 and MI300x")
    for version, tokens in (("0.27.0", 8192), ("0.28.0", 16_384), (None, 16_384)):
        p = plan_for("llama-3.1-8b", "mi300x", max_model_len=8192, vllm_version=version)
        assert (p.vllm.max_num_batched_tokens, p.vllm.max_num_seqs) == (tokens, 1024)
