"""The simulator's clock (planner/simulate/clock.py), benchmark-shaped clients and --calibrate.

Expected values are worked by hand below from the terms' definitions, or are published
benchmark figures (tests/data/vllm_serving_benchmarks.json, each case citing its source).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import InputFileError, UsageError
from planner.gpus import get_gpu
from planner.simulate import Roofline, SimConfig, simulate
from planner.simulate.calibrate import parse_result, workload_of
from planner.simulate.clock import (
    API_TOKEN_S,
    EXPECTED_ERROR,
    StepModel,
    interconnect_of,
    load_profile,
    sum_max_lines,
)
from planner.simulate.engine import BenchFigures
from planner.simulate.spec import Arrival, bench_workload
from planner.simulate.workload import Request, Workload
from tests.helpers import sim_config
from tests.sim_clock_cases import cases, ratios, replay

DATA = Path(__file__).parent / "data"

# 1 GB of weights, 1 kB of KV a token, 1 TB/s, 1 PFLOP/s, 1 GFLOP a token
BARE = Roofline(10**9, 1000, 10**12, 10**15, 10**9, 0)


def model(**terms: float) -> StepModel:
    fields = {f: getattr(BARE, f) for f in BARE.__dataclass_fields__}
    return StepModel(**{**fields, "gpu": "t", **terms})


# --------------------------------------------------------------------------- the terms


def test_each_term_by_hand() -> None:
    m = model(
        memory_efficiency=0.5,
        compute_efficiency=0.25,
        layer_floor_s=0.001,
        overhead_s=0.0002,
        seq_overhead_s=0.00001,
    )
    # one decoding request at a 1,000-token context: (1e9 + 1e6) B / (1e12 x 0.5) = 2.002 ms
    # memory; compute 1e9 / (1e15 x 0.25) = 0.004 ms; + 1 ms of small kernels + 0.2 ms + 10 us
    assert m.step_s(1, 1000, 1000) == pytest.approx(0.002002 + 0.001 + 0.0002 + 0.00001)
    # a 4,096-token prefill chunk of one sequence: compute 4096e9 / 2.5e14 = 16.384 ms wins
    assert m.step_s(4096, 4096, 0, seqs=1) == pytest.approx(0.016384 + 0.001 + 0.0002 + 0.00001)
    # the bare roofline is the model with every term neutral
    assert model().step_s(7, 5000, 5000) == pytest.approx(BARE.step_s(7, 5000, 5000))


def test_tp_all_reduce_and_moe_terms_by_hand() -> None:
    m = model(comm_fixed_s=0.001, comm_s_per_token=1e-6)
    assert m.step_s(10, 0, 0) - model().step_s(10, 0, 0) == pytest.approx(0.001 + 10e-6)
    # 128 experts, 8 a token, all 1e9 weight bytes routed: one token reads 1/16 of them,
    # 64 tokens 1 - (15/16)^64 = 98.4 %
    moe = model(expert_bytes=10**9, experts=128, experts_per_token=8)
    assert moe.step_s(1, 0, 0) == pytest.approx(10**9 / 16 / 10**12)
    assert moe.step_s(64, 0, 0) == pytest.approx((1 - (15 / 16) ** 64) * 10**9 / 10**12)


def test_decode_stretch_is_the_sum_of_its_steps() -> None:
    m = model(
        memory_efficiency=0.7,
        compute_efficiency=0.4,
        layer_floor_s=0.0013,
        overhead_s=0.0003,
        seq_overhead_s=2e-5,
        comm_fixed_s=1e-4,
        comm_s_per_token=1e-7,
    )
    for n, kv, steps in ((1, 100, 50), (64, 64 * 3000, 200), (256, 10**6, 7)):
        one_by_one = sum(m.step_s(n, kv + n * k, kv + n * k) for k in range(steps))
        assert m.decode_s(n, kv, steps) == pytest.approx(one_by_one, rel=1e-12)


@pytest.mark.parametrize(
    "terms",
    [
        {},
        {"memory_efficiency": 0.9, "compute_efficiency": 0.6, "layer_floor_s": 0.0014},
        {"overhead_s": 0.0002, "seq_overhead_s": 2e-5, "comm_fixed_s": 1e-4},
        {"comm_s_per_token": 1e-7, "compute_efficiency": 0.01, "layer_floor_s": 0.0013},
    ],
)
def test_timers_are_the_methods_to_the_last_bit(terms: dict[str, float]) -> None:
    # the engine calls StepModel.timers()'s closures: the same floats as the methods, exactly,
    # memory- and compute-bound and across the crossing of the two lines
    import random

    m = model(**terms)
    step_s, decode_s = m.timers()
    rng = random.Random(5)
    for _ in range(3000):
        n, kv, steps = rng.randint(0, 600), rng.randint(0, 10**7), rng.randint(-1, 5000)
        tokens, pairs, seqs = rng.randint(0, 9000), rng.randint(0, 10**8), rng.randint(0, 300)
        assert decode_s(n, kv, steps) == m.decode_s(n, kv, steps)
        assert step_s(tokens, kv, pairs, seqs) == m.step_s(tokens, kv, pairs, seqs)
        assert step_s(n, kv, kv) == m.step_s(n, kv, kv)
    moe = model(expert_bytes=10**9, experts=128, experts_per_token=8)
    assert moe.timers() == (moe.step_s, moe.decode_s)
    assert moe.line_timer() is None


@pytest.mark.parametrize(
    "terms",
    [
        {},
        {"memory_efficiency": 0.9, "compute_efficiency": 0.6, "layer_floor_s": 0.0014},
        {"comm_s_per_token": 1e-7, "compute_efficiency": 0.01, "layer_floor_s": 0.0013},
        # Qwen2.5-7B's factors on one GPU (roofline_for): 2 x 7,615,616,512 FLOPs a token,
        # 4 x 28 heads x 128 x 28 layers a (query, key) pair, 28 x 2 x 4 x 128 x 2 KV bytes
        {
            "flops_per_token": 15_231_233_024,
            "attention_flops": 401_408,
            "kv_bytes_per_token": 57_344,
        },
        # products past 2**53: the ints' way (a 2**50-FLOP token times 9,000 tokens)
        {"flops_per_token": 2**50 + 1, "kv_bytes_per_token": 2**40 + 3},
        # a factor past 2**53 itself (not exact as a double): every call the ints' way
        {"attention_flops": 2**60 + 1},
    ],
)
def test_line_timer_is_the_closures_to_the_last_bit(terms: dict[str, float]) -> None:
    # compiled, the engine calls StepModel.line_timer()'s methods instead of the closures:
    # products of doubles where they are exact (below 2**53), the ints' products past that
    import random

    m = model(**terms)
    step_s, decode_s = m.timers()
    line = m.line_timer()
    assert line is not None
    rng = random.Random(6)
    for _ in range(3000):
        n, kv, steps = rng.randint(0, 600), rng.randint(0, 10**7), rng.randint(-1, 5000)
        tokens, pairs, seqs = rng.randint(0, 9000), rng.randint(0, 10**8), rng.randint(0, 300)
        assert line.decode(n, kv, steps) == decode_s(n, kv, steps)
        assert line.step(tokens, kv, pairs, seqs) == step_s(tokens, kv, pairs, seqs)
        assert line.step(n, kv, kv, 0) == step_s(n, kv, kv)
    # the boundary: the largest product a double holds exactly, and the first it rounds
    for kv in (2**53 // m.kv_bytes_per_token, 2**53 // m.kv_bytes_per_token + 1, 2**60):
        assert line.step(1, kv, 1, 0) == step_s(1, kv, 1)
        assert line.decode(2, kv, 3) == decode_s(2, kv, 3)


def test_sum_of_the_max_of_lines_by_hand() -> None:
    # max(10 - k, k) over k = 0..9: 10, 9, 8, 7, 6, 5, 6, 7, 8, 9 = 75
    assert sum_max_lines(((10.0, -1.0), (0.0, 1.0)), 10) == pytest.approx(75)
    assert sum_max_lines(((2.0, 0.0),), 4) == pytest.approx(8)


def test_interconnect_is_nvlink_for_sxm_parts_and_pcie_otherwise() -> None:
    assert interconnect_of(get_gpu("h100")) == "nvlink"
    assert interconnect_of(get_gpu("a100-80gb")) == "nvlink"
    assert interconnect_of(get_gpu("h100-pcie")) == "pcie"
    assert interconnect_of(get_gpu("l40s")) == "pcie"
    assert interconnect_of(replace(get_gpu("l40s"), interconnect="nvlink")) == "nvlink"


def test_tp2_pays_two_all_reduces_a_layer(tmp_path: Path) -> None:
    code, out, err = run(
        "llama-3.1-8b", "--gpu", "h100", "--tp", "2", "--avg-prompt-tokens", "100",
        "--avg-output-tokens", "10", "--num-requests", "5", "--json",
    )  # fmt: skip
    assert code == 0, err
    roof = json.loads(out)["roofline"]
    # 32 layers x 2 all-reduces x 12 us on NVLink; per token 64 x (2 x 1/2) x 4,096 x 2 B /
    # 300 GB/s
    assert roof["interconnect"] == "nvlink"
    assert roof["comm_fixed_s"] == pytest.approx(64 * 12e-6)
    assert roof["comm_s_per_token"] == pytest.approx(64 * 4096 * 2 / 300e9)


@pytest.mark.parametrize(
    ("model_name", "moe_layers"),
    # Qwen3-30B-A3B: 48 layers, decoder_sparse_step 1, no mlp_only_layers: all 48 are MoE;
    # DeepSeek-V2-Lite: 27 layers, first_k_dense_replace 1: 26 (their config.json, fixtures)
    [("qwen3-30b-a3b", 48), ("deepseek-v2-lite", 26)],
)
def test_expert_parallel_pays_a_gather_and_a_scatter_a_moe_layer(
    model_name: str, moe_layers: int
) -> None:
    args = (model_name, "--gpu", "h100", "--dp", "2", "--avg-prompt-tokens", "100",
            "--avg-output-tokens", "10", "--num-requests", "5", "--max-model-len", "4096",
            "--json")  # fmt: skip
    code, out, err = run(*args, "--enable-expert-parallel")
    assert code == 0, err
    roof = json.loads(out)["roofline"]
    # per MoE layer an all-gather (dispatch) and a reduce-scatter (combine) over the DP group:
    # 12 us each on NVLink, and the other rank's tokens' hidden states, 2,048 x 2 B each, at
    # 300 GB/s: (2 - 1) x 4,096 B / 300e9 a token per collective
    assert roof["interconnect"] == "nvlink"
    assert roof["comm_fixed_s"] == pytest.approx(2 * moe_layers * 12e-6)
    assert roof["comm_s_per_token"] == pytest.approx(2 * moe_layers * 2048 * 2 / 300e9)
    # without expert parallelism no such term (TP 1); a dense model with it is not replayed:
    # vLLM refuses expert parallelism without experts, and so do estimate, check and simulate
    plain = json.loads(run(*args)[1])["roofline"]
    assert plain["comm_fixed_s"] == 0.0 and plain["comm_s_per_token"] == 0.0
    code, _, err = run("llama-3.1-8b", *args[1:], "--enable-expert-parallel")
    assert code == 1 and "which has no experts" in err


# --------------------------------------------------------------------------- clients


def const(step_s: float = 1.0, **kw: Any) -> SimConfig:
    # 50 blocks of 16 tokens, 8 sequences, 300-token requests, every step step_s seconds
    return sim_config(50, null_block=False, max_num_seqs=8, max_model_len=300, step_s=step_s, **kw)


def test_closed_loop_sends_the_next_request_at_a_completion() -> None:
    # C = 1, three requests of 10 prompt / 3 output tokens, 1 s steps: each prefills in a step
    # (first token at +1 s) and decodes two more (finish at +3 s); the next is sent then
    w = Workload(
        name="t", source="t", requests=tuple(Request(10, 3) for _ in range(3)), max_concurrency=1
    )
    r = simulate(w, const())
    assert r.duration_s == pytest.approx(9.0)
    assert r.ttft_s.max == pytest.approx(1.0) and r.e2e_s.max == pytest.approx(3.0)
    # C = 2: two run together (finish at 3 s), the third is sent at 3 s and ends at 6 s
    r = simulate(replace(w, max_concurrency=2), const())
    assert r.duration_s == pytest.approx(6.0) and list(r.finish_steps) == [2, 2, 5]


def test_closed_loop_waits_for_a_late_arrival_too() -> None:
    # C = 1; the second request is only scheduled to be sent at 10 s: it goes then, not at 3 s
    w = Workload(
        name="t", source="t", requests=(Request(10, 3), Request(10, 3, 10.0)), max_concurrency=1
    )
    r = simulate(w, const())
    assert r.duration_s == pytest.approx(13.0)


def test_request_latency_delays_the_scheduler_and_counts_in_ttft() -> None:
    # 50 ms from send to scheduler: the one request is scheduled at 0.05 s, its TTFT is
    # 0.05 + 1 s, and its E2E 3.05 s; a closed loop sends the next at its completion (3.05 s)
    w = Workload(name="t", source="t", requests=(Request(10, 3), Request(10, 3)), max_concurrency=1)
    r = simulate(w, const(request_latency_s=0.05))
    assert r.ttft_s.max == pytest.approx(1.05) and r.e2e_s.max == pytest.approx(3.05)
    assert r.duration_s == pytest.approx(6.1)
    # 2 s more per other request in flight: of two sent together, R0 reaches the scheduler
    # at 0.05 s (steps 0.05-1.05 prefill, then two decodes to 3.05), R1 at 2.05 s, admitted
    # into the step from 2.05 to 3.05: TTFT 3.05 s, finish at 5.05 s (without the 2 s both
    # reach it at 0.05 s and prefill in the first step: TTFT 1.05 s)
    both = Workload(name="t", source="t", requests=(Request(10, 3), Request(10, 3)))
    r = simulate(both, const(request_latency_s=0.05, stream_latency_s=2.0))
    assert r.ttft_s.max == pytest.approx(3.05) and r.e2e_s.max == pytest.approx(5.05)
    r = simulate(both, const(request_latency_s=0.05))
    assert r.ttft_s.max == pytest.approx(1.05)


def test_the_api_server_streams_earlier_requests_tokens_first() -> None:
    # three requests of 10 prompt / 3 output tokens sent at once, 1 s steps, 50 ms to the
    # scheduler and 1 s of the API server a streamed token: it takes 3 s on each request's
    # tokens, first come first served, so R1 is handed over at 3 s and R2 at 6 s (+ 50 ms).
    # R0: prefill 0.05-1.05, decodes to 3.05; R1: prefill 3.05-4.05 (TTFT 4.05 from its
    # send at 0), finish 6.05; R2: TTFT 7.05, finish 9.05
    w = Workload(name="t", source="t", requests=tuple(Request(10, 3) for _ in range(3)))
    r = simulate(w, const(request_latency_s=0.05, api_token_s=1.0))
    assert r.duration_s == pytest.approx(9.05)
    assert r.ttft_s.max == pytest.approx(7.05) and r.e2e_s.max == pytest.approx(9.05)
    assert r.ttft_s.p50 == pytest.approx(4.05)  # R1's
    # stream_latency_s is the same server's time on the others' tokens: the longer of the two
    # counts, once. 2 s a request in flight when it is pulled: R1's 2 s (R0 in flight) < its
    # 3 s wait, as above; 4 s: R1 waits 4 s, not 3 + 4 (arrives 4.05, TTFT 5.05); R2 is
    # pulled at 4.05, R0 done: 4 s < its 6 s wait, it arrives at 6.05 and prefills in the
    # step 6.05-7.05 beside R1's decode (TTFT 7.05), decodes to 9.05
    r = simulate(w, const(request_latency_s=0.05, stream_latency_s=2.0, api_token_s=1.0))
    assert r.ttft_s.p50 == pytest.approx(4.05) and r.ttft_s.max == pytest.approx(7.05)
    r = simulate(w, const(request_latency_s=0.05, stream_latency_s=4.0, api_token_s=1.0))
    assert r.ttft_s.p50 == pytest.approx(5.05) and r.ttft_s.max == pytest.approx(7.05)
    assert r.duration_s == pytest.approx(9.05)
    # without it all three reach the scheduler at 0.05 s and prefill in one step
    r = simulate(w, const(request_latency_s=0.05))
    assert r.ttft_s.max == pytest.approx(1.05) and r.duration_s == pytest.approx(3.05)


def test_the_api_server_queue_is_an_open_loops_only() -> None:
    # a closed loop (C = 1) sends one request a completion: the API server's turn is not
    # modelled there (test_closed_loop_sends_the_next_request_at_a_completion's 9 s)
    w = Workload(
        name="t", source="t", requests=tuple(Request(10, 3) for _ in range(3)), max_concurrency=1
    )
    assert simulate(w, const(api_token_s=1.0)).duration_s == pytest.approx(9.0)


def test_api_token_s_is_its_source_run_duration_over_its_tokens() -> None:
    # tests/data/api_server_throughput.json: vllm-project/vllm#12287's 'Before' run, 6,000
    # requests, 1,211,959 generated tokens in 94.31 s (12,850.45 output tok/s published)
    data = json.loads((DATA / "api_server_throughput.json").read_text())
    run = next(m for m in data["measurements"] if m["split"] == "calibration")["published"]
    assert API_TOKEN_S == pytest.approx(run["duration_s"] / run["total_generated_tokens"])
    assert 1 / API_TOKEN_S == pytest.approx(run["output_throughput"], rel=1e-4)
    assert API_TOKEN_S == pytest.approx(77.8e-6, rel=1e-3)
    assert run["request_throughput"] == pytest.approx(run["completed"] / run["duration_s"], 1e-3)
    for m in data["measurements"]:
        assert m["source"].startswith("https://") and m["split"] in ("calibration", "cross-check")
        assert m["id"] not in {c["id"] for c in cases()}  # none is a replayed case


def test_bench_figures_by_vllm_bench_names() -> None:
    w = Workload(name="t", source="t", requests=(Request(10, 3), Request(10, 5)))
    b = simulate(w, const()).bench
    assert b is not None
    # both prefill in step 0 (t = 1); R0 decodes to t = 3, R1 to t = 5
    assert b.completed == 2 and b.duration == pytest.approx(5.0)
    assert b.request_throughput == pytest.approx(0.4)
    assert b.output_throughput == pytest.approx(8 / 5)
    assert b.mean_ttft_ms == pytest.approx(1000) and b.median_e2el_ms == pytest.approx(4000)
    assert b.p99_e2el_ms == pytest.approx(3000 + 2000 * 0.99)  # numpy's linear percentile
    # every inter-token gap is one 1 s step: 2 + 4 of them
    assert b.mean_itl_ms == pytest.approx(1000) and b.median_itl_ms == pytest.approx(1000)
    assert b.mean_tpot_ms == pytest.approx(1000)


def test_gamma_arrivals_keep_the_rate_and_burstiness_spreads_them() -> None:
    import random

    n = 20000
    even = Arrival(process="poisson", rate_per_s=10, burstiness=4.0).times(random.Random(1), n)
    bursty = Arrival(process="poisson", rate_per_s=10, burstiness=0.25).times(random.Random(1), n)

    def cv(times: list[float]) -> float:
        gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
        mean = sum(gaps) / len(gaps)
        return math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean

    # gamma(shape k): mean 1 / rate, coefficient of variation 1 / sqrt(k)
    assert even[-1] / n == pytest.approx(0.1, rel=0.03)
    assert bursty[-1] / n == pytest.approx(0.1, rel=0.1)
    assert cv(even) == pytest.approx(0.5, rel=0.05) and cv(bursty) == pytest.approx(2, rel=0.1)


def test_bench_workload_shapes() -> None:
    w = bench_workload(
        prompt_tokens=1024, output_tokens=128, dataset="random", num_requests=10,
        max_concurrency=4, shared_prefix=100,
    )  # fmt: skip
    assert all(r.prompt_tokens == 1124 and r.output_tokens == 128 for r in w.requests)
    assert all(r.prefix_id == "shared" and r.prefix_tokens == 100 for r in w.requests)
    assert w.max_concurrency == 4 and all(r.arrival_s == 0 for r in w.requests)
    spread = bench_workload(
        prompt_tokens=100, output_tokens=100, dataset="random", range_ratio=0.5, num_requests=500
    )
    assert {r.prompt_tokens for r in spread.requests} <= set(range(50, 151))
    assert len({r.prompt_tokens for r in spread.requests}) > 50
    sharegpt = bench_workload(prompt_tokens=None, output_tokens=None, dataset="sharegpt")
    mean = sum(r.prompt_tokens for r in sharegpt.requests) / 1000
    assert mean == pytest.approx(230, rel=0.15)  # PR #18566: 229,711 tokens / 1,000 prompts
    with pytest.raises(UsageError, match="--avg-prompt-tokens and --avg-output-tokens"):
        bench_workload(prompt_tokens=10, output_tokens=None)


@pytest.mark.parametrize("n", [500, 40_000])  # the loop, and numpy's way from BULK_DRAWS
def test_bench_workload_cuts_outputs_to_max_model_len(n: int) -> None:
    # lognormal lengths (sigma 1.0 / 0.8) around 700 + 300 tokens under a 2,000-token limit:
    # prompts are drawn up to limit - 1 and outputs up to limit // 2, and an output is cut to
    # limit - prompt (at least 1) where the two pass the limit; the others are as drawn
    limit = 2000
    drawn = bench_workload(prompt_tokens=700, output_tokens=300, num_requests=n)
    cut = bench_workload(prompt_tokens=700, output_tokens=300, num_requests=n, max_model_len=limit)
    assert [r.prompt_tokens for r in cut.requests] == [
        min(r.prompt_tokens, limit - 1) for r in drawn.requests
    ]
    over = 0
    for a, b in zip(drawn.requests, cut.requests, strict=True):
        o = min(a.output_tokens, limit // 2)
        p = b.prompt_tokens
        over += p + o > limit
        assert b.output_tokens == (o if p + o <= limit else max(1, limit - p))
    assert over > 0  # the cut is exercised


# --------------------------------------------------------------------------- public benchmarks


@pytest.mark.parametrize(
    "case", [c for c in cases() if c["split"] == "fitted"], ids=lambda c: c["id"]
)
def test_fitted_cases_within_the_stated_error(case: dict[str, Any]) -> None:
    # a figure the case names in not_fitted (no term fits it, the reason beside it) is off by
    # more than the stated error, or the note is stale; every other figure is within it
    missed = case.get("not_fitted", {})
    for figure, ratio in ratios(case, replay(case)).items():
        within = abs(ratio - 1) <= EXPECTED_ERROR[figure]
        assert within != (figure in missed), (figure, ratio)


def held_out_ratios() -> dict[str, list[float]]:
    by_figure: dict[str, list[float]] = {}
    for case in (c for c in cases() if c["split"] == "held-out"):
        for figure, ratio in ratios(case, replay(case)).items():
            by_figure.setdefault(figure, []).append(ratio)
    return by_figure


def test_held_out_cases_meet_the_stated_error_on_80_percent() -> None:
    by_figure = held_out_ratios()
    # issue 24's goal is judged on public results not fitted on: 20 cases publish output
    # tok/s and TTFT, 21 TPOT (tests/data/vllm_serving_benchmarks.json)
    assert {f: len(v) for f, v in by_figure.items()} == {
        "output_throughput": 20,
        "tpot": 21,
        "ttft": 20,
    }
    for figure, values in by_figure.items():
        within = sum(abs(v - 1) <= EXPECTED_ERROR[figure] for v in values)
        assert within >= 0.8 * len(values), (figure, sorted(values))


def test_issue_24_goal_on_held_out_cases() -> None:
    # issue 24's goal, +-20 % for output tok/s and TPOT and +-35 % for TTFT on >= 80 % of
    # held-out cases, holds whatever EXPECTED_ERROR says (18 of 20, 17 of 21 and 16 of 20
    # with the API server's per-token term; 17, 16 and 15 before it)
    goal = {"output_throughput": 0.20, "tpot": 0.20, "ttft": 0.35}
    for figure, values in held_out_ratios().items():
        within = sum(abs(v - 1) <= goal[figure] for v in values)
        assert within >= 0.8 * len(values), (figure, sorted(values))


def test_every_case_cites_a_source_and_a_split() -> None:
    for case in cases():
        assert case["source"].startswith("https://"), case["id"]
        assert case["split"] in ("fitted", "held-out")


# --------------------------------------------------------------------------- --calibrate

# er0080/vllm-benchmarking packages/protocol/tests/fixtures/bench_serve_v0.25.1.json @ 35d3779
# (a `vllm bench serve --save-result` file of vLLM 0.25.1: facebook/opt-125m, 8 prompts of 32
# input / 16 output tokens, max_concurrency 2); recorded in tests/data/bench_results/
RESULT = DATA / "bench_results" / "er0080-opt-125m-v0.25.1.json"


def test_a_published_result_file_reads_as_its_run() -> None:
    result = parse_result(RESULT.read_text(), str(RESULT))
    assert result.completed == 8 and result.max_concurrency == 2
    assert math.isinf(result.request_rate)
    w = workload_of(result)
    # 256 input and 128 output tokens over 8 requests: 32 + 16 each, all sent at 0
    assert [(r.prompt_tokens, r.output_tokens) for r in w.requests] == [(32, 16)] * 8
    assert w.max_concurrency == 2
    with pytest.raises(InputFileError, match="not a `vllm bench serve --save-result` file"):
        parse_result('{"a": 1}', "x.json")


def test_calibrate_fits_the_run_and_saves_a_profile(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    code, out, err = run(
        "opt-1.3b", "--gpu", "h100", "--calibrate", str(RESULT), "--save-profile",
        str(profile), "--json",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    published = json.loads(RESULT.read_text())
    bench = data["runs"][0]["result"]["bench"]
    # the fitted replay of the run itself: its median TPOT and TTFT are the file's
    assert bench["median_tpot_ms"] == pytest.approx(published["median_tpot_ms"], rel=0.05)
    assert bench["median_ttft_ms"] == pytest.approx(published["median_ttft_ms"], rel=0.10)
    assert data["calibration"]["fitted_on"]["result"] == str(RESULT)
    assert data["timing"] == f"step-time model (profile {RESULT})"
    assert data["expected_error"] == {}
    saved = load_profile(profile)
    assert saved.terms == pytest.approx(data["calibration"]["terms"])
    # replaying another setting with the saved profile uses its terms
    code, out, err = run(
        "opt-1.3b", "--gpu", "h100", "--profile", str(profile), "--avg-prompt-tokens", "32",
        "--avg-output-tokens", "16", "--dataset", "random", "--max-concurrency", "4",
        "--num-requests", "16", "--json",
    )  # fmt: skip
    assert code == 0, err
    again = json.loads(out)
    assert again["roofline"]["memory_efficiency"] == pytest.approx(saved.terms["memory_efficiency"])
    assert again["timing"] == f"step-time model (profile {profile})"


def test_a_bad_profile_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"kvplan_step_profile": 1, "terms": {"memory_efficiency": "x"}}')
    code, out, err = run(
        "opt-1.3b", "--gpu", "h100", "--profile", str(bad), "--avg-prompt-tokens", "32",
        "--avg-output-tokens", "16",
    )  # fmt: skip
    assert code != 0 and "terms.memory_efficiency must be a number" in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- the CLI


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["simulate", *args, "--offline"])
    return result.exit_code, result.stdout, result.stderr


def test_bench_flags_and_figures_in_text_and_json() -> None:
    args = (
        "llama-3.1-8b", "--gpu", "h100", "--dataset", "random", "--avg-prompt-tokens", "1024",
        "--avg-output-tokens", "128", "--max-concurrency", "8", "--num-requests", "40",
    )  # fmt: skip
    code, out, err = run(*args)
    assert code == 0, err
    for name in ("requests/s", "TTFT ", "TPOT ", "ITL ", "E2E ", "mean", "median", "p99"):
        assert name in out, name
    assert "Expected error against real vLLM runs" in out
    code, out, err = run(*args, "--json")
    data = json.loads(out)
    bench = data["runs"][0]["result"]["bench"]
    assert set(BenchFigures.__dataclass_fields__) == set(bench)
    assert data["expected_error"] == EXPECTED_ERROR
    assert data["runs"][0]["result"]["max_concurrency"] <= 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a workload"),
        (["-w", "examples/workloads/chat.yaml", "--avg-prompt-tokens", "5"], "not both"),
        (["--avg-prompt-tokens", "5"], "together"),
        (["-w", "examples/workloads/chat.yaml", "--request-rate", "4"], "has its own arrivals"),
        (["--save-profile", "x.json", "--avg-prompt-tokens", "5", "--avg-output-tokens", "5"],
         "--save-profile writes a --calibrate fit"),
        (["--avg-prompt-tokens", "5", "--avg-output-tokens", "5", "--dataset", "nope"],
         "unknown --dataset"),
    ],
)  # fmt: skip
def test_bad_workload_flags_are_one_line(args: list[str], message: str) -> None:
    code, out, err = run("llama-3.1-8b", "--gpu", "h100", *args)
    assert code != 0 and message in err, err
    assert "Traceback" not in err


def test_memory_efficiency_by_gpu_class() -> None:
    from planner.simulate.clock import memory_efficiency_of

    for name in ("h100", "h200", "a100-40gb", "a100-80gb", "b200", "mi300x", "v100-16gb"):
        assert memory_efficiency_of(get_gpu(name)) == 0.90, name
    for name in ("l4", "l40s", "a10", "a10g", "t4", "rtx-4090", "a6000"):
        assert memory_efficiency_of(get_gpu(name)) == 0.85, name


def test_compute_efficiency_by_architecture() -> None:
    from planner.simulate.clock import compute_efficiency_of

    # Hopper (the catalog's architecture) reaches less of its datasheet BF16 rate
    for name in ("h100", "h100-pcie", "h200", "h20", "h800"):
        assert compute_efficiency_of(get_gpu(name)) == 0.35, name
    for name in ("a100-40gb", "a100-80gb", "l4", "l40s", "b200", "mi300x", "rtx-4090"):
        assert compute_efficiency_of(get_gpu(name)) == 0.60, name


def test_a_closed_loop_with_data_parallel_ranks_is_refused() -> None:
    w = Workload(name="t", source="t", requests=(Request(10, 3),), max_concurrency=1)
    with pytest.raises(UsageError, match="not simulated with --dp > 1"):
        simulate(w, const(data_parallel_size=2))


def test_the_release_and_eager_set_the_overhead_terms() -> None:
    args = ("llama-3.1-8b", "--gpu", "h100", "--avg-prompt-tokens", "100",
            "--avg-output-tokens", "10", "--num-requests", "5", "--json")  # fmt: skip
    new = json.loads(run(*args)[1])["roofline"]
    old = json.loads(run(*args, "--vllm-version", "0.10.0")[1])["roofline"]
    eager = json.loads(run(*args, "--enforce-eager")[1])["roofline"]
    # async scheduling (0.14+) hides most of a step's CPU time: 0.2 ms vs 0.6 ms; eager
    # launches 32 layers x 150 us of small kernels instead of 32 x 50 us
    assert new["overhead_s"] == pytest.approx(0.0002) and old["overhead_s"] == pytest.approx(0.0006)
    assert new["layer_floor_s"] == pytest.approx(32 * 50e-6)
    assert eager["layer_floor_s"] == pytest.approx(32 * 150e-6)
