"""kvplan verify --gpu refuses a budget the device cannot allocate now, before it starts.

No GPU needed: the torch.cuda boundary (``is_available``, ``device_count``, ``current_device``,
``mem_get_info``) is faked, so these run on the CPU build of torch. The CPU twin (the budget
against the host's ``MemAvailable``) is ``verify-cpu-budget-beyond-the-host`` in
tests/test_bad_inputs.py.
"""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

import planner  # noqa: E402
from planner.cli import app  # noqa: E402
from planner.errors import UsageError  # noqa: E402
from probes.plan import VerifyRequest, check_device_free  # noqa: E402
from probes.probe import verify  # noqa: E402
from tests.helpers import settings  # noqa: E402
from tests.probe_helpers import tiny_spec  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
runner = CliRunner()


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch):
    """One CUDA device whose (free, total) the test sets; loading a model fails the test (the
    check must come first)."""
    state = {"free": 0, "total": 0, "asked": []}

    def mem_get_info(device: object = None) -> tuple[int, int]:
        state["asked"].append(device)
        return state["free"], state["total"]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the device was checked")

    monkeypatch.setattr(planner, "load_model_spec", no_load)
    return state


def run(*args: str):
    return runner.invoke(app, ["verify", "qwen3-0.6b", "--gpu", "--max-model-len", "256", *args])


def one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith("Error: --device cuda: the probe's budget, ")
    assert "Traceback" not in result.stderr
    return result.stderr


def test_utilization_over_what_is_free(fake_cuda) -> None:
    # 80 GiB card, 60 GiB free: 0.92 asks ceil(80 GiB x 0.92) = 73.60 GiB > 60 GiB;
    # the largest utilization that fits is floor(60 / 80 x 100) / 100 = 0.75 (exactly 60 GiB)
    fake_cuda.update(free=60 * GIB, total=80 * GIB)
    err = one_error_line(run("--gpu-memory-utilization", "0.92"))
    assert "73.60 GiB (gpu_memory_utilization 0.92 of 80.00 GiB)" in err
    assert "has free, 60.00 GiB (20.00 GiB held by other processes" in err
    assert "lower --gpu-memory-utilization to 0.75 or less, or free the GPU" in err
    assert fake_cuda["asked"] == [0]  # mem_get_info of the current device, once


def test_memory_budget_over_what_is_free(fake_cuda) -> None:
    # 70 GiB asked, 60.5 GiB free: --memory-budget 60GiB (whole GiB, not above what is free)
    fake_cuda.update(free=60 * GIB + 512 * MIB, total=80 * GIB)
    err = one_error_line(run("--memory-budget", "70GiB"))
    assert "70.00 GiB (--memory-budget), is more than the device has free, 60.50 GiB" in err
    assert "pass --memory-budget 60GiB or less, or free the GPU" in err


def test_max_memory_is_the_cap_that_counts(fake_cuda) -> None:
    # the probe allocates min(budget, --max-memory) = 50 GiB; 40 GiB are free
    fake_cuda.update(free=40 * GIB, total=80 * GIB)
    err = one_error_line(run("--memory-budget", "70GiB", "--max-memory", "50GiB"))
    assert "50.00 GiB (--max-memory)" in err and "lower --max-memory to 40GiB or less" in err


def test_a_device_index_torch_does_not_see(fake_cuda) -> None:
    result = runner.invoke(app, ["verify", "qwen3-0.6b", "--device", "cuda:3"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--device cuda:3: torch sees 1 CUDA device(s) (cuda:0 to cuda:0)" in result.stderr


def test_vllms_own_refusal_figures() -> None:
    # vLLM on an MI355X (planner/data/gpus.json, mi355x "memory" source): "Free memory on
    # device cuda:0 (84.11/287.98 GiB) on startup is less than desired GPU memory utilization
    # (0.95, 273.59 GiB)"; total 294,896 MiB; 294,896 MiB x 0.95 = 280,151.2 MiB = 273.59 GiB
    total, free = 294_896 * MIB, round(84.11 * GIB)
    req = VerifyRequest(settings=settings(gpu_memory_utilization=0.95), device="cuda:0")
    with pytest.raises(UsageError) as exc:
        check_device_free(req, free, total)
    message = str(exc.value)
    assert "273.59 GiB (gpu_memory_utilization 0.95 of 287.98 GiB)" in message
    assert "has free, 84.11 GiB" in message
    # floor(84.11 / 287.98 x 100) / 100 = 0.29, and ceil(total x 0.29) <= free
    assert math.ceil(total * 0.29) <= free < math.ceil(total * 0.30)
    assert "lower --gpu-memory-utilization to 0.29 or less" in message


def test_the_boundary_is_what_is_free() -> None:
    # a budget of exactly what is free passes; one byte more is refused
    req = VerifyRequest(settings=settings(), device="cuda", memory_budget_bytes=10 * GIB)
    check_device_free(req, 10 * GIB, 80 * GIB)
    with pytest.raises(UsageError, match="10.00 GiB \\(--memory-budget\\)"):
        check_device_free(req, 10 * GIB - 1, 80 * GIB)


def test_a_plan_fixes_the_utilization() -> None:
    # with --plan the plan's utilization wins over the flag: the advice is to plan again
    req = VerifyRequest(
        settings=settings(gpu_memory_utilization=0.9), device="cuda", num_gpu_blocks=1000
    )
    with pytest.raises(UsageError, match="plan again with --gpu-memory-utilization 0.5 or less"):
        check_device_free(req, 40 * GIB, 80 * GIB)


def test_the_library_checks_too(fake_cuda) -> None:
    # probes.probe.verify (no CLI) refuses before allocating anything
    fake_cuda.update(free=1 * GIB, total=80 * GIB)
    req = VerifyRequest(settings=settings(max_model_len=256), device="cuda")
    with pytest.raises(UsageError, match="lower --gpu-memory-utilization to 0.01 or less"):
        verify(tiny_spec("llama"), req)
