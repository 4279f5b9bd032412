"""kvplan: KV-cache memory planner for LLM inference engines.

Public API (``examples/`` and ``benchmarks/`` use only this)::

    import planner
    spec = planner.load_model_spec("llama-3.1-8b")
    est = planner.estimate(spec, tp=2, kv_cache_dtype=planner.KVDtype.FP8)
    print(est.kv_bytes_per_token)

    dep = planner.Deployment(
        model=planner.load_model("llama-3.1-8b"),      # config + safetensors headers
        gpu=planner.get_gpu("h100"),
        settings=planner.ServeSettings(max_model_len=32_768),
    )
    print(planner.plan(dep).vllm.num_gpu_blocks)
"""

from __future__ import annotations

from planner.deployment import Deployment, Gpu, ServeSettings
from planner.errors import (
    ConfigError,
    DoesNotFitError,
    KvplanError,
    ModelNotFoundError,
    UsageError,
)
from planner.gpus import get_gpu
from planner.kv_layout import KVEstimate, estimate, get_pp_indices
from planner.model.config import load_model_spec, parse_config
from planner.model.load import LoadedModel, load_model
from planner.model.specs import (
    MLA,
    ChunkedLocal,
    Engine,
    FullAttention,
    GatedDeltaNetState,
    KVDtype,
    LayerSpec,
    Mamba1State,
    Mamba2State,
    ModelSpec,
    SlidingWindow,
    StateSpec,
    cdiv,
)
from planner.model_list import ModelRow, list_models
from planner.recommend import Plan, PlanOptions, Report, plan, report
from planner.weights import Weights
from planner.weights import per_rank as weights_per_rank

__version__ = "0.1.0"

__all__ = [
    "MLA",
    "Plan",
    "PlanOptions",
    "Report",
    "Weights",
    "ChunkedLocal",
    "ConfigError",
    "Deployment",
    "DoesNotFitError",
    "Engine",
    "FullAttention",
    "GatedDeltaNetState",
    "Gpu",
    "KVDtype",
    "KVEstimate",
    "KvplanError",
    "LayerSpec",
    "LoadedModel",
    "Mamba1State",
    "Mamba2State",
    "ModelNotFoundError",
    "ModelRow",
    "ModelSpec",
    "ServeSettings",
    "SlidingWindow",
    "StateSpec",
    "UsageError",
    "cdiv",
    "estimate",
    "get_gpu",
    "get_pp_indices",
    "list_models",
    "load_model",
    "load_model_spec",
    "parse_config",
    "plan",
    "report",
    "weights_per_rank",
]
