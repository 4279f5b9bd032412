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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time they load on first use
    from planner.check import check_file
    from planner.deployment import Deployment, ServeSettings
    from planner.diagnose import diagnose_file, parse_log
    from planner.errors import (
        ConfigError,
        DoesNotFitError,
        KvplanError,
        ModelNotFoundError,
        UsageError,
    )
    from planner.gpus import Gpu, get_gpu
    from planner.kv_layout import KVEstimate, estimate, get_pp_indices
    from planner.model.config import parse_config
    from planner.model.load import LoadedModel, load_model
    from planner.model.resolve import load_model_spec
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
    from planner.plan_types import Plan, PlanOptions
    from planner.recommend import plan
    from planner.report import Report, report
    from planner.simulate import simulate_model
    from planner.weights import Weights
    from planner.weights import per_rank as weights_per_rank

# Public name -> (module, attribute). Loaded on first use (PEP 562), so that `kvplan --help`
# and a command that needs only some stages do not import every stage through this package.
_EXPORTS: dict[str, tuple[str, str]] = {
    "check_file": ("planner.check", "check_file"),
    "diagnose_file": ("planner.diagnose", "diagnose_file"),
    "parse_log": ("planner.diagnose", "parse_log"),
    "simulate_model": ("planner.simulate", "simulate_model"),
    "Deployment": ("planner.deployment", "Deployment"),
    "Gpu": ("planner.gpus", "Gpu"),
    "ServeSettings": ("planner.deployment", "ServeSettings"),
    "ConfigError": ("planner.errors", "ConfigError"),
    "DoesNotFitError": ("planner.errors", "DoesNotFitError"),
    "KvplanError": ("planner.errors", "KvplanError"),
    "ModelNotFoundError": ("planner.errors", "ModelNotFoundError"),
    "UsageError": ("planner.errors", "UsageError"),
    "get_gpu": ("planner.gpus", "get_gpu"),
    "KVEstimate": ("planner.kv_layout", "KVEstimate"),
    "estimate": ("planner.kv_layout", "estimate"),
    "get_pp_indices": ("planner.kv_layout", "get_pp_indices"),
    "load_model_spec": ("planner.model.resolve", "load_model_spec"),
    "parse_config": ("planner.model.config", "parse_config"),
    "LoadedModel": ("planner.model.load", "LoadedModel"),
    "load_model": ("planner.model.load", "load_model"),
    "ChunkedLocal": ("planner.model.specs", "ChunkedLocal"),
    "Engine": ("planner.model.specs", "Engine"),
    "FullAttention": ("planner.model.specs", "FullAttention"),
    "GatedDeltaNetState": ("planner.model.specs", "GatedDeltaNetState"),
    "KVDtype": ("planner.model.specs", "KVDtype"),
    "LayerSpec": ("planner.model.specs", "LayerSpec"),
    "MLA": ("planner.model.specs", "MLA"),
    "Mamba1State": ("planner.model.specs", "Mamba1State"),
    "Mamba2State": ("planner.model.specs", "Mamba2State"),
    "ModelSpec": ("planner.model.specs", "ModelSpec"),
    "SlidingWindow": ("planner.model.specs", "SlidingWindow"),
    "StateSpec": ("planner.model.specs", "StateSpec"),
    "cdiv": ("planner.model.specs", "cdiv"),
    "ModelRow": ("planner.model_list", "ModelRow"),
    "list_models": ("planner.model_list", "list_models"),
    "Plan": ("planner.recommend", "Plan"),
    "PlanOptions": ("planner.recommend", "PlanOptions"),
    "Report": ("planner.report", "Report"),
    "plan": ("planner.recommend", "plan"),
    "report": ("planner.report", "report"),
    "Weights": ("planner.weights", "Weights"),
    "weights_per_rank": ("planner.weights", "per_rank"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'planner' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


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
    "check_file",
    "diagnose_file",
    "estimate",
    "get_gpu",
    "get_pp_indices",
    "list_models",
    "load_model",
    "load_model_spec",
    "parse_config",
    "parse_log",
    "plan",
    "report",
    "simulate_model",
    "weights_per_rank",
]
