"""Compare-sweeps replay their variants in worker processes: the same report as one after
another, in the same order; ``KVPLAN_JOBS`` chooses how many (1 = serial)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from planner.errors import DoesNotFitError, UsageError
from planner.simulate import build_settings, simulate_model
from planner.simulate.compare import _jobs, simulate_all
from planner.simulate.spec import Arrival, LogNormal, WorkloadSpec, generate
from tests.helpers import deployment

SPEC = WorkloadSpec(
    name="sweep",
    num_requests=300,
    prompt_tokens=LogNormal(low=1, high=3000, mean=600, sigma=0.8),
    output_tokens=LogNormal(low=1, high=800, mean=150, sigma=0.8),
    arrival=Arrival(process="poisson", rate_per_s=50.0),
    seed=3,
)


def _sweep(monkeypatch: pytest.MonkeyPatch, jobs: str) -> dict[str, object]:
    monkeypatch.setenv("KVPLAN_JOBS", jobs)
    dep = deployment("llama-3.1-8b", kv_cache_memory_bytes=1 << 30, max_model_len=4096)
    variants, axes = build_settings(
        {"max-num-seqs": ["8", "16", "32", "64"], "prefix-caching": ["on", "off"]}, dep.settings
    )
    report = simulate_model(dep, generate(SPEC), variants=variants, axes=axes)
    return asdict(report)


def test_parallel_sweep_equals_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _sweep(monkeypatch, "1")
    parallel = _sweep(monkeypatch, "3")  # 8 variants over 3 workers: finishing out of order
    assert parallel == serial
    runs = serial["runs"]
    assert isinstance(runs, list) and [r["label"] for r in runs][:3] == [
        "prefix-caching=on, max-num-seqs=8",
        "prefix-caching=on, max-num-seqs=16",
        "prefix-caching=on, max-num-seqs=32",
    ]
    # the sweep means something: the variants differ (the 8,192-token pool preempts each
    # differently), so a mixed-up order would show
    assert len({r["result"]["preemptions"] for r in runs}) > 2


def test_a_failing_variant_raises_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # max_num_batched_tokens below max_num_seqs fails in the engine; the first such setting
    # in order is the one named, as in a serial run
    monkeypatch.setenv("KVPLAN_JOBS", "2")
    dep = deployment("llama-3.1-8b", kv_cache_memory_bytes=1 << 30, max_model_len=4096)
    variants, axes = build_settings(
        {"max-num-seqs": ["8", "600", "700"], "max-num-batched-tokens": ["512"]}, dep.settings
    )
    with pytest.raises(UsageError, match=r"max_num_batched_tokens \(512\) .* max_num_seqs \(600\)"):
        simulate_model(dep, generate(SPEC), variants=variants, axes=axes)


def test_a_planning_error_waits_for_the_settings_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # block size 16 runs (and fails in the engine: 512 < 600); block size 32 cannot even be
    # planned: 65 blocks of 16 tokens' memory is 32 blocks of 32, 31 usable x 32 = 992 tokens
    # < 1,024, but it comes second, so the engine's error is the one shown
    monkeypatch.setenv("KVPLAN_JOBS", "2")
    dep = deployment("llama-3.1-8b", max_model_len=1024)
    variants, axes = build_settings(
        {"block-size": ["16", "32"], "max-num-seqs": ["600"], "max-num-batched-tokens": ["512"]},
        dep.settings,
    )
    with pytest.raises(UsageError, match="must be greater than or equal to max_num_seqs"):
        simulate_model(dep, generate(SPEC), variants=variants, axes=axes, num_gpu_blocks=65)
    variants = [v.but(max_num_seqs=8) for v in variants]
    with pytest.raises(DoesNotFitError, match="block-size=32: vLLM won't start"):
        simulate_model(dep, generate(SPEC), variants=variants, axes=axes, num_gpu_blocks=65)


@pytest.mark.parametrize(("env", "variants", "jobs"), [("1", 8, 1), ("4", 8, 4), ("4", 2, 2)])
def test_jobs(monkeypatch: pytest.MonkeyPatch, env: str, variants: int, jobs: int) -> None:
    monkeypatch.setenv("KVPLAN_JOBS", env)
    assert _jobs(variants) == jobs


@pytest.mark.parametrize("env", ["0", "x", "-2"])
def test_bad_jobs(monkeypatch: pytest.MonkeyPatch, env: str) -> None:
    monkeypatch.setenv("KVPLAN_JOBS", env)
    with pytest.raises(UsageError, match="KVPLAN_JOBS must be a whole number >= 1"):
        _jobs(2)


def test_one_config_never_starts_a_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPLAN_JOBS", "bad")  # not even read for a single replay
    assert simulate_all(generate(SPEC), []) == []
