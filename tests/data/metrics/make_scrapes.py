"""Writes the recorded scrapes in this folder, by hand, from vLLM's metric definitions (see
README.md for the source lines each name, type, label and bucket list comes from). Run it from
the repository root after changing it: ``python tests/data/metrics/make_scrapes.py``.

Every figure is chosen here, so the tests derive their expected values from these numbers.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent


def buckets_125(max_value: int) -> list[float]:
    """vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... <= max_value."""
    out, e = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**e
            if v > max_value:
                return out
            out.append(float(v))
        e += 1


def fmt(labels: dict[str, str]) -> str:
    """Labels as prometheus_client writes them: sorted by name, ``le`` last."""
    keys = sorted(k for k in labels if k != "le") + (["le"] if "le" in labels else [])
    return "{" + ",".join(f'{k}="{labels[k]}"' for k in keys) + "}" if labels else ""


def created(name: str, doc: str, labels: list[dict[str, str]]) -> str:
    """The ``NAME_created`` gauge family prometheus_client writes after a counter or a
    histogram (exposition.py, generate_latest)."""
    lines = [f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"]
    lines += [f"{name}_created{fmt(lab)} 1.7646e+09" for lab in labels]
    return "\n".join(lines)


def gauge(name: str, doc: str, rows: list[tuple[dict[str, str], float]]) -> str:
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
    lines += [f"{name}{fmt(lab)} {val!r}" for lab, val in rows]
    return "\n".join(lines)


def counter(name: str, doc: str, rows: list[tuple[dict[str, str], float]]) -> str:
    """prometheus_client exposes counter NAME as NAME_total (and NAME_created)."""
    base = name.removesuffix("_total")
    lines = [f"# HELP {base}_total {doc}", f"# TYPE {base}_total counter"]
    lines += [f"{base}_total{fmt(lab)} {val!r}" for lab, val in rows]
    return "\n".join(lines) + "\n" + created(base, doc, [lab for lab, _ in rows])


def histogram(
    name: str, doc: str, bounds: list[float], rows: list[tuple[dict[str, str], list[int], float]]
) -> str:
    """rows: (labels, counts per bucket (len(bounds) + 1, the last for +Inf), sum)."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} histogram"]
    for lab, counts, total in rows:
        assert len(counts) == len(bounds) + 1, name
        cum = 0
        for b, c in zip([*bounds, float("inf")], counts, strict=True):
            cum += c
            le = "+Inf" if b == float("inf") else repr(float(b))
            lines.append(f"{name}_bucket{fmt({**lab, 'le': le})} {float(cum)!r}")
        lines.append(f"{name}_count{fmt(lab)} {float(cum)!r}")
        lines.append(f"{name}_sum{fmt(lab)} {total!r}")
    return "\n".join(lines) + "\n" + created(name, doc, [lab for lab, _, _ in rows])


# vLLM's bucket lists (README.md cites the lines)
TTFT_V0 = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
]
TPOT_V0 = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
E2E_V0 = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
TTFT_V1 = TTFT_V0 + [20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TPOT_V1 = TPOT_V0 + [5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_V1 = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]


def counts(bounds: list[float], where: dict[float, int]) -> list[int]:
    """Counts per bucket: ``where`` maps a bucket's upper bound (inf: +Inf) to its count."""
    return [where.get(b, 0) for b in [*bounds, float("inf")]]


def v0_063() -> str:
    """vLLM 0.6.3 (V0, engine/metrics.py): Qwen2.5-7B-Instruct on an A100-40GB, max_model_len
    8192, the pool of the V0 boot log in tests/fixtures/logs (# cuda blocks: 22211), under
    load: KV 97 %, 45 running, 12 waiting, 37 preemptions over 1,000 finished requests."""
    m = {"model_name": "Qwen/Qwen2.5-7B-Instruct"}
    lens = buckets_125(8192)  # 1 .. 5000
    cache = {
        "block_size": "16",
        "cache_dtype": "auto",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "False",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "4681",
        "num_gpu_blocks": "22211",
        "num_gpu_blocks_override": "None",
        "sliding_window": "None",
        "swap_space_bytes": "4294967296",
    }
    parts = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 12345.0',
        gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [(cache, 1.0)]),
        gauge(
            "vllm:num_requests_running", "Number of requests currently running on GPU.", [(m, 45.0)]
        ),
        gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(m, 12.0)]
        ),
        gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", [(m, 0.0)]),
        gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            [(m, 0.97)],
        ),
        gauge(
            "vllm:cpu_cache_usage_perc",
            "CPU KV-cache usage. 1 means 100 percent usage.",
            [(m, 0.0)],
        ),
        gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", [(m, -1.0)]),
        gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", [(m, -1.0)]),
        counter(
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            [(m, 37.0)],
        ),
        counter(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(m, 1_200_000.0)]
        ),
        counter(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            [(m, 250_000.0)],
        ),
        histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_V0,
            [(m, counts(TTFT_V0, {0.25: 500, 0.5: 300, 1.0: 150, 2.5: 50}), 420.0)],
        ),
        histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_V0,
            [(m, counts(TPOT_V0, {0.025: 150_000, 0.05: 100_000}), 7000.0)],
        ),
        histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            E2E_V0,
            [(m, counts(E2E_V0, {5.0: 400, 10.0: 500, 20.0: 100}), 8000.0)],
        ),
        histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            lens,
            [(m, counts(lens, {1000: 200, 2000: 600, 5000: 200}), 1_200_000.0)],
        ),
        histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            lens,
            [(m, counts(lens, {200: 400, 500: 500, 1000: 100}), 250_000.0)],
        ),
        counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            [
                ({**m, "finished_reason": "stop"}, 800.0),
                ({**m, "finished_reason": "length"}, 200.0),
            ],
        ),
    ]
    return "\n".join(parts) + "\n"


def v1_085() -> str:
    """vLLM 0.8.5 (V1, v1/metrics/loggers.py): Llama-3.1-8B-Instruct, one engine, run with
    --max-num-seqs 64: 64 running, 20 waiting, KV 21 % (64 requests of ~1,350 tokens in flight,
    prompt mean 1,200 + half the mean output of 300: 86,400 of 420,880 tokens, 20.5 %), prefix
    hits 2,000 of 100,000."""
    m = {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    lens = buckets_125(16000)  # 1 .. 10000
    cache = {  # no engine label before 0.10 (log_metrics_info, 0.8.5 line 350)
        "block_size": "16",
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "0",
        "num_gpu_blocks": "26305",
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "builtin",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    parts = [
        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            [(m, 64.0)],
        ),
        gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(m, 20.0)]
        ),
        gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            [(m, 0.21)],
        ),
        counter(
            "vllm:gpu_prefix_cache_queries",
            "GPU prefix cache queries, in terms of number of queried blocks.",
            [(m, 100_000.0)],
        ),
        counter(
            "vllm:gpu_prefix_cache_hits",
            "GPU prefix cache hits, in terms of number of cached blocks.",
            [(m, 2_000.0)],
        ),
        counter(
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            [(m, 0.0)],
        ),
        counter(
            "vllm:prompt_tokens_total", "Number of prefill tokens processed.", [(m, 600_000.0)]
        ),
        counter(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            [(m, 150_000.0)],
        ),
        counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            [
                ({**m, "finished_reason": "stop"}, 500.0),
                ({**m, "finished_reason": "length"}, 0.0),
                ({**m, "finished_reason": "abort"}, 0.0),
            ],
        ),
        histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            lens,
            [(m, counts(lens, {1000: 250, 2000: 250}), 600_000.0)],
        ),
        histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            lens,
            [(m, counts(lens, {500: 500}), 150_000.0)],
        ),
        histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_V1,
            [(m, counts(TTFT_V1, {1.0: 100, 2.5: 300, 5.0: 100}), 1100.0)],
        ),
        histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_V1,
            [(m, counts(TPOT_V1, {0.025: 100_000, 0.05: 49_500}), 5000.0)],
        ),
        histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LATENCY_V1,
            [(m, counts(LATENCY_V1, {1.0: 100, 2.0: 300, 5.0: 100}), 900.0)],
        ),
        gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [(cache, 1.0)]),
    ]
    return "\n".join(parts) + "\n"


def v1_0110(step: int) -> str:
    """vLLM 0.11.0 (v1/metrics/loggers.py): Llama-3.1-8B-Instruct, DP 2 (engine 0 and 1) on
    H100s, the pool of the DP-2 boot log in tests/fixtures/logs (420,880 tokens = 26,305
    blocks of 16). Scrape ``step`` (0, 1, 2) of three, 10 s apart: KV usage on target."""
    model = "meta-llama/Llama-3.1-8B-Instruct"
    kv = {"0": [0.82, 0.86, 0.88], "1": [0.80, 0.84, 0.90]}
    lens = buckets_125(16000)
    rows = lambda values: [({"engine": e, "model_name": model}, v[step]) for e, v in values.items()]  # noqa: E731
    per = lambda e: {"engine": e, "model_name": model}  # noqa: E731
    # cumulative counters: engine 0 finishes 100 requests between scrapes, engine 1 80
    done = {"0": [1000, 1100, 1200], "1": [900, 980, 1060]}
    hits = {"0": [40_000, 46_000, 52_000], "1": [30_000, 35_000, 40_000]}
    queries = {"0": [100_000, 110_000, 120_000], "1": [80_000, 90_000, 100_000]}
    # prompt lengths: half the requests in the (500, 1000] bucket, half in (1000, 2000]
    prompt = {
        e: counts(lens, {1000: done[e][step] // 2, 2000: done[e][step] - done[e][step] // 2})
        for e in done
    }
    output = {e: counts(lens, {200: done[e][step]}) for e in done}
    cache = lambda e: {  # noqa: E731
        "block_size": "16",
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_kvcache_space_bytes": "None",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "engine": e,
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "kv_cache_memory_bytes": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_cache_dtype": "auto",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": "26305",
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    parts = [
        gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            rows({"0": [30, 32, 33], "1": [29, 31, 34]}),
        ),
        gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            rows({"0": [0, 0, 0], "1": [0, 0, 0]}),
        ),
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", rows(kv)),
        counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(per(e), float(queries[e][step])) for e in queries],
        ),
        counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(per(e), float(hits[e][step])) for e in hits],
        ),
        counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            [(per(e), 0.0) for e in done],
        ),
        counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [({**per(e), "finished_reason": "stop"}, float(done[e][step])) for e in done],
        ),
        histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            lens,
            [(per(e), prompt[e], 1200.0 * done[e][step]) for e in done],
        ),
        histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            lens,
            [(per(e), output[e], 150.0 * done[e][step]) for e in done],
        ),
        histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_V1,
            [(per(e), counts(TTFT_V1, {0.25: done[e][step]}), 0.2 * done[e][step]) for e in done],
        ),
        histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TPOT_V1,
            [
                (per(e), counts(TPOT_V1, {0.025: 150 * done[e][step]}), 3.0 * done[e][step])
                for e in done
            ],
        ),
        gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [(cache(e), 1.0) for e in ("0", "1")],
        ),
    ]
    return "\n".join(parts) + "\n"


LLAMA_V1 = {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
T0 = 1764632400  # 2025-12-01T23:40:00Z


def main() -> None:
    (HERE / "vllm-0.6.3-v0.prom").write_text(v0_063())
    (HERE / "vllm-0.8.5-v1.prom").write_text(v1_085())
    (HERE / "vllm-0.11.0-dp2.prom").write_text(v1_0110(2))
    series = "".join(f"# {T0 + 10 * i}\n{v1_0110(i)}" for i in range(3))
    (HERE / "vllm-0.11.0-dp2-series.prom").write_text(series)
    # a range-query export of the same three scrapes (the gauges and the counters)
    import json

    result = []
    for name, key in (
        ("vllm:kv_cache_usage_perc", {"0": [0.82, 0.86, 0.88], "1": [0.80, 0.84, 0.90]}),
        ("vllm:num_requests_running", {"0": [30, 32, 33], "1": [29, 31, 34]}),
        ("vllm:num_requests_waiting", {"0": [0, 0, 0], "1": [0, 0, 0]}),
        ("vllm:request_success_total", {"0": [1000, 1100, 1200], "1": [900, 980, 1060]}),
    ):
        for e, values in key.items():
            result.append(
                {
                    "metric": {
                        "__name__": name,
                        "engine": e,
                        "instance": "10.0.0.5:8000",
                        "job": "vllm",
                        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
                    },
                    "values": [[T0 + 10 * i, str(v)] for i, v in enumerate(values)],
                }
            )
    export = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    (HERE / "vllm-0.11.0-dp2-range.json").write_text(json.dumps(export, indent=1) + "\n")
    # both names at once, as 0.10.1 exports them (the gpu_ one deprecated, same value)
    both = v1_085().replace("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc")
    both += (
        gauge(
            "vllm:gpu_cache_usage_perc",
            "DEPRECATED",
            [({"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}, 0.99)],
        )
        + "\n"
    )
    (HERE / "vllm-0.10.1-both-names.prom").write_text(both)
    # broken ones
    good = v1_085()
    (HERE / "malformed.prom").write_text(
        good.replace(
            f"vllm:num_requests_waiting{fmt(LLAMA_V1)} 20.0",
            f"vllm:num_requests_waiting{fmt(LLAMA_V1)} twenty",
        )
    )
    assert "twenty" in (HERE / "malformed.prom").read_text()
    cut = good.index("vllm:gpu_prefix_cache_hits_total{") + 30
    (HERE / "truncated.prom").write_text(good[:cut])
    (HERE / "not-vllm.prom").write_text(
        "# HELP python_gc_objects_collected_total Objects collected during gc\n"
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 12345.0\n'
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 42.0\n"
    )
    # a scrape cut at a histogram: no +Inf bucket, no _count (partial, still parseable)
    part = (
        good[
            : good.index('le="2.5"', good.index("vllm:time_to_first_token_seconds_bucket"))
        ].rsplit("\n", 1)[0]
        + "\n"
    )
    (HERE / "partial-histogram.prom").write_text(part)


if __name__ == "__main__":
    main()
