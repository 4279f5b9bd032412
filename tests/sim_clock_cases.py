"""Replay the public vLLM serving benchmarks of ``tests/data/vllm_serving_benchmarks.json``
with ``kvplan simulate``'s step-time model: predicted / published per figure.

Used by ``tests/test_sim_clock.py`` and ``benchmarks/step_model_accuracy.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "vllm_serving_benchmarks.json"

# published key -> (figure, kvplan's BenchFigures attribute)
FIGURES = {
    "output_throughput": ("output_throughput", "output_throughput"),
    "request_throughput": ("output_throughput", "request_throughput"),
    "median_tpot_ms": ("tpot", "median_tpot_ms"),
    "mean_tpot_ms": ("tpot", "mean_tpot_ms"),
    "median_itl_ms": ("tpot", "median_itl_ms"),
    "median_ttft_ms": ("ttft", "median_ttft_ms"),
    "mean_ttft_ms": ("ttft", "mean_ttft_ms"),
}


def cases() -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return list(data["cases"])


def replay(case: dict[str, Any], profile: dict[str, float] | None = None) -> dict[str, float]:
    """kvplan's figures for ``case`` (BenchFigures' attributes), offline from the catalog."""
    from planner.deployment import Deployment, ServeSettings
    from planner.gpus import get_gpu
    from planner.model.load import load_model
    from planner.simulate import simulate_model
    from planner.simulate.spec import bench_workload

    serve = case.get("serve", {})
    settings = ServeSettings(
        tp=case.get("tp", 1),
        vllm_version=case["vllm"],
        gpu_memory_utilization=serve.get("gpu_memory_utilization"),
        max_model_len=serve.get("max_model_len"),
        max_num_batched_tokens=serve.get("max_num_batched_tokens"),
        enable_prefix_caching=serve.get("enable_prefix_caching", True),
    )
    model = load_model(case["model"], offline=True)
    c = case["client"]
    rate = c.get("request_rate", "inf")
    workload = bench_workload(
        prompt_tokens=c["input_len"],
        output_tokens=c["output_len"],
        dataset=c.get("dataset", "random"),
        num_requests=c["num_prompts"],
        request_rate=math.inf if rate == "inf" else float(rate),
        max_concurrency=c.get("max_concurrency"),
        max_model_len=serve.get("max_model_len"),
    )
    dep = Deployment(model=model, gpu=get_gpu(case["gpu"]), settings=settings)
    report = simulate_model(
        dep, workload, profile=profile, profile_source="test" if profile else ""
    )
    bench = report.runs[0].result.bench
    assert bench is not None
    return {k: getattr(bench, k) for _, k in FIGURES.values()}


def ratios(case: dict[str, Any], predicted: dict[str, float]) -> dict[str, float]:
    """predicted / published per figure the case publishes (output_throughput, tpot, ttft)."""
    out: dict[str, float] = {}
    for key, value in case["published"].items():
        if key in FIGURES and value:
            figure, attr = FIGURES[key]
            out.setdefault(figure, predicted[attr] / value)
    return out
