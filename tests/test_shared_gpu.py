"""Another process on the GPU. vLLM refuses to start when the free memory it
measures is less than ``gpu_memory_utilization x total`` (vLLM 0.11.0
``vllm/v1/worker/gpu_worker.py:185-195``; 0.33.0 ``vllm/v1/worker/utils.py:761-770``); kvplan
plans with the free memory (``--gpu-free-memory``, or the free memory a log states) and names
the fraction that starts in it, checked through what vLLM runs after sizing the pool."""

from __future__ import annotations

import json
import math
from pathlib import Path

from typer.testing import CliRunner

from planner.cli import app
from planner.diagnose import diagnose_file, parse_log
from planner.gpus import get_gpu
from planner.units import GIB
from tests.helpers import plan_for

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "80", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
LOGS = Path(__file__).parent / "fixtures" / "logs"
H100_LINES = (LOGS / "vllm-v1-llama8b-h100.log").read_text().splitlines()  # vLLM 0.11.0
PREFIX = "(EngineCore_DP0 pid=4187) ERROR 11-29 10:00:30 [core.py:708] "
REFUSAL = (
    "ValueError: Free memory on device (60.87/79.19 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU "
    "memory used by other processes."
)
H100 = get_gpu("h100").memory_bytes  # 79.18 GiB
CONTEXT = GIB // 2  # planner.budget.CUDA_CONTEXT_BYTES: created before vLLM measures


def estimate(*args: str) -> tuple[int, dict]:
    words = ["estimate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"]
    result = runner.invoke(app, [*words, *args, "--json"], env=ENV)
    return result.exit_code, json.loads(result.stdout)


# --------------------------------------------------------------------------- estimate


def test_less_free_memory_than_gmu_x_total_wont_start() -> None:
    # 60 GiB free less the 0.5 GiB context = 59.50 GiB < ceil(0.92 x 79.18 GiB) = 72.85 GiB
    code, data = estimate("--gpu-free-memory", "60GiB")
    assert code == 1 and data["outcome"] == "wont_start"
    assert data["outcome_reason"].startswith(
        "Free memory on device (59.50/79.18 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 72.85 GiB)"
    )
    (change,) = data["changes"]
    gmu = change["gpu_memory_utilization"]
    assert f"--gpu-memory-utilization {gmu}" in data["commands"]["vllm"]  # the one that starts
    assert math.ceil(gmu * H100) <= 60 * GIB - CONTEXT  # it passes vLLM's start-up check
    code, ok = estimate("--gpu-free-memory", "60GiB", "--gpu-memory-utilization", str(gmu))
    assert code == 0 and ok["outcome"] != "wont_start"


def test_the_fraction_offered_starts_after_the_pool_is_sized() -> None:
    # vLLM 0.11.0: floor(59.50 / 79.18 x 100) / 100 = 0.75 passes the start-up check
    # (59.39 GiB), but the CUDA graphs and the 1,024-row sampler warm-up then run in what the
    # pool leaves (gpu_worker.py 0.11.0 compile_or_warm_up_model): 0.75 fails there, and the
    # change offered is the highest hundredth below it that starts
    args = ("--gpu-free-memory", "60GiB", "--vllm-version", "0.11.0")
    assert math.floor((60 * GIB - CONTEXT) / H100 * 100) / 100 == 0.75
    code, at_75 = estimate(*args, "--gpu-memory-utilization", "0.75")
    assert code == 1 and at_75["outcome_reason"].startswith(
        "CUDA out of memory occurred when warming up sampler"
    )
    _, data = estimate(*args)
    gmu = data["changes"][0]["gpu_memory_utilization"]
    assert gmu < 0.75
    code, ok = estimate(*args, "--gpu-memory-utilization", str(gmu))
    assert code == 0 and ok["outcome"] != "wont_start"
    code, _ = estimate(*args, "--gpu-memory-utilization", str(round(gmu + 0.01, 2)))
    assert code == 1  # the highest hundredth that starts


# --------------------------------------------------------------------------- diagnose


def shared_log(tmp_path: Path, error: str = REFUSAL) -> Path:
    path = tmp_path / "vllm.log"
    path.write_text("\n".join([*H100_LINES[:10], PREFIX + error]) + "\n")  # line 11: the error
    return path


def test_diagnose_plans_with_the_free_memory_the_log_states(tmp_path: Path) -> None:
    dg = diagnose_file(shared_log(tmp_path), model="llama-3.1-8b", gpu=get_gpu("h100"))
    # the log's 60.87 GiB free was measured after vLLM's own CUDA context
    assert dg.settings["gpu_free_memory_bytes"] == round(60.87 * GIB) + CONTEXT
    assert dg.sources["gpu_free_memory_bytes"].startswith("log line 11")
    (shared,) = [f for f in dg.findings if f.kind == "gpu-shared"]
    d = shared.data
    # floor(60.87 / 79.18 x 100) / 100 = 0.76: 0.76 x 79.18 = 60.18 GiB <= 60.87 free, but
    # the 0.69 GiB left plus the 4.76 activation peak the warm-up reuses is under the graphs,
    # 32 layers x (67 + 67) graphs x 0.20 MiB = 0.84 GiB (0.11.0: planner.activation), and
    # the 4.68 GiB sampler warm-up; at 0.75 1.49 + 4.76 holds them
    sampler = 1024 * 128_256 * 4 * 9515 // 1000  # 0.11.0's sort over 1,024 rows
    activation = sampler + 8192 * 4096 * 2553 // 1000 + 27_100_000
    graphs = 32 * (67 + 67) * round(0.20 * 2**20)
    for gmu, starts in ((0.76, False), (0.75, True)):
        left = round(60.87 * GIB) - math.ceil(gmu * H100) + activation
        assert (graphs + sampler + 27_100_000 <= left) == starts
    assert d["starting_gpu_memory_utilization"] == 0.75
    # the pool at 0.75: vLLM's pool at 0.9 less the 0.15 of the GPU no longer requested (the
    # weights, activation and non-torch terms do not depend on the fraction)
    at_90 = plan_for("llama-3.1-8b", "h100", max_model_len=16_000, gpu_memory_utilization=0.9,
                     vllm_version="0.11.0", enable_prefix_caching=True)  # fmt: skip
    less = math.ceil(0.9 * H100) - math.ceil(0.75 * H100)
    assert d["starting_kv_cache_bytes"] == at_90.vllm.available_kv_bytes - less
    per_block = at_90.vllm.bytes_per_block  # 16 tokens x 128 KiB
    assert d["starting_kv_cache_tokens"] == d["starting_kv_cache_bytes"] // per_block * 16
    assert shared.fix[0].startswith("gpu_memory_utilization 0.75 (starts in the free memory: ")
    assert f"{d['starting_kv_cache_tokens']:,} tokens" in shared.fix[0]
    assert shared.lines == [11]


def test_the_fraction_above_it_is_refused_by_vllms_check(tmp_path: Path) -> None:
    # 0.77 x 79.18 = 60.97 GiB > the 60.87 GiB free: vLLM's own refusal
    dg = diagnose_file(
        shared_log(tmp_path), model="llama-3.1-8b", gpu=get_gpu("h100"), gpu_memory_utilization=0.77
    )
    assert dg.outcome == "wont_start"
    assert (
        dg.outcome_reason is not None
        and "Free memory on device (60.87/79.18 GiB)" in dg.outcome_reason
    )


def test_an_idle_gpu_is_planned_as_before() -> None:
    # the H100 fixture: 78.69 of 79.18 GiB free, 0.49 GiB (a CUDA context) held: no finding,
    # no free-memory setting, the plan of the GPU's total
    dg = diagnose_file(LOGS / "vllm-v1-llama8b-h100.log", model="llama-3.1-8b")
    assert "gpu_free_memory_bytes" not in dg.settings
    assert not [f for f in dg.findings if f.kind == "gpu-shared"]


def test_the_device_named_in_newer_releases_is_read() -> None:
    # vLLM 0.33.0 v1/worker/utils.py:763: f"Free memory on device {init_snapshot.device_} ..."
    log = parse_log(
        "ValueError: Free memory on device cuda:0 (8.08/191.98 GiB) on startup is less than "
        "desired GPU memory utilization (0.95, 182.39 GiB).\n"
    )
    assert log.startup_free_bytes == round(8.08 * GIB)
    assert log.total_gpu_bytes == round(191.98 * GIB)


def test_diagnose_text_and_json_say_what_starts(tmp_path: Path) -> None:
    path = shared_log(tmp_path)
    text = runner.invoke(
        app, ["diagnose", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"], env=ENV
    )
    assert text.exit_code == 1
    words = " ".join(text.stdout.split())
    assert "Planned with the free memory: at gpu_memory_utilization 0.75 vLLM starts with" in words
    args = ["diagnose", str(path), "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]
    data = json.loads(runner.invoke(app, args, env=ENV).stdout)
    (shared,) = [f for f in data["findings"] if f["kind"] == "gpu-shared"]
    assert shared["data"]["starting_gpu_memory_utilization"] == 0.75
    assert data["outcome"] == "wont_start"


def test_with_nothing_that_starts_the_command_is_the_users_own_settings() -> None:
    # 10 GiB free less the 0.5 GiB context cannot hold Llama-3.1-8B's 14.99 GiB of weights at
    # any fraction: no recommendation, and the command shown is the user's settings (vLLM's
    # default max_num_seqs, so no --max-num-seqs flag), labelled as one that won't start
    code, data = estimate("--gpu-free-memory", "10GiB")
    assert code == 1 and data["outcome"] == "wont_start" and data["recommended"] is None
    assert "--max-num-seqs" not in data["commands"]["vllm"]
    assert "--gpu-memory-utilization 0.92" in data["commands"]["vllm"]
    words = ["estimate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192"]
    text = runner.invoke(app, [*words, "--gpu-free-memory", "10GiB"], env=ENV).stdout
    assert "Recommended: none on this GPU" in text
    assert "your settings as a command (this won't start):" in text
    code, data = estimate("--gpu-free-memory", "10GiB", "--max-num-seqs", "64")
    assert "--max-num-seqs 64" in data["commands"]["vllm"]
