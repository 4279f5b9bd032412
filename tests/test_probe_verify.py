"""kvplan verify end to end on CPU: the plan against the budgeted allocator, bad input, CLI."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from planner.cli import app, main  # noqa: E402
from planner.deployment import settings_fields  # noqa: E402
from planner.errors import DoesNotFitError, KvplanError, UsageError  # noqa: E402
from planner.model.specs import KVDtype  # noqa: E402
from probes.alloc import BudgetedAllocator  # noqa: E402
from probes.plan import read_plan  # noqa: E402
from probes.probe import VerifyRequest, verify  # noqa: E402
from tests.helpers import settings  # noqa: E402
from tests.probe_helpers import tiny_config, tiny_spec  # noqa: E402

# the torch probes allocate and bisect on the CPU: ~2 minutes in all, behind `slow`
pytestmark = pytest.mark.slow

SETTINGS = {*settings_fields(), "prefix_caching"}

runner = CliRunner()
MIB = 1 << 20
SMALL = {"max_model_len": 256, "max_num_batched_tokens": 64, "max_num_seqs": 8}
SMALL_FLAGS = ["--max-model-len", "256", "--max-num-batched-tokens", "64", "--max-num-seqs", "8"]


def request(**overrides) -> VerifyRequest:
    """A CPU request in 4 MiB with SMALL settings; serve flags go to its ServeSettings."""
    flags = {**SMALL, **{k: v for k, v in overrides.items() if k in SETTINGS}}
    probe = {k: v for k, v in overrides.items() if k not in SETTINGS}
    return VerifyRequest(
        **{"device": "cpu", "memory_budget_bytes": 4 * MIB, **probe}, settings=settings(**flags)
    )


@pytest.mark.parametrize("name", ["llama", "gemma3", "mla", "hybrid"])
def test_plan_meets_the_allocator(name: str) -> None:
    result = verify(tiny_spec(name), request())
    mem, p, m = result.memory, result.predicted, result.measured
    # the pool built from the layers' geometry costs what the plan says per block
    assert result.pool_bytes_per_block == result.bytes_per_block
    # prediction: (budget - weights - what stays - activation peak) // bytes per block
    assert mem.non_kv_bytes == mem.weights_bytes + mem.persistent_bytes + mem.activation_bytes
    assert p.num_gpu_blocks == (4 * MIB - mem.non_kv_bytes) // result.bytes_per_block
    assert p.peak_bytes == mem.non_kv_bytes + p.num_gpu_blocks * result.bytes_per_block
    # vLLM's capacity formulas on both sides: the concurrency, and the "GPU KV cache size",
    # the blocks over the KV-cache groups at the smallest block size (a hybrid's or gemma-3's
    # groups share it out; kv_cache_utils.py 0.19.0:1297-1311)
    layout = planner.estimate(tiny_spec(name), settings(**SMALL)).vllm
    assert layout is not None
    groups, block = len(layout.groups), min(g.block_size for g in layout.groups)
    for figures in (p, m):
        concurrency = figures.num_gpu_blocks / result.blocks_per_request
        assert figures.max_concurrency == round(concurrency, 4)
        assert figures.kv_cache_size_tokens == figures.num_gpu_blocks // groups * block
    assert result.error_pct["num_gpu_blocks"] == round(
        (m.num_gpu_blocks - p.num_gpu_blocks) / p.num_gpu_blocks * 100, 3
    )
    # the planned pool ran its decode steps and the frontier is at or above it
    assert result.planned_run.ran and result.planned_run.num_sequences == 8
    assert m.num_gpu_blocks >= p.num_gpu_blocks and result.passed
    # it is a frontier: the trial one block above it ran out of memory
    outcome = {t.num_blocks: t.fits for t in result.trials}
    assert outcome[m.num_gpu_blocks] is True and outcome[m.num_gpu_blocks + 1] is False
    # every OOM released its memory; the probe ends with nothing allocated
    assert result.oom_recovered and mem.final_allocated_bytes == mem.baseline_bytes == 0
    assert m.peak_bytes <= 4 * MIB


@pytest.mark.parametrize(
    ("name", "quant", "kv_dtype", "bytes_per_block"),
    [
        # fp8 KV: 2 layers x 16 x 2 heads x (16 + 16) x 1 B = 2,048 B per block; fp8 weights
        ("llama", "fp8", KVDtype.FP8, 2_048),
        # MLA latent (32 + 8) x 1 B x 16 x 2 layers = 1,280 B
        ("mla", None, KVDtype.FP8, 1_280),
        # packed 4-bit experts, dequantized only for the experts a step uses
        ("moe", "mxfp4", KVDtype.AUTO, 4_096),
    ],
)
def test_quantized_weights_and_fp8_kv(name, quant, kv_dtype, bytes_per_block) -> None:
    config = {"quantization_config": {"quant_method": quant}} if quant else {}
    result = verify(tiny_spec(name, **config), request(kv_cache_dtype=kv_dtype))
    assert result.bytes_per_block == result.pool_bytes_per_block == bytes_per_block
    assert result.planned_run.ran and result.passed and result.oom_recovered


def test_plan_file_blocks_above_the_frontier_fail_the_gate() -> None:
    # a plan claiming 5,000 blocks of 4,096 B (20 MiB) in a 4 MiB budget
    result = verify(tiny_spec("llama"), request(num_gpu_blocks=5000))
    assert result.prediction_source == "plan file"
    assert not result.planned_run.ran and "memory budget" in (result.planned_run.error or "")
    assert result.measured.num_gpu_blocks < 1000 and not result.passed
    assert result.oom_recovered


def test_weights_buffer_occupies_the_same_bytes() -> None:
    real = verify(tiny_spec("llama"), request())
    buffered = verify(tiny_spec("llama"), request(weights_buffer=True))
    assert buffered.weights_mode == "one buffer"
    assert buffered.memory.weights_bytes == real.memory.weights_bytes
    # --weights-bytes occupies exactly that many bytes (views reuse the buffer cyclically)
    override = verify(tiny_spec("llama"), request(weights_bytes=300_000))
    assert override.memory.weights_bytes == 300_000


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        ({"memory_budget_bytes": None}, UsageError, "--device cpu needs --memory-budget"),
        ({"tolerance_pct": -1}, UsageError, "--tolerance must be a percentage"),
        ({"tolerance_pct": 100}, UsageError, "--tolerance must be a percentage"),
        ({"gpu_memory_utilization": 1.5}, UsageError, "--gpu-memory-utilization"),
        # tiny llama weights: 213,632 B
        ({"memory_budget_bytes": 200_000}, DoesNotFitError, "weights of one rank take 213,632 B"),
        ({"max_memory_bytes": 100_000}, DoesNotFitError, "budget is 100,000 B"),
        # 4,096 tokens = 256 blocks of 4,096 B = 1 MiB for one request; 1 MiB budget
        (
            {"memory_budget_bytes": MIB, "max_model_len": 4096},
            DoesNotFitError,
            "one 4,096-token request needs 256 blocks",
        ),
    ],
)
def test_bad_input_is_one_clear_error_and_leaves_nothing(overrides, error, message) -> None:
    mem = BudgetedAllocator(8 * MIB)
    with pytest.raises(error, match=message):
        verify(tiny_spec("llama"), request(**overrides), memory=mem)
    assert mem.allocated() == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_without_cuda_is_one_line_exit_1() -> None:
    result = runner.invoke(app, ["verify", "qwen3-0.6b", "--gpu"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: CUDA was requested (--gpu / --device cuda)")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.fixture
def tiny_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_config("llama")))
    return tmp_path


def test_cli_json_carries_predicted_measured_and_errors(tiny_dir) -> None:
    args = ["verify", str(tiny_dir), "--memory-budget", "4MiB", *SMALL_FLAGS, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    figures = {"num_gpu_blocks", "kv_cache_size_tokens", "max_concurrency", "peak_bytes"}
    assert set(data["predicted"]) == set(data["measured"]) == set(data["error_pct"]) == figures
    assert isinstance(data["predicted"]["peak_bytes"], int)
    assert data["passed"] is True and data["memory"]["budget_bytes"] == 4 * MIB


def test_cli_human_view(tiny_dir) -> None:
    result = runner.invoke(app, ["verify", str(tiny_dir), "--memory-budget", "4MiB", *SMALL_FLAGS])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Plan vs allocator" in out and "num_gpu_blocks" in out and "PASS" in out
    assert "memory back to baseline after every trial" in out


def test_cli_proves_a_saved_plan(tiny_dir, tmp_path) -> None:
    saved = runner.invoke(app, ["estimate", str(tiny_dir), *SMALL_FLAGS, "--json"])
    plan = tmp_path / "plan.json"
    plan.write_text(saved.stdout)
    assert read_plan(plan).max_num_seqs == 8
    result = runner.invoke(
        app, ["verify", "--plan", str(plan), "--memory-budget", "4MiB", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["max_model_len"], data["max_num_batched_tokens"]) == (256, 64)
    assert data["bytes_per_block"] == json.loads(saved.stdout)["vllm"]["bytes_per_block"]


def test_cli_plan_below_frontier_exits_3(tiny_dir, tmp_path) -> None:
    saved = json.loads(
        runner.invoke(app, ["estimate", str(tiny_dir), *SMALL_FLAGS, "--json"]).stdout
    )
    saved["num_gpu_blocks"] = 5000  # as a later kvplan estimate --gpu will write it
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(saved))
    result = runner.invoke(app, ["verify", "--plan", str(plan), "--memory-budget", "4MiB"])
    assert result.exit_code == 3
    assert "FAIL" in result.stdout
    assert result.stderr.startswith("Error: measured frontier ")
    assert "below the plan's 5,000 by more than 2%" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["verify"], 2, "Error: give MODEL or --plan FILE"),
        (["verify", "--plan", "/nonexistent/plan.json"], 2, "no such file"),
        (["verify", "llama-3.2-1b", "--memory-budget", "6G"], 2, "is ambiguous"),
        (
            ["verify", "llama-3.2-1b", "--memory-budget", "1GiB", "--tolerance", "150"],
            2,
            "[0, 100)",
        ),
        (["verify", "llama-3.2-1b"], 2, "--device cpu needs --memory-budget"),
        # Llama-3.2-1B: 1,235,814,400 params x 2 B of weights in 1 GiB
        (["verify", "llama-3.2-1b", "--memory-budget", "1GiB"], 1, "2,471,628,800 B"),
    ],
)
def test_cli_bad_input(args: list[str], code: int, message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


def test_cli_bad_plan_json(tmp_path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("{not json")
    result = runner.invoke(app, ["verify", "--plan", str(plan), "--memory-budget", "1GiB"])
    assert result.exit_code == 1
    assert "is not JSON (line 1, column 2" in result.stderr


def test_main_reports_without_traceback(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["kvplan", "verify", "llama-3.2-1b"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--memory-budget" in err and "Traceback" not in err


def test_verify_errors_are_kvplan_errors() -> None:
    assert issubclass(DoesNotFitError, KvplanError) and issubclass(UsageError, KvplanError)


def test_verify_help_and_estimate_never_import_torch() -> None:
    import subprocess

    code = (
        "import sys; from typer.testing import CliRunner; from planner.cli import app; "
        "r = CliRunner().invoke(app, ['verify', '--help']); assert r.exit_code == 0, r.output; "
        "assert '--memory-budget' in r.output and '--hf-cache' in r.output; "
        "r = CliRunner().invoke(app, ['estimate', 'qwen3-0.6b', '--json']); "
        "assert r.exit_code == 0; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
