"""``kvplan simulate`` never replays what ``kvplan estimate`` and ``kvplan check`` refuse: the
layout rules (planner.report.physical_refusal) and a fixed pool that does not fit the GPU come
first, as *won't start* with the change that starts, exit 1."""

from __future__ import annotations

from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
TRAFFIC = ["--avg-prompt-tokens", "500", "--avg-output-tokens", "100", "--num-requests", "20"]


def simulate(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["simulate", *args, *TRAFFIC])
    return result.exit_code, result.stderr + result.stdout


def test_a_tp_wider_than_the_node_is_not_replayed() -> None:
    # an H100 node holds 8 GPUs (planner/data/gpus.json): TP 16 leaves it
    code, out = simulate("llama-3.1-8b", "--gpu", "h100", "--tp", "16")
    assert code == 1
    assert "won't start: TP 16 is wider than a h100 node (8 GPUs)" in out
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2" in out


def test_a_pool_larger_than_the_gpu_is_not_replayed() -> None:
    # 100 GiB of KV + 14.99 GiB of Llama-3.1-8B's bf16 weights (16,060,522,496 B and vLLM's
    # 33,554,432 B rotary cache) > the
    # H100's 79.18 GiB: vLLM allocates a --kv-cache-memory pool without profiling and OOMs
    code, out = simulate("llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "100GiB")
    assert code == 1
    assert "won't start: --kv-cache-memory 100.00 GiB + weights 14.99 GiB" in out
    code, _ = simulate("llama-3.1-8b", "--gpu", "h100", "--kv-cache-memory", "20GiB")
    assert code == 0


def test_fp8_kv_on_a_gpu_without_it_is_not_replayed() -> None:
    # a T4 is compute capability 7.5; vLLM 0.33 runs fp8 KV from 8.0 (planner/gpu_support.py)
    code, out = simulate("qwen2.5-3b", "--gpu", "t4", "--kv-cache-dtype", "fp8")
    assert code == 1
    assert "vLLM has no fp8 KV cache on t4 (compute capability 7.5)" in out
