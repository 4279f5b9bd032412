"""The features a plan folds over (planner/features): each one module, one record.

Expected figures are arithmetic written out here; the LoRA buffer shapes are those
tests/test_lora_offload.py derives from vLLM 0.33's ``create_lora_weights``.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import pytest

from planner import features
from planner.features import FEATURES, FeatureRecord, Folded, fold
from planner.plan_types import Plan
from tests.helpers import plan_for

GIB = 1 << 30
# Llama-3.1-8B's LoRA bytes per rank, one slot: 2 B (bf16) x the elements
# tests/test_lora_offload.py derives (81,920 a layer x 32, embed_tokens and lm_head)
LLAMA_8B_PER_RANK = 2 * (32 * 81_920 + 2 * (128_256 + 4_096))
PLAN_FIELDS = {f.name for f in fields(Plan)}


def test_every_feature_is_one_module_with_the_three_names() -> None:
    names = [f.NAME for f in FEATURES]
    assert len(set(names)) == len(names)
    for f in FEATURES:
        assert callable(f.active) and callable(f.contribute), f.__name__
        assert f.__name__ == f"planner.features.{f.NAME}"


def test_a_plan_with_no_feature_has_no_records() -> None:
    p = plan_for("llama-3.1-8b", "h100")
    assert p.features == []
    assert p.host_ram.total == 0


def test_lora_contributes_its_buffers_and_cpu_cache_through_its_record() -> None:
    p = plan_for("llama-3.1-8b", "h100", enable_lora=True, max_loras=2, max_lora_rank=16)
    (record,) = p.features
    assert record.name == "lora"
    # 2 slots x rank 16 x the bytes per rank
    assert record.weights_bytes == 2 * 16 * LLAMA_8B_PER_RANK == p.weights.lora_bytes_per_rank
    # every worker (TP 1) keeps max_cpu_loras (default: max_loras = 2) whole adapters
    assert p.lora is not None
    assert record.host_ram == {"lora_cpu_cache": 2 * p.lora.adapter_bytes}
    assert p.host_ram.lora_cpu_cache == 2 * p.lora.adapter_bytes
    assert record.flags == ("--enable-lora", "--max-loras", "--max-lora-rank")
    assert all(n in p.notes for n in record.notes)


def test_deepep_counts_its_buffer_as_non_torch_memory() -> None:
    p = plan_for(
        "qwen3-30b-a3b",
        "h100",
        dp=2,
        enable_expert_parallel=True,
        all2all_backend="deepep_high_throughput",
    )
    (record,) = [r for r in p.features if r.name == "expert_parallel"]
    # VLLM_DEEPEP_BUFFER_SIZE_MB defaults to 1024 (vllm/envs.py): 1 GiB per GPU
    assert record.non_torch_bytes == GIB
    assert record.notes[0] in p.notes


def test_weight_offload_moves_weights_off_the_gpu_into_pinned_host_ram() -> None:
    p = plan_for("llama-3.1-8b", "l4", cpu_offload_gb=2)
    (record,) = p.features
    assert record.weights_bytes == -2 * GIB  # 2 GiB of the one GPU's weights
    assert record.host_ram == {"pinned_weights": 2 * GIB} and p.host_ram.pinned_weights == 2 * GIB


def test_the_host_ram_of_a_plan_is_the_sum_of_its_records() -> None:
    p = plan_for(
        "llama-3.1-8b", "h100", tp=2, kv_offloading_size=32, cpu_offload_gb=2, enable_lora=True
    )
    assert [r.name for r in p.features] == ["lora", "weight_offload", "kv_offload"]
    total = sum(size for r in p.features for size in r.host_ram.values())
    # 32 GiB of CPU KV tier (one DP engine) + 2 GiB offloaded from each of 2 GPUs + LoRA cache
    assert p.host_ram.kv_offload == 32 * GIB and p.host_ram.pinned_weights == 2 * 2 * GIB
    assert p.host_ram.total == total


def _fake(name: str, **record: Any) -> Any:
    return SimpleNamespace(
        NAME=name,
        active=lambda ctx: True,
        contribute=lambda ctx: FeatureRecord(name=name, **record),
    )


def test_a_new_feature_is_one_module_the_fold_reads() -> None:
    extra = _fake("extra", notes=("one note",), plan_fields={"layout_choice": "why"})
    folded = fold(SimpleNamespace(), (extra,))  # type: ignore[arg-type]
    assert folded.notes == ["one note"] and folded.plan_fields == {"layout_choice": "why"}
    assert set(folded.plan_fields) <= PLAN_FIELDS


def test_two_features_filling_the_same_plan_field_is_an_error() -> None:
    a, b = _fake("a", plan_fields={"mm": 1}), _fake("b", plan_fields={"mm": 2})
    folded = fold(SimpleNamespace(), (a, b))  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="mm"):
        _ = folded.plan_fields


def test_every_plan_field_a_feature_fills_is_a_plan_field() -> None:
    p = plan_for("llama-3.1-8b", "h100", enable_lora=True, kv_offloading_size=32)
    assert set(Folded(tuple(p.features)).plan_fields) <= PLAN_FIELDS
    assert features.__doc__ and "one record" in features.__doc__
