"""Recommendations, grid invariants, engine commands, GPU catalog and the --gpu CLI."""

from __future__ import annotations

import json
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.gpus import GPUS, detect_gpu, get_gpu
from planner.units import parse_size
from tests.helpers import parse_command, plan_for

runner = CliRunner()
GIB = 1 << 30


def on(name: str, gpu: str, **kwargs: object) -> planner.recommend.Plan:
    return plan_for(name, gpu, **kwargs)


MODELS = [
    "llama-3.1-8b",
    "qwen2.5-7b",
    "gemma-2-9b",
    "qwen3-0.6b",
    "deepseek-v2-lite",
    "gpt-oss-20b",
    "mistral-7b-v0.1",
    "phi-4",
]
BIG_GPUS = ["l4", "rtx-4090", "l40s", "a100-80gb", "h100", "h200"]


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(MODELS), st.sampled_from(BIG_GPUS), st.sampled_from([2048, 4096, 8192, 16384])
)
def test_worst_case_recommendation_always_fits(model: str, gpu: str, length: int) -> None:
    try:
        p = on(model, gpu, max_model_len=length, worst_case=True)
    except planner.DoesNotFitError:
        return  # weights alone do not fit: nothing to recommend
    rec = p.recommended
    if rec is None:
        assert not p.vllm.fits
        return
    assert rec.basis == "worst_case"
    if not p.vllm.fits:  # a shorter max_model_len is recommended first: it must start
        p = on(model, gpu, max_model_len=rec.max_model_len, worst_case=True)
        assert p.outcome != "wont_start" and p.recommended is not None
        assert p.recommended.max_num_seqs == rec.max_num_seqs
        rec = p.recommended
    # the recommended number of full-length sequences fits in the blocks vLLM hands out
    assert rec.max_num_seqs * p.vllm.blocks_per_request <= p.vllm.num_gpu_blocks - 1
    assert rec.kv_usage <= 0.9 or rec.max_num_seqs == 1
    assert rec.worst_case_running == rec.max_num_seqs


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(MODELS), st.sampled_from(BIG_GPUS), st.sampled_from([2048, 4096, 8192, 16384])
)
def test_without_traffic_vllms_max_num_seqs_is_kept(model: str, gpu: str, length: int) -> None:
    try:
        p = on(model, gpu, max_model_len=length)
    except planner.DoesNotFitError:
        return
    rec = p.recommended
    if rec is None or not p.vllm.fits:
        return
    # the engine's default is kept, and the worst case is stated as vLLM's concurrency
    assert rec.basis == "engine_default"
    assert rec.max_num_seqs == p.vllm.max_num_seqs
    usable = p.vllm.num_gpu_blocks - 1
    assert rec.worst_case_running == min(rec.max_num_seqs, usable // p.vllm.blocks_per_request)
    assert "--max-num-seqs" not in p.commands["vllm"]  # vLLM's default is vLLM's to pick


@pytest.mark.parametrize(
    ("model", "gpu"),
    [
        ("qwen2.5-7b", "rtx-4090"),
        ("llama-3.1-8b", "l40s"),
        ("gemma-2-9b", "a100-80gb"),
        ("qwen3-8b", "h100"),
    ],
)
def test_longer_context_never_fits_more_sequences(model: str, gpu: str) -> None:
    p = on(model, gpu)
    lens = sorted({c.max_model_len for c in p.grid})

    def max_fitting(length: int) -> int:
        return max(
            (
                c.max_num_seqs
                for c in p.grid
                if c.max_model_len == length and c.outcome == "fits_at_worst_case"
            ),
            default=0,
        )

    for short, long_ in zip(lens, lens[1:], strict=False):
        assert max_fitting(long_) <= max_fitting(short)
    for c in p.grid:  # all fit at worst case exactly when the usage is at most 100 %
        assert (c.outcome == "fits_at_worst_case") == (c.kv_usage <= 1.0)
        # and otherwise the running count is what the usable blocks hold
        if c.outcome == "queues_at_worst_case":
            # usable // blocks per request; kv_usage is rounded to 4 places
            assert c.worst_case_running == pytest.approx(c.max_num_seqs / c.kv_usage, abs=1)


def test_seed_table_qwen25_7b_on_24gib() -> None:
    # Qwen2.5-7B (28 layers x 4 kv x 256 x 2 B = 57,344 B/token = 896 KiB per 16-token block)
    # on a 24 GiB card: 4,096 tokens x 16 sequences = 4,096 blocks must fit the pool.
    p = on("qwen2.5-7b", "rtx-4090", max_model_len=4096)
    cell = next(c for c in p.grid if (c.max_model_len, c.max_num_seqs) == (4096, 16))
    # each cell has its own pool: the sampler warm-up runs over min(tokens, max_num_seqs) rows
    assert cell.num_gpu_blocks > p.vllm.num_gpu_blocks  # 16 rows cost less than 256
    assert cell.kv_usage == pytest.approx(16 * 256 / (cell.num_gpu_blocks - 1), abs=1e-4)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v2-lite", "gemma-2-9b"])
def test_commands_round_trip_through_the_flag_parser(model: str) -> None:
    p = on(model, "h100", max_model_len=8192, kv_cache_dtype=planner.KVDtype.FP8, max_num_seqs=64)
    rec = p.recommended
    assert rec is not None and rec.max_num_seqs == 64  # the user's own value, kept
    vllm = parse_command(p.commands["vllm"])
    assert vllm == {
        "model": p.estimate.model,
        "tensor-parallel-size": "1",
        "max-model-len": "8192",
        "max-num-seqs": str(rec.max_num_seqs),
        "gpu-memory-utilization": "0.92",
        "block-size": "16",
        "kv-cache-dtype": "fp8",
    }
    sglang = parse_command(p.commands["sglang"])
    assert sglang["model"] == p.estimate.model and sglang["context-length"] == "8192"
    assert sglang["tp-size"] == "1" and sglang["kv-cache-dtype"] == "fp8_e4m3"
    trt = parse_command(p.commands["trtllm"])
    assert trt["max_seq_len"] == "8192" and trt["config"] == "kvplan-trtllm.yaml"  # the YAML
    # each engine's own batch limit and the rest: tests/test_engine_commands.py


def test_prefix_sharing_saves_full_blocks() -> None:
    # 800-token system prompt = 50 full 16-token blocks, shared by 100 requests: 99 x 50 blocks.
    p = on("llama-3.1-8b", "h100", max_model_len=8192, shared_prefix_tokens=800, requests=100)
    assert p.prefix_sharing is not None
    assert p.prefix_sharing.blocks_saved == 99 * 50
    assert p.prefix_sharing.bytes_saved == 99 * 50 * 2 * 1024 * 1024  # 2 MiB per block


def test_block_size_tradeoff_and_naive_waste() -> None:
    p = on("llama-3.1-8b", "h100", max_model_len=8192, avg_tokens=1000)
    rows = {r.block_size: r for r in p.block_sizes}
    # the last block is half empty on average: (bs - 1) / 2 tokens
    assert rows[16].wasted_tokens_per_seq == 7.5
    assert rows[8].block_table_entries == 1024 and rows[32].block_table_entries == 256
    assert rows[8].fragmentation_pct < rows[16].fragmentation_pct < rows[32].fragmentation_pct
    nv = p.naive_vs_paged
    # naive reserves 8,192 tokens per sequence, paged cdiv(1000, 16) x 16 = 1,008
    assert nv.paged_bytes * 8192 == nv.naive_bytes * 1008


def test_fp8_alternative_doubles_blocks() -> None:
    p = on("llama-3.1-8b", "h100", max_model_len=8192)
    fp8 = next(a for a in p.alternatives if "fp8" in a.change)
    # same memory, half the bytes per block (block size unchanged)
    assert fp8.num_gpu_blocks == pytest.approx(2 * p.vllm.num_gpu_blocks, abs=2)


def test_weights_that_do_not_fit_say_by_how_much() -> None:
    with pytest.raises(planner.DoesNotFitError, match=r"GiB short; try --tensor-parallel-size 4"):
        on("llama-3.1-70b", "h100")


# ------------------------------------------------------------------ GPUs and sizes


def test_catalog_has_the_required_gpus() -> None:
    names = {g.name for g in GPUS}
    assert {
        "h200",
        "h100",
        "h100-pcie",
        "h100-nvl",
        "h20",
        "a100-40gb",
        "a100-80gb",
        "l40s",
        "l4",
        "a10",
        "a10g",
        "rtx-3090",
        "rtx-4090",
        "rtx-5090",
        "rtx-6000-ada",
        "a6000",
        "t4",
        "v100-16gb",
        "v100-32gb",
        "b200",
        "mi300x",
    } <= names


@pytest.mark.parametrize(
    ("name", "gib"), [("h100", 79.18), ("rtx-3090", 23.58), ("a100-40gb", 39.38)]
)
def test_driver_totals_from_calibration(name: str, gib: float) -> None:
    assert get_gpu(name).memory_bytes / GIB == pytest.approx(gib, abs=0.005)


def test_h200_matches_its_driver_total() -> None:
    # nvidia-smi 143,771 MiB; the driver reports 143,156 MiB (139.80 GiB) to CUDA.
    assert get_gpu("H200").memory_bytes == 143_156 << 20


@pytest.mark.parametrize("alias", ["H100", "nvidia-h100", "h100 sxm", "RTX 4090", "4090", "A10G"])
def test_gpu_names_are_forgiving(alias: str) -> None:
    get_gpu(alias)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6.51GiB", int(6.51 * 2**30)),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1073741824", 2**30),
        ("24 GiB", 24 * 2**30),
        ("1.5TB", 1_500_000_000_000),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("80G", "ambiguous: say 80GiB (2^30-style) or 80GB"),
        ("lots", "is not a size"),
        ("12.5", "must be whole"),
        ("5XB", "unknown unit"),
        ("-3GiB", "is not a size"),
    ],
)
def test_parse_size_refuses(text: str, fragment: str) -> None:
    with pytest.raises(planner.UsageError) as info:
        parse_size(text)
    assert fragment in str(info.value)


def test_detect_gpu_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    info = types.SimpleNamespace(total=85_899_345_920, reserved=510 << 20)
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: "h",
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: info,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = detect_gpu()
    # the driver's name read as the catalog's, with the total NVML measured
    assert gpu is not None and gpu.name == "h100"
    assert gpu.memory_bytes == 85_899_345_920 - (510 << 20)
    assert gpu.source == "detected via NVML (NVIDIA H100 80GB HBM3)"
    assert gpu.bandwidth_bytes_per_s == get_gpu("h100").bandwidth_bytes_per_s


def test_no_gpu_here_means_none() -> None:
    if "pynvml" in sys.modules or __import__("pathlib").Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an NVIDIA driver")
    assert detect_gpu() is None


# ------------------------------------------------------------------ CLI


def test_cli_gpu_json_keys() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "h100", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    for key in (
        "weights_bytes",
        "activation_peak_bytes",
        "non_torch_bytes",
        "cuda_graph_bytes",
        "available_kv_bytes",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
    ):
        assert isinstance(data[key], int), key
    assert data["gpu"] == {
        "name": "h100",
        "memory_bytes": get_gpu("h100").memory_bytes,
        "source": get_gpu("h100").source,
    }
    assert data["weights_source"] == "config"
    assert set(data["recommended"]) >= {
        "max_model_len",
        "max_num_seqs",
        "gpu_memory_utilization",
        "block_size",
        "kv_cache_dtype",
    }
    assert set(data["commands"]) == {"vllm", "sglang", "trtllm"}
    assert {"max_model_len", "max_num_seqs", "fits", "kv_usage"} <= set(data["grid"][0])
    # every number vLLM would log is in the JSON
    assert f"GPU KV cache size: {data['kv_cache_size_tokens']:,} tokens" in data["vllm_log"][1]
    assert data["num_gpu_blocks"] == data["available_kv_bytes"] // data["vllm"]["bytes_per_block"]


def test_cli_without_gpu_lists_common_gpus() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--json"])
    names = [row["name"] for row in json.loads(result.stdout)["gpus"]]
    assert "h100" in names and "l4" in names
    human = runner.invoke(app, ["estimate", "llama-3.1-8b"]).stdout
    assert "vLLM on common GPUs" in human


def test_cli_kv_cache_memory_prints_vllm_lines() -> None:
    result = runner.invoke(
        app, ["estimate", "qwen3-14b", "--kv-cache-memory", "6.51GiB", "--max-model-len", "32768"]
    )
    assert result.exit_code == 0, result.stderr
    assert "GPU KV cache size: 42,656 tokens" in result.stdout
    assert "Maximum concurrency for 32,768 tokens per request: 1.30x" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["--gpu", "h1000"], 2, "unknown GPU 'h1000'; did you mean h100"),
        (["--gpu-memory", "80G"], 2, "is ambiguous: say 80GiB"),
        (["--gpu", "h100", "--gpu-memory-utilization", "1.5"], 2, "must be in (0, 1]"),
        (["--gpu", "h100", "--gpu-memory-utilization", "0"], 2, "must be in (0, 1]"),
        (["--kv-cache-memory", "lots"], 2, "is not a size"),
        (["--gpu", "h100", "--requests", "0", "--shared-prefix", "800"], 2, "--requests must be"),
    ],
)
def test_cli_budget_bad_input(args: list[str], code: int, fragment: str) -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", *args])
    assert result.exit_code == code, result.stderr
    assert result.stderr.startswith("Error: ") and fragment in result.stderr
    assert result.stdout == ""


def test_cli_weights_do_not_fit() -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-405b", "--gpu", "l4"])
    assert result.exit_code == 1
    assert "GiB short" in result.stderr and "Traceback" not in result.stderr


def test_cli_gpus_lists_the_catalog() -> None:
    rows = json.loads(runner.invoke(app, ["gpus", "--json"]).stdout)
    assert len(rows) == len(GPUS)
    assert "h200" in runner.invoke(app, ["gpus"]).stdout
