"""Every command over every catalog GPU: no traceback, a verdict each.

``kvplan estimate llama-3.1-8b --gpu mi300x`` once ended in a traceback while ``simulate`` on the
same GPU worked, because nothing ran every command over every entry. Here each catalog GPU goes
through ``estimate``, ``check``, ``simulate`` and ``diagnose`` (and ``verify``'s CPU path for one
GPU of each vendor) with a model of each attention kind, fp8 and bf16 KV; the answer is one of
the three verdicts, or a one-line ``Error:`` for a model whose weights do not fit. The fast
run pairs each GPU with one model and KV dtype in turn (every model and dtype still meets
NVIDIA and AMD cards); the full cross product is marked ``slow``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from planner.cli import app
from planner.gpus import GPUS

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "logs" / "vllm-v1-llama8b-h100.log"
CHAT = ROOT / "examples" / "workloads" / "chat.yaml"
ENV = {"HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "80", "CUDA_VISIBLE_DEVICES": ""}
VERDICTS = {"wont_start", "queues_at_worst_case", "fits_at_worst_case"}

# One bundled model of each attention kind (`kvplan models`).
MODELS = {
    "gqa": "llama-3.1-8b",
    "mla": "deepseek-v2-lite",
    "sliding window": "gemma-2-9b-it",
    "hybrid mamba": "nvidia-nemotron-3-nano-30b-a3b-bf16",
}
DTYPES = ("bf16", "fp8")
NAMES = [g.name for g in GPUS]
PAIRS = [(m, d) for m in MODELS.values() for d in DTYPES]
# fast: the i-th GPU of a vendor meets pair i mod 8; AMD's few GPUs take a second pair each
# so that every pair meets both vendors
_NVIDIA = [g.name for g in GPUS if g.vendor == "nvidia"]
_AMD = [g.name for g in GPUS if g.vendor == "amd"]
FAST = [(gpu, *PAIRS[i % len(PAIRS)]) for i, gpu in enumerate(_NVIDIA)] + [
    (gpu, *PAIRS[k % len(PAIRS)]) for i, gpu in enumerate(_AMD) for k in (i, i + len(_AMD))
]
FULL = [(gpu, m, d) for gpu in NAMES for m, d in PAIRS]

runner = CliRunner()


def _run(argv: list[str]) -> Result:
    result = runner.invoke(app, argv, env=ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        argv,
        result.exception,
    )
    assert "Traceback" not in result.output, argv
    return result


def _refused(result: Result) -> bool:
    """A one-line refusal (exit 1: the weights alone do not fit), never a half answer."""
    return (
        result.exit_code == 1
        and result.stdout == ""
        and result.stderr.startswith("Error: ")
        and result.stderr.count("\n") == 1
    )


def _estimate(gpu: str, model: str, dtype: str) -> str:
    argv = ["estimate", model, "--gpu", gpu, "--kv-cache-dtype", dtype]
    result = _run([*argv, "--max-model-len", "4096", "--json"])
    if _refused(result):
        assert "weights need" in result.stderr, result.stderr
        return "wont_start"
    assert result.exit_code in (0, 1), result.stderr
    out = json.loads(result.stdout)
    assert out["gpu"]["name"] == gpu
    assert (out["outcome"] == "wont_start") == (result.exit_code == 1)
    return str(out["outcome"])


def _simulate(gpu: str, model: str, dtype: str) -> set[str]:
    argv = ["simulate", model, "--gpu", gpu, "--kv-cache-dtype", dtype, "-w", str(CHAT)]
    result = _run([*argv, "--num-requests", "8", "--max-model-len", "4096", "--json"])
    if _refused(result):
        return {"wont_start"}
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["roofline"]["gpu"] == gpu  # every catalog entry has roofline figures
    return {run["outcome"] for run in out["runs"]}


def _check(gpu: str, pairs: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    plans = tmp_path / f"{gpu}.yaml"
    plans.write_text(
        "deployments:\n"
        + "".join(
            f"  - {{name: d{i}, model: {m}, gpu: {gpu}, kv_cache_dtype: {d}, "
            "max_model_len: 4096}\n"
            for i, (m, d) in enumerate(pairs)
        )
    )
    result = _run(["check", str(plans), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    deployments = json.loads(result.stdout)["deployments"]
    assert [d["gpu"] for d in deployments] == [gpu] * len(pairs)
    return [d["outcome"] for d in deployments]


def _diagnose(gpu: str, dtype: str) -> str:
    result = _run(["diagnose", str(LOG), "--gpu", gpu, "--kv-cache-dtype", dtype, "--json"])
    assert result.exit_code in (0, 1), result.stderr
    return str(json.loads(result.stdout)["outcome"])


def _every_command(gpu: str, model: str, dtype: str, tmp_path: Path) -> None:
    assert _estimate(gpu, model, dtype) in VERDICTS
    assert _simulate(gpu, model, dtype) <= VERDICTS
    assert set(_check(gpu, [(model, dtype)], tmp_path)) <= VERDICTS
    assert _diagnose(gpu, dtype) in VERDICTS


@pytest.mark.parametrize(("gpu", "model", "dtype"), FAST, ids=[f"{g}-{m}-{d}" for g, m, d in FAST])
def test_every_gpu_through_every_command(gpu: str, model: str, dtype: str, tmp_path: Path) -> None:
    _every_command(gpu, model, dtype, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("gpu", "model", "dtype"), FULL, ids=[f"{g}-{m}-{d}" for g, m, d in FULL])
def test_every_gpu_model_and_dtype(gpu: str, model: str, dtype: str, tmp_path: Path) -> None:
    _every_command(gpu, model, dtype, tmp_path)


@pytest.mark.parametrize("gpu", NAMES)
def test_check_gives_every_model_and_dtype_a_verdict_on_every_gpu(gpu: str, tmp_path: Path) -> None:
    assert set(_check(gpu, PAIRS, tmp_path)) <= VERDICTS


def test_the_fast_run_covers_every_model_and_dtype_on_both_vendors() -> None:
    assert {gpu for gpu, *_ in FAST} == set(NAMES)
    vendor = {g.name: g.vendor for g in GPUS}
    for pair in PAIRS:
        met = {vendor[gpu] for gpu, *p in FAST if tuple(p) == pair}
        assert met == {"nvidia", "amd"}, pair


def test_the_mi300x_estimate_that_crashed_now_plans() -> None:
    # issue 28: ValueError: invalid literal for int() with base 10: 'gfx942'
    result = _run(["estimate", "llama-3.1-8b", "--gpu", "mi300x", "--json"])
    assert result.exit_code in (0, 1)
    assert json.loads(result.stdout)["outcome"] in VERDICTS


def test_the_catalog_commands_list_every_entry() -> None:
    result = _run(["gpus", "--json"])
    assert result.exit_code == 0
    assert [g["name"] for g in json.loads(result.stdout)] == NAMES
    result = _run(["models", "--json"])
    assert result.exit_code == 0
    kinds = {m["name"]: m["attention_type"] for m in json.loads(result.stdout)}
    assert set(MODELS.values()) <= set(kinds)
    assert "mamba" in kinds[MODELS["hybrid mamba"]] and "sliding" in kinds[MODELS["sliding window"]]


@pytest.mark.slow  # torch's import and a CPU allocation: about 25 s each on 2 shared cores
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
@pytest.mark.parametrize("gpu", ["mi300x", "rtx-pro-6000"])
def test_verify_takes_a_plan_made_for_each_vendor(gpu: str, tmp_path: Path) -> None:
    """verify's CPU path over a plan saved for a catalog GPU (torch on CPU, a small budget)."""
    plan = tmp_path / "plan.json"
    argv = ["estimate", "qwen3-0.6b", "--gpu", gpu, "--max-model-len", "1024"]
    result = _run([*argv, "--max-num-batched-tokens", "1024", "--json"])
    assert result.exit_code == 0, result.stderr
    plan.write_text(result.stdout)
    argv = ["verify", "--plan", str(plan), "--device", "cpu", "--memory-budget", "3GiB"]
    result = _run([*argv, "--json"])
    assert result.exit_code in (0, 3), result.stderr  # 3: measured less than the plan
    assert json.loads(result.stdout)


# ------------------------------------------------------------------ custom GPUs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mib=st.integers(min_value=1, max_value=400 * 1024),
    extra_bytes=st.integers(min_value=0, max_value=(1 << 20) - 1),
    dtype=st.sampled_from(DTYPES),
    model=st.sampled_from(sorted(MODELS.values())),
)
def test_any_custom_gpu_size_gets_a_verdict(
    mib: int, extra_bytes: int, dtype: str, model: str
) -> None:
    """--gpu-memory of any size, to the byte (1 MiB to 400 GiB, odd sizes): a verdict or a
    one-line refusal, never a traceback."""
    size = f"{mib * (1 << 20) + extra_bytes}B"
    argv = ["estimate", model, "--gpu-memory", size, "--kv-cache-dtype", dtype]
    result = _run([*argv, "--max-model-len", "4096", "--json"])
    if _refused(result):
        return
    assert result.exit_code in (0, 1), result.stderr
    out = json.loads(result.stdout)
    assert out["outcome"] in VERDICTS
    assert out["gpu"]["memory_bytes"] == mib * (1 << 20) + extra_bytes


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpu=st.sampled_from(NAMES),
    gib=st.floats(min_value=0.5, max_value=300, allow_nan=False).map(lambda x: round(x, 3)),
)
def test_a_catalog_gpu_with_another_total_keeps_its_facts(gpu: str, gib: float) -> None:
    """--gpu G --gpu-memory X: the entry keeps its name and roofline, takes the new total."""
    argv = ["estimate", "llama-3.1-8b", "--gpu", gpu, "--gpu-memory", f"{gib}GiB"]
    result = _run([*argv, "--max-model-len", "4096", "--json"])
    if _refused(result):
        return
    assert result.exit_code in (0, 1), result.stderr
    out = json.loads(result.stdout)
    assert out["gpu"]["name"] == gpu and out["outcome"] in VERDICTS
