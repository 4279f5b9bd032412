"""Fuzzed configs: every mutation of a real config ends in a result or a KvplanError.

The inner loop (`-m "not slow"`) uses 150 examples; the long run (`slow`, which the default
run keeps) takes KVPLAN_FUZZ_EXAMPLES, 1,000 unless set.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner
from tests.conftest import all_fixture_folders, fixture_config
from tests.fuzz_helpers import LONG_EXAMPLES, RANDOM, mutate_mapping

CONFIGS = {f: json.loads(fixture_config(f).read_text()) for f in all_fixture_folders()}
KEYS = sorted({k for c in CONFIGS.values() for k in (c.get("text_config") or c)})


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    folder = draw(st.sampled_from(sorted(CONFIGS)))
    raw = copy.deepcopy(CONFIGS[folder])
    target = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    mutate_mapping(draw, target, KEYS)
    return raw


def check(raw: dict[str, Any]) -> None:
    try:
        spec = planner.parse_config(raw, name="fuzz", source="fuzz")
        est = planner.estimate(spec, max_model_len=4096, batch_sizes=(1,))
        assert est.kv_bytes_per_token >= 0 and est.kv_bytes_per_sequence >= 0
        for tp in (2, 8):
            try:
                planner.estimate(spec, tp=tp, max_model_len=4096, batch_sizes=())
            except planner.UsageError:
                pass
    except planner.KvplanError as exc:
        assert str(exc) and "\n" not in str(exc)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not RANDOM,
)
@given(mutated())
def test_mutated_configs_never_crash(raw: dict[str, Any]) -> None:
    check(raw)


@pytest.mark.slow
@settings(
    max_examples=LONG_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not RANDOM,
)
@given(mutated())
def test_mutated_configs_never_crash_long(raw: dict[str, Any]) -> None:
    check(raw)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e308, 2**80])
@pytest.mark.parametrize(
    "key",
    [
        "num_hidden_layers",
        "num_attention_heads",
        "hidden_size",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "sliding_window",
    ],
)
def test_non_finite_and_huge_sizes_are_refused(key: str, value: float) -> None:
    raw = copy.deepcopy(CONFIGS["meta-llama--Llama-3.1-8B"])
    raw[key] = value
    check(raw)
