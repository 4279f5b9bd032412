"""On CUDA, verify's prediction is the planner's own `kvplan estimate --gpu` figure."""

from __future__ import annotations

import planner
from planner.gpus import get_gpu
from probes.plan import planner_num_gpu_blocks
from tests.helpers import plan_for


def test_planner_prediction_is_estimates_num_gpu_blocks() -> None:
    spec = planner.load_model_spec("qwen2.5-7b")
    gpu = get_gpu("h100")
    est = planner.estimate(spec, planner.ServeSettings(max_model_len=8192), gpu)
    predicted = planner_num_gpu_blocks(
        spec, est, total_bytes=gpu.memory_bytes, gpu_memory_utilization=0.9
    )
    p = plan_for(
        spec,
        gpu,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
    )
    assert predicted == p.vllm.num_gpu_blocks > 0
