"""The vLLM metric names kvplan reads, per release (the releases and lines they were checked in
are listed in :mod:`planner.diagnose.metrics`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


# Canonical figure -> the sample names that carry it, newest release's first.
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


RUNNING = ("vllm:num_requests_running",)


WAITING = ("vllm:num_requests_waiting",)


PREEMPTIONS = ("vllm:num_preemptions_total",)


FINISHED = ("vllm:request_success_total",)


PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")


PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")


PREFIX_HIT_RATE = ("vllm:gpu_prefix_cache_hit_rate",)  # V0: a gauge, 0-1


HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "tpot": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prompt": ("vllm:request_prompt_tokens",),
    "output": ("vllm:request_generation_tokens",),
}


CACHE_CONFIG = "vllm:cache_config_info"


V0_ONLY = ("vllm:gpu_prefix_cache_hit_rate", "vllm:num_requests_swapped")
