"""On CUDA, verify's prediction is the planner's own `kvplan estimate --gpu` figure."""

from __future__ import annotations

import planner
from probes.plan import planner_num_gpu_blocks
from tests.helpers import deployment, plan_for


def test_planner_prediction_is_estimates_num_gpu_blocks() -> None:
    dep = deployment("qwen2.5-7b", "h100", max_model_len=8192, gpu_memory_utilization=0.9)
    est = planner.estimate(dep.spec, dep.settings, dep.gpu)
    predicted = planner_num_gpu_blocks(dep, est)
    p = plan_for("qwen2.5-7b", "h100", max_model_len=8192, gpu_memory_utilization=0.9)
    assert predicted == p.vllm.num_gpu_blocks > 0


def test_an_a100_is_predicted_with_vllms_a100_batch_defaults() -> None:
    # On an A100-80GB vLLM runs 2,048 batched tokens (not the 8,192 of other >= 70 GiB GPUs),
    # so its activation peak and pool differ from a same-size H100-class GPU's: the probe's
    # prediction must follow the device's name, as kvplan estimate --gpu a100-80gb does.
    a100 = deployment("llama-3.1-8b", "a100-80gb", max_model_len=8192)
    est = planner.estimate(a100.spec, a100.settings, a100.gpu)
    assert est.vllm is not None and est.vllm.max_num_batched_tokens == 2_048
    p = plan_for("llama-3.1-8b", "a100-80gb", max_model_len=8192)
    assert planner_num_gpu_blocks(a100, est) == p.vllm.num_gpu_blocks
