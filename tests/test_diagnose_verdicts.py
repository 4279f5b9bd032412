"""Diagnose tells crashes from starts, reads odd logged args without a traceback,
and gives advice that helps. The logs are the H100 fixture (a real vLLM 0.11.0 start-up) cut
where a crash would cut it, followed by the error vLLM prints there (cited source lines of
vLLM 0.11.0); runtime stat lines keep vLLM's ``loggers.py`` wording."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from planner.cli import app
from planner.diagnose import Finding, diagnose_file, parse_log
from planner.gpus import get_gpu

runner = CliRunner()
LOGS = Path(__file__).parent / "fixtures" / "logs"
H100_LINES = (LOGS / "vllm-v1-llama8b-h100.log").read_text().splitlines()
PREFIX = "(EngineCore_DP0 pid=4187) ERROR 11-29 10:00:30 [core.py:708] "
API = "(APIServer pid=4021) INFO 11-29 10:05:10 [loggers.py:127] Engine 000: "


def cut_at(line: int, *extra: str) -> str:
    """The H100 start-up up to 1-based ``line``, then ``extra``."""
    return "\n".join([*H100_LINES[:line], *extra]) + "\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vllm.log"
    path.write_text(text)
    return path


def kinds(findings: list[Finding]) -> dict[str, Finding]:
    return {f.kind: f for f in findings}


def diagnose_cli(path: Path, *args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["diagnose", str(path), *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


# --------------------------------------------------------------------------- crashes


def test_oom_in_cuda_graph_capture_wont_start(tmp_path: Path) -> None:
    # cut after line 23 ("Capturing CUDA graphs ..."), a torch OOM as vLLM's core logs it
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.18 GiB of which 0.51 GiB is free."
    )
    path = write(tmp_path, cut_at(23, PREFIX + oom))
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    crash = kinds(dg.findings)["startup-crash"]
    assert crash.data["stage"] == "CUDA-graph capture"
    assert crash.data["error"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert crash.data["plan_term"] == "cuda_graph_bytes"
    assert crash.lines == [24]  # the error line is line 24 of this log
    assert "--enforce-eager" in crash.fix
    assert dg.outcome == "wont_start" and dg.outcome_source == "log"
    assert dg.outcome_reason.startswith("crashed during CUDA-graph capture: torch.OutOfMemory")
    code, data = diagnose_cli(path, "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 1 and data["outcome"] == "wont_start"


def test_sampler_warm_up_is_named_by_vllms_own_message(tmp_path: Path) -> None:
    # vLLM 0.11.0 vllm/v1/worker/gpu_model_runner.py:3222
    error = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine."
    )
    path = write(tmp_path, cut_at(25, PREFIX + error))
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    crash = kinds(dg.findings)["startup-crash"]
    assert crash.data["stage"] == "sampler warm-up"
    assert crash.data["plan_term"] == "activation_peak_bytes"
    assert crash.data["plan_bytes"] > 0
    assert crash.fix[0].startswith("a lower max_num_seqs")


def test_oom_while_loading_weights(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB."
    path = write(tmp_path, cut_at(11, PREFIX + oom))  # line 11: "Starting to load model"
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    assert kinds(dg.findings)["startup-crash"].data["stage"] == "weights load"
    assert dg.outcome == "wont_start"


def test_a_log_that_served_is_not_a_crash() -> None:
    # the OOM fixture runs out of memory after serving stat lines: a runtime OOM
    dg = diagnose_file(LOGS / "vllm-v1-oom-fragmented.log")
    assert "startup-crash" not in kinds(dg.findings)
    assert "oom-fragmentation" in kinds(dg.findings)


def test_a_cut_start_up_without_an_error_is_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, cut_at(22))
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    assert "startup-crash" not in kinds(dg.findings)
    assert dg.outcome != "wont_start"


def test_another_process_on_the_gpu(tmp_path: Path) -> None:
    # vLLM 0.11.0 vllm/v1/worker/gpu_worker.py:185-195 refuses when free < gmu x total
    error = (
        "ValueError: Free memory on device (60.87/79.19 GiB) on startup is less than desired "
        "GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce "
        "GPU memory used by other processes."
    )
    path = write(tmp_path, cut_at(10, PREFIX + error))
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"))
    found = kinds(dg.findings)
    assert found["startup-crash"].data["stage"] == "the start-up memory check"
    shared = found["gpu-shared"]
    # 79.19 - 60.87 = 18.32 GiB held by someone else; 60.87 / 79.19 = 0.768 -> 0.76
    assert round(shared.data["held_bytes"] / 2**30, 2) == 18.32
    assert shared.data["fitting_gpu_memory_utilization"] == 0.76
    # planned with that free memory, 0.76 passes the check but the graphs and the sampler
    # warm-up after the pool do not fit; 0.75 starts (tests/test_shared_gpu.py has its pool)
    assert shared.fix[0].startswith("gpu_memory_utilization 0.75 (starts in the free memory")
    assert shared.lines == [11]
    assert dg.outcome == "wont_start"


# --------------------------------------------------------------------------- odd args


def test_unhashable_logged_args_are_read_or_ignored(tmp_path: Path) -> None:
    args = "{'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_num_seqs': {[1]: 2}}"
    text = cut_at(
        1, f"(APIServer pid=1) INFO 11-29 09:59:44 [utils.py:233] non-default args: {args}"
    )
    log = parse_log(text)
    assert log.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert "max_num_seqs" not in log.settings  # not a value vLLM could run with
    config = H100_LINES[7].replace("max_seq_len=16000", "max_seq_len={[1]}")
    path = write(tmp_path, "\n".join([*H100_LINES[:7], config, *H100_LINES[8:]]) + "\n")
    result = runner.invoke(app, ["diagnose", str(path), "--model", "llama-3.1-8b", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code in (0, 1, 2)
    assert "Traceback" not in result.stdout + result.stderr


def test_the_version_banner_of_a_log_that_fails_early(tmp_path: Path) -> None:
    error = "ValueError: something vLLM refused"
    log = parse_log(cut_at(3, PREFIX + error))  # line 2: "vLLM API server version 0.11.0"
    assert log.version == "0.11.0"
    assert log.error == error


def test_pp_ranks_are_read_per_rank() -> None:
    lines = [
        "(Worker_PP0 pid=11) INFO 11-29 10:00:04 [gpu_model_runner.py:2020] Model loading took "
        "30.10 GiB and 3.2 seconds",
        "(Worker_PP1 pid=12) INFO 11-29 10:00:04 [gpu_model_runner.py:2020] Model loading took "
        "33.55 GiB and 3.3 seconds",
        "(Worker_PP2 pid=13) INFO 11-29 10:00:04 [gpu_model_runner.py:2020] Model loading took "
        "30.12 GiB and 3.1 seconds",
    ]
    log = parse_log("\n".join(lines) + "\n")
    assert {k: round(v / 2**30, 2) for k, v in log.pp_weights.items()} == {
        0: 30.10,
        1: 33.55,
        2: 30.12,
    }
    assert log.weights_bytes == log.pp_weights[1]  # the most-loaded stage, not the last line


# --------------------------------------------------------------------------- advice


def stat(
    running: int, waiting: int, usage: float, prompt: float = 500.0, gen: float = 900.0
) -> str:
    return (
        f"{API}Avg prompt throughput: {prompt} tokens/s, Avg generation throughput: {gen} "
        f"tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
        f"{usage}%, Prefix cache hit rate: 40.0%"
    )


def test_guide_low_concurrency_idle_gpu_raises_max_num_seqs(tmp_path: Path) -> None:
    # the guide's "并发低、GPU 闲" row: 16 running (= max_num_seqs 16), 55 waiting, 16 % KV
    # line 31 is "Application startup complete."; the stat lines follow from line 32
    path = write(tmp_path, cut_at(31, *(stat(16, 55, 16.0) for _ in range(4))))
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"), max_num_seqs=16)
    found = kinds(dg.findings)
    capped = found["seqs-capped"]
    # 16 sequences used 16 % of the pool: 85 % holds 16 x 85 / 16 = 85
    assert capped.data["suggested_max_num_seqs"] == 85
    assert capped.fix[0].startswith("max_num_seqs 85")
    assert "kv-low" not in found  # not "the cache is larger than the load"
    assert capped.lines == [32]


def test_guide_long_context_is_slow(tmp_path: Path) -> None:
    # the guide's "长上下文慢" row: 32k requests, prompt tokens/s 10x generation, a queue
    config = H100_LINES[7].replace("max_seq_len=16000", "max_seq_len=32768")
    lines = [*H100_LINES[:7], config, *H100_LINES[8:31]]
    path = write(
        tmp_path, "\n".join([*lines, *(stat(8, 6, 70.0, 9000.0, 900.0) for _ in range(4))])
    )
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=get_gpu("h100"), max_model_len=32768)
    slow = kinds(dg.findings)["long-prefill"]
    assert slow.data["prompt_tokens_per_s"] == 9000.0
    assert slow.fix[0].startswith("chunked prefill")
    assert any("--kv-cache-dtype fp8" in fix for fix in slow.fix)


def test_guide_oom_with_free_memory_is_fragmentation() -> None:
    # the guide's "OOM 但显存监控未满" row: 1.25 GiB free + 4.87 GiB reserved >= 1.96 GiB asked
    found = kinds(diagnose_file(LOGS / "vllm-v1-oom-fragmented.log").findings)
    assert "PYTORCH_CUDA_ALLOC_CONF" in found["oom-fragmentation"].fix[0]


def test_guide_slow_first_token_without_prefix_sharing() -> None:
    # the guide's "首 token 延迟高" row: the V0 log runs with prefix caching off
    found = kinds(diagnose_file(LOGS / "vllm-v0-qwen7b-a100.log").findings)
    assert found["prefix-off"].fix[0] == "--enable-prefix-caching"


def test_saturated_without_preemption_never_suggests_fewer_sequences() -> None:
    dg = diagnose_file(LOGS / "vllm-v1-llama8b-h100.log")
    pinned = kinds(dg.findings)["kv-pinned"]
    assert pinned.data["preemptions"] == 0
    assert not any("fewer" in fix for fix in pinned.fix)
