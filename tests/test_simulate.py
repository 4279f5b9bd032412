"""The event-driven scheduler: hand-computed scenarios, the literal reference model, block
conservation, prefix sharing, the roofline, and model-level sizing."""

from __future__ import annotations

import random
from array import array
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
import planner.weights
from planner.errors import DoesNotFitError, UsageError
from planner.model.specs import KVDtype
from planner.simulate import (
    BlockLayout,
    Roofline,
    SimConfig,
    build_settings,
    engine,
    estimate_params,
    pool_for_gpu,
    simulate,
    simulate_model,
)
from planner.simulate.engine import Percentiles, _unused_slots
from planner.simulate.workload import Request, Workload
from tests.helpers import deployment, plan_for, sim_config
from tests.sim_reference import reference_for


def workload(*requests: Request) -> Workload:
    return Workload(name="test", source="test", requests=tuple(requests))


def config(blocks: int, block_size: int, **overrides: Any) -> SimConfig:
    # exactly ``blocks`` blocks (no null block added), 8 sequences, 300-token requests
    values: dict[str, Any] = dict(max_num_seqs=8, max_model_len=300)
    return sim_config(blocks, block_size=block_size, null_block=False, **{**values, **overrides})


# --------------------------------------------------------------------------- by hand


def test_four_requests_chunked_prefill_and_peak_blocks_by_hand() -> None:
    # 4 requests x (40 prompt, 10 output), block 16, budget 64 tokens/step, 19 usable blocks.
    # step 0: R0 prefills 40 (3 blocks), R1 the 24 left (2 blocks)     -> 5 used
    # step 1: R1 +16 -> 40 (3 blocks), R2 40 (3), R3 the 7 left (1)     -> 10 used
    # step 2: R3 +33 -> 40 (3)                                          -> 12 used
    # decoding: context 40 reaches 48 (a new block) at steps 9, 10, 10, 11; each request
    # finishes when its KV holds 40 + 10 - 1 = 49 tokens (4 blocks): R0 at step 9 -> peak at
    # step 9 is 4 + 3 + 3 + 3 = 13 blocks; R1, R2 then R3 finish at 10, 10, 11 -> 12 steps.
    w = workload(*(Request(40, 10) for _ in range(4)))
    r = simulate(w, config(20, 16))
    assert list(r.finish_steps) == [9, 10, 10, 11]
    assert r.steps == 12
    assert r.peak_blocks == 13
    assert r.preemptions == 0
    # 3 + 2 + 1 + 3 + 1 + 2 at prefill, then one block each at 48 tokens: 16 taken, 16 back
    assert r.allocated_blocks == r.freed_blocks == 16


@pytest.mark.parametrize(
    ("caching", "recomputed", "hit_tokens"),
    [
        # off: R1 re-prefills its 8 + 5 = 13 tokens; 12 had KV when it was preempted (the
        # 13th, sampled in step 4, was never computed), so 12 are recomputed
        (False, 12, 0),
        # on: R1's 3 full blocks were cached when it was preempted, R0 then evicted one
        # (the tail first), so 2 blocks = 8 tokens hit and 12 - 8 = 4 are recomputed
        (True, 4, 8),
    ],
)
def test_preemption_by_hand(caching: bool, recomputed: int, hit_tokens: int) -> None:
    # 2 requests x (8 prompt, 8 output), block 4, 6 usable blocks (7 minus the null block).
    # step 0: both prefill 8 tokens = 2 blocks each -> 4 used
    # step 1: both at 8 tokens cross into a 3rd block -> 6 used (full)
    # step 5: both at 12 tokens need a 4th; R0 (older) asks first, none is free, so the
    #         newest running request, R1, is preempted (frees 3) and R0 takes 1 -> 4 used
    # step 7: R0 finishes at 8 + 8 - 2 = 14 tokens, frees 4 -> 0 used
    # step 8: R1 resumes, prefilling 8 + 5 generated = 13 tokens = 4 blocks
    # step 10: R1 finishes (context 14) -> 11 steps, 1 preemption, peak 6 blocks
    w = workload(Request(8, 8), Request(8, 8))
    r = simulate(
        w,
        config(
            7,
            4,
            max_num_seqs=4,
            max_num_batched_tokens=16,
            max_model_len=16,
            prefix_caching=caching,
        ),
    )
    assert r.preemptions == 1 and r.preempted_requests == 1
    assert list(r.finish_steps) == [7, 10]
    assert r.steps == 11
    assert r.peak_blocks == 6 and r.usage_max == 1.0
    assert r.recomputed_tokens == recomputed
    assert r.prefix_hit_tokens == hit_tokens
    assert r.allocated_blocks == r.freed_blocks == 11


def test_shared_system_prompt_saves_exactly_its_full_blocks() -> None:
    # The seed's scenario: 100 concurrent requests, each an 800-token system prompt plus 200
    # tokens of its own, block 16. All are admitted in step 0 (budget 131,072 tokens, more
    # than 100 x 1,000 = 100,000).
    # Without prefix caching each holds cdiv(1000, 16) = 63 blocks: 100 x 63 = 6,300.
    # With it the prompt's 800 / 16 = 50 full blocks exist once: 50 + 100 x 13 = 1,350,
    # a saving of 99 x 50 = 4,950 blocks.
    w = workload(*(Request(1000, 2, prefix_id="system", prefix_tokens=800) for _ in range(100)))
    results = {
        caching: simulate(
            w,
            config(
                8000,
                16,
                max_num_seqs=128,
                max_num_batched_tokens=131072,
                max_model_len=2000,
                prefix_caching=caching,
            ),
        )
        for caching in (False, True)
    }
    assert results[False].peak_blocks == 6_300
    assert results[True].peak_blocks == 1_350
    assert results[True].prefix_blocks_saved == 99 * 50
    assert results[True].prefix_hit_tokens == 99 * 800
    assert results[True].prefix_hit_rate == pytest.approx(99 * 800 / (100 * 1000))


def test_prefix_shorter_than_a_block_shares_nothing() -> None:
    # only full blocks are hashed: a 15-token prefix at block 16 fills no block
    w = workload(*(Request(40, 2, prefix_id="p", prefix_tokens=15) for _ in range(3)))
    r = simulate(w, config(50, 16, prefix_caching=True, max_num_batched_tokens=256))
    assert r.prefix_hit_tokens == 0
    assert r.peak_blocks == 3 * 3  # cdiv(40, 16) = 3 each


def test_too_long_requests_are_rejected_and_counted() -> None:
    w = workload(Request(250, 51), Request(100, 10))  # 301 > max_model_len 300
    r = simulate(w, config(40, 16))
    assert r.rejected_too_long == 1
    assert r.completed == 1
    assert r.finish_steps[0] == -1


def test_arrivals_follow_the_clock() -> None:
    # constant 1 s steps: a request arriving at t = 5.5 is first seen by the step that starts
    # at t = 6 (after R0's steps 0..2, the pool idles from t = 3 to 5.5, then runs)
    w = workload(Request(10, 3, arrival_s=0.0), Request(10, 2, arrival_s=5.5))
    r = simulate(w, config(10, 16, max_model_len=100))
    assert list(r.finish_steps) == [2, 4]
    # TTFT: R0's prefill step ends at t = 1; R1 arrives at 5.5, its step ends at 6.5
    assert sorted([r.ttft_s.p50, r.ttft_s.max]) == [1.0, 1.0]
    assert r.duration_s == 7.5


def test_zero_capacity_is_a_clear_error() -> None:
    with pytest.raises(DoesNotFitError, match="null block"):
        simulate(workload(Request(10, 2)), config(1, 16))


def test_vllm_rule_tokens_at_least_seqs() -> None:
    with pytest.raises(UsageError, match="must be greater than or equal to max_num_seqs"):
        simulate(workload(Request(10, 2)), config(20, 16, max_num_seqs=128))


# --------------------------------------------------------------------------- generated


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Workload, SimConfig]:
    bs = draw(st.sampled_from([1, 2, 4, 8, 16]))
    n = draw(st.integers(1, 20))
    requests = []
    for _ in range(n):
        prompt = draw(st.integers(1, 90))
        output = draw(st.integers(1, 40))
        prefix = draw(st.sampled_from([None, ("a", 20), ("b", 37)]))
        if prefix and prefix[1] >= prompt:
            prompt = prefix[1] + draw(st.integers(1, 40))
        arrival = float(draw(st.integers(0, 25)))
        requests.append(
            Request(
                prompt, output, arrival, prefix[0] if prefix else None, prefix[1] if prefix else 0
            )
        )
    requests.sort(key=lambda r: r.arrival_s)
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    seqs = draw(st.integers(1, 8))
    cfg = SimConfig(
        num_gpu_blocks=-(-longest // bs) + 1 + draw(st.integers(0, 30)),
        layout=BlockLayout(bs),
        max_num_seqs=seqs,
        max_num_batched_tokens=max(seqs, draw(st.sampled_from([1, 8, 16, 32, 64, 128]))),
        max_model_len=longest,
        roofline=Roofline.constant(1.0),
        prefix_caching=draw(st.booleans()),
        # vLLM's release-dependent rules: all off (before 0.14), all on (0.24 and later), mixed
        reserve_full_isl=draw(st.booleans()),
        prepend_uncached_free=draw(st.booleans()),
        async_scheduling=draw(st.booleans()),
        # speculative lookahead: none, less than a block, more than the largest block
        num_lookahead_tokens=draw(st.sampled_from([0, 0, 1, 3, 17])),
        # the CPU KV tier: none, smaller than one prefix, a few prefixes, all of it
        cpu_blocks=draw(st.sampled_from([0, 0, 1, 3, 8, 40, 1000])),
    )
    return workload(*requests), cfg


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_event_driven_scheduler_matches_the_literal_model(case: tuple[Workload, SimConfig]) -> None:
    w, cfg = case
    got = simulate(w, cfg)
    ref = reference_for(w, cfg)
    assert list(got.finish_steps) == ref.finish_steps
    assert got.preemptions == ref.preemptions
    assert got.peak_blocks == ref.peak_blocks
    assert got.steps == ref.steps
    assert got.completed == ref.completed == len(w.requests)
    assert (got.prefix_hit_tokens, got.prefix_query_tokens, got.prefix_blocks_saved) == (
        ref.hit_tokens,
        ref.query_tokens,
        ref.blocks_saved,
    )
    assert got.recomputed_tokens == ref.recomputed_tokens
    assert got.cpu_hit_tokens == ref.cpu_hit_tokens


@st.composite
def layouts(draw: st.DrawFn) -> BlockLayout:
    bs = draw(st.sampled_from([1, 4, 16]))
    caps = tuple(draw(st.lists(st.integers(1, 6), max_size=2)))
    return BlockLayout(bs, draw(st.integers(0 if caps else 1, 2)), caps, draw(st.integers(0, 2)))


@settings(max_examples=200, deadline=None)
@given(scenarios(), layouts())
def test_blocks_are_conserved_and_never_exceed_the_pool(
    case: tuple[Workload, SimConfig], layout: BlockLayout
) -> None:
    w, cfg = case
    longest = cfg.max_model_len
    cfg = SimConfig(
        num_gpu_blocks=layout.blocks(longest) + 1 + cfg.num_gpu_blocks % 7,
        layout=layout,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=longest,
        roofline=Roofline.constant(0.5),
        prefix_caching=cfg.prefix_caching,
        reserve_full_isl=cfg.reserve_full_isl,
        prepend_uncached_free=cfg.prepend_uncached_free,
        async_scheduling=cfg.async_scheduling,
        num_lookahead_tokens=cfg.num_lookahead_tokens,
        cpu_blocks=cfg.cpu_blocks,
    )
    r = simulate(w, cfg)
    assert r.allocated_blocks == r.freed_blocks  # everything taken was given back
    assert r.peak_blocks <= r.usable_blocks
    assert r.max_used_blocks_seen <= r.usable_blocks
    assert all(0 <= u <= 1 for _, u in r.timeline)
    assert r.completed == len(w.requests)


def test_window_groups_stop_growing_at_their_cap() -> None:
    # one full group + one window group capped at 2 blocks, block 4: a request holding
    # 20 tokens needs 5 + min(5, 2) = 7 blocks
    layout = BlockLayout(4, 1, (2,), 0)
    assert [layout.blocks(t) for t in (0, 1, 4, 5, 8, 9, 20)] == [0, 2, 2, 4, 4, 5, 7]
    r = simulate(workload(Request(4, 17)), config(20, 4, layout=layout, max_model_len=40))
    assert r.peak_blocks == layout.blocks(4 + 17 - 1) == 7


@pytest.mark.parametrize(
    ("x", "expected"), [(0, 0), (1, 3), (3, 3 + 2 + 1), (4, 6), (9, 6 + 6 + 3)]
)
def test_unused_slot_sum(x: int, expected: int) -> None:
    # block 4: lengths 1, 2, 3, 4 leave 3, 2, 1, 0 slots empty in the last block
    assert _unused_slots(x, 4) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # 10 values in runs of 3 (10 9 8 | 7 6 5 | 4 3 2 | 1): nearest rank p50 = the
        # ceil(0.5 x 10) = 5th smallest = 5, p90 the 9th = 9, p99 the ceil(9.9) = 10th = 10
        ([10, 9, 8, 7, 6, 5, 4, 3, 2, 1], (5, 9, 10, 10)),
        # ties across runs: sorted 1 1 2 2 2 3 3; p50 the ceil(3.5) = 4th = 2, p90 the
        # ceil(6.3) = 7th = 3, p99 the 7th = 3
        ([2, 2, 2, 1, 1, 3, 3], (2, 3, 3, 3)),
    ],
)
def test_percentiles_of_a_long_array_select_in_sorted_runs(
    monkeypatch: pytest.MonkeyPatch, values: list[int], expected: tuple[int, ...]
) -> None:
    monkeypatch.setattr(engine, "SORT_RUN", 3)  # so that these few values span several runs
    monkeypatch.setattr(engine, "numpy_module", lambda: None)  # the runs, not numpy's sort
    got = Percentiles.of_array(array("d", values))
    assert (got.p50, got.p90, got.p99, got.max) == expected
    assert Percentiles.of(values) == got


@pytest.mark.parametrize("n", [70_000, 300_000])
def test_percentiles_sorted_by_numpy_are_the_runs(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    # with numpy installed a long column is sorted by it in place: the same values picked,
    # plain floats, and vllm bench serve's linear percentiles the same too
    pytest.importorskip("numpy")
    rng = random.Random(n)
    values = [rng.lognormvariate(-3, 1) for _ in range(n)] + [0.0, 0.0]
    rng.shuffle(values)
    fast = Percentiles.of_array(array("d", values)), engine._mean_median_p99(array("d", values))
    monkeypatch.setattr(engine, "numpy_module", lambda: None)
    slow = Percentiles.of_array(array("d", values)), engine._mean_median_p99(array("d", values))
    assert fast == slow
    assert {type(x) for x in (*fast[1], fast[0].p50, fast[0].max)} == {float}
    column = array("d", values)
    Percentiles.of_array(column)
    column.append(1.0)  # numpy let go of its buffer


def test_timeline_of_many_points_by_numpy_is_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    # past SORT_RUN points the timeline's peaks and the most blocks seen are numpy's maxima
    # over the same ints: the same points as max() over the slices
    pytest.importorskip("numpy")
    rng = random.Random(3)
    times = array("d", sorted(rng.uniform(0, 500) for _ in range(100_000)))
    useds = array("q", (rng.randint(0, 9_000) for _ in range(100_000)))
    fast = engine._downsample(times, useds, 9_001), engine._max_of(useds)
    monkeypatch.setattr(engine, "numpy_module", lambda: None)
    slow = engine._downsample(times, useds, 9_001), engine._max_of(useds)
    assert fast == slow and fast[1] == max(useds) and len(fast[0]) == engine.TIMELINE_POINTS + 1
    useds.append(1)  # numpy let go of the buffer


# --------------------------------------------------------------------------- roofline


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10**11),
    st.integers(0, 10**6),
    st.integers(1, 512),
    st.integers(0, 10**6),
    st.integers(1, 300),
    st.integers(0, 10**10),
    st.integers(0, 10**6),
)
def test_closed_form_decode_time_equals_the_sum_of_steps(
    weights: int, kv_bpt: int, n: int, kv: int, steps: int, fpt: int, attn: int
) -> None:
    roof = Roofline(weights, kv_bpt, 3 * 10**12, 10**15, fpt, attn, overhead_s=1e-4)
    total = sum(roof.step_s(n, kv + n * k, kv + n * k) for k in range(steps))
    assert roof.decode_s(n, kv, steps) == pytest.approx(total, rel=1e-9, abs=1e-12)


def test_roofline_step_time_by_hand() -> None:
    # 16 GB of weights + 1,000 tokens x 128 KiB of KV over 3.35 TB/s, against
    # 2 x 8e9 FLOPs x 10 tokens over 989 TFLOPS: memory-bound
    roof = Roofline(16 * 10**9, 131_072, 3_350 * 10**9, 989 * 10**12, 16 * 10**9, 0)
    memory = (16e9 + 1_000 * 131_072) / 3.35e12
    assert roof.step_s(10, 1_000, 0) == pytest.approx(memory)
    assert memory > 10 * 16e9 / 989e12


# --------------------------------------------------------------------------- model level


def test_llama_parameter_estimate() -> None:
    # embeddings 128,256 x 4,096 x 2 (untied) = 1,050,673,152; per layer attention
    # 2 x 4,096^2 + 2 x 4,096 x 1,024 = 41,943,040, MLP 3 x 4,096 x 14,336 = 176,160,768 and
    # two norms 8,192, x 32 layers = 6,979,584,000; final norm 4,096 -> 8,030,261,248 (published)
    p = estimate_params(planner.load_model_spec("llama-3.1-8b"))
    assert p.total == p.active == 8_030_261_248
    assert p.weight_bytes == 2 * 8_030_261_248


def test_moe_active_parameters() -> None:
    # Qwen3-30B-A3B: 48 layers, 128 experts (8 active) of 3 x 2,048 x 768; published 30.5 B
    # total, 3.3 B active
    p = estimate_params(planner.load_model_spec("qwen3-30b-a3b"))
    assert p.total == pytest.approx(30.5e9, rel=0.02)
    assert p.active == pytest.approx(3.3e9, rel=0.05)


def test_pool_for_gpu_is_the_planners_vllm_budget() -> None:
    # The simulator's pool is exactly what `kvplan estimate --gpu h100` reports.
    dep = deployment("llama-3.1-8b", "h100", max_model_len=8192)
    est = planner.estimate(dep.spec, dep.settings, dep.gpu)
    weights = planner.weights.for_deployment(dep)  # as every command weighs it
    blocks, available = pool_for_gpu(dep, est, weights)
    p = plan_for("llama-3.1-8b", "h100", max_model_len=8192)
    assert (blocks, available) == (p.vllm.num_gpu_blocks, p.vllm.available_kv_bytes)
    assert blocks == available // (2 << 20)  # 2 MiB blocks: 32 layers x 16 x 8 x 256 x 2 B


def test_settings_grid_is_the_cartesian_product() -> None:
    grid, axes = build_settings(
        {"block-size": ["16", "32"], "kv-cache-dtype": ["auto", "fp8"], "prefix-caching": ["on"]}
    )
    assert axes == ["block-size", "kv-cache-dtype"]
    assert [(s.block_size, s.kv_cache_dtype) for s in grid] == [
        (16, KVDtype.AUTO),
        (16, KVDtype.FP8),
        (32, KVDtype.AUTO),
        (32, KVDtype.FP8),
    ]
    with pytest.raises(UsageError, match="prefix-caching takes on or off"):
        build_settings({"prefix-caching": ["maybe"]})
    with pytest.raises(UsageError, match="cannot compare"):
        build_settings({"tp": ["1", "2"]})


def test_fp8_doubles_the_pool_in_blocks() -> None:
    dep = deployment("qwen2.5-7b", kv_cache_memory_bytes=1 << 30, max_model_len=4096)
    w = workload(*(Request(500, 100, prefix_id="s", prefix_tokens=300) for _ in range(50)))
    variants = [dep.settings.but(kv_cache_dtype=d) for d in (KVDtype.AUTO, KVDtype.FP8)]
    report = simulate_model(dep, w, variants=variants, axes=["kv-cache-dtype"])
    # Qwen2.5-7B bf16: 28 layers x 16 tokens x 4 KV heads x 256 x 2 B = 917,504 B per block
    assert [r.bytes_per_block for r in report.runs] == [917_504, 458_752]
    assert [r.num_gpu_blocks for r in report.runs] == [(1 << 30) // 917_504, (1 << 30) // 458_752]
    assert report.best is not None
    assert report.runs[0].result.completed == report.runs[1].result.completed == 50


def test_explicit_max_model_len_that_does_not_fit_is_refused() -> None:
    dep = deployment("llama-3.1-8b", max_model_len=4096)
    with pytest.raises(DoesNotFitError, match=r"Try --max-model-len 2032"):
        # 128 blocks - 1 null = 127 usable x 16 = 2,032 tokens
        simulate_model(dep, workload(Request(10, 2)), num_gpu_blocks=128)


def test_results_are_plain_data() -> None:
    r = simulate(workload(Request(10, 3)), config(10, 16, max_model_len=100))
    data = asdict(r)
    assert data["completed"] == 1 and isinstance(data["timeline"], list)


def test_identical_results_are_called_a_tie() -> None:
    # no shared prefixes and no preemption: prefix caching changes nothing, so neither wins
    dep = deployment("llama-3.1-8b", kv_cache_memory_bytes=4 << 30, max_model_len=4096)
    w = workload(*(Request(300 + i, 50) for i in range(20)))
    variants = [dep.settings.but(enable_prefix_caching=on) for on in (True, False)]
    report = simulate_model(dep, w, variants=variants, axes=["prefix-caching"])
    on, off = (r.result for r in report.runs)
    assert on.preemptions == off.preemptions == 0 and on.prefix_hit_tokens == 0
    assert report.best_reason.startswith(
        "no clear best for throughput: prefix-caching=on and prefix-caching=off are within 1%"
    )
