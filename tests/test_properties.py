"""Invariants under generated geometry (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner import Engine

ENGINES = st.sampled_from(list(Engine))


@st.composite
def configs(draw: st.DrawFn) -> dict:
    kv = draw(st.sampled_from([1, 2, 4, 8, 16]))
    groups = draw(st.integers(1, 8))
    head = draw(st.sampled_from([64, 80, 128, 256]))
    layers = draw(st.integers(1, 64))
    raw = {
        "model_type": draw(st.sampled_from(["llama", "mistral", "gemma2", "gpt_oss"])),
        "num_hidden_layers": layers,
        "num_attention_heads": kv * groups,
        "num_key_value_heads": kv,
        "head_dim": head,
        "hidden_size": kv * groups * head,
        "max_position_embeddings": draw(st.integers(16, 1 << 17)),
        "sliding_window": draw(st.one_of(st.none(), st.integers(1, 1 << 16))),
    }
    return raw


@settings(max_examples=150, deadline=None)
@given(configs(), ENGINES, st.integers(1, 1 << 17), st.integers(1, 1 << 17))
def test_bytes_never_decrease_as_context_grows(raw: dict, engine: Engine, a: int, b: int) -> None:
    spec = planner.parse_config(raw, name="gen", source="hypothesis")
    short, long_ = sorted((a, b))
    e_short = planner.estimate(spec, engine=engine, max_model_len=short)
    e_long = planner.estimate(spec, engine=engine, max_model_len=long_)
    assert e_short.kv_bytes_per_sequence <= e_long.kv_bytes_per_sequence
    assert e_short.kv_bytes_per_token == e_long.kv_bytes_per_token


@settings(max_examples=150, deadline=None)
@given(configs(), st.integers(1, 1 << 16))
def test_windows_never_cost_more_than_full_attention_plus_a_block(raw: dict, length: int) -> None:
    spec = planner.parse_config(raw, name="gen", source="hypothesis")
    est = planner.estimate(spec, max_model_len=length)
    n_layers = sum(g.num_layers for g in est.layer_groups)
    per_layer = est.layer_groups[0].bytes_per_token
    blocks_full = -(-length // est.block_size)
    # a sliding layer holds at most cdiv(L, block) + 1 blocks; vLLM pads groups to equal size
    bound = (blocks_full + 1) * est.block_size * per_layer * n_layers * 2
    assert est.kv_bytes_per_sequence <= bound
    assert est.kv_bytes_per_sequence >= 0


@settings(max_examples=100, deadline=None)
@given(configs())
def test_more_tensor_parallelism_never_raises_bytes_per_rank(raw: dict) -> None:
    spec = planner.parse_config(raw, name="gen", source="hypothesis")
    previous = None
    for tp in (1, 2, 4, 8, 16):
        try:
            est = planner.estimate(spec, tp=tp)
        except planner.UsageError:
            continue
        if previous is not None:
            assert est.kv_bytes_per_token <= previous
        previous = est.kv_bytes_per_token
