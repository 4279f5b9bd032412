"""Data parallelism in ``kvplan simulate``: ``data_parallel_size`` independent engines, each
with its own KV pool of ``num_gpu_blocks`` and its own ``max_num_seqs``, and requests
dispatched to them as vLLM's DP load balancer does.

vLLM 0.33 (``vllm/v1/engine/core_client.py``, ``DPLBAsyncMPClient.get_core_engine_for_request``)
sends each new request to the engine with the lowest score

    score = max(clients x in-flight, waiting + running)
            + waiting x 6 x max(0, kv_cache_usage - 0.5)      (the last term only if waiting)

scanning the engines from an index that moves on by one engine per request, so ties go round
robin; ``waiting``, ``running`` and ``kv_cache_usage`` (``BlockPool.get_usage``: used / usable
blocks) are the DP coordinator's snapshot of each engine's scheduler, published every 100 ms,
and in-flight is the client's exact count of its requests on that engine not finished yet.

Modelled with one API server (clients = 1): a rank's in-flight requests are its waiting and
running ones, so the score is ``waiting + running`` (+ the usage term), read from the rank's
state when the request arrives. Approximations:

- the stats are current, not a snapshot up to 100 ms old;
- a rank is read at its own clock: one whose queue is blocked may have run a decode stretch
  past the arrival, up to its next finish;
- ``running`` counts the requests waiting for their last token's output under async
  scheduling, as vLLM's scheduler does until it processes it;
- the ranks step independently, as dense models' DP ranks do; vLLM runs MoE ranks with expert
  parallelism in lockstep (a rank with nothing to do runs a dummy batch), which is not
  modelled: each rank's step times are its own.

The cluster's result combines the ranks' (each rank's own is in ``SimResult.ranks``): counts,
tokens, blocks allocated and freed, prefix-cache and fragmentation sums add up; ``duration_s``
is the last rank's, so throughput is all ranks' tokens over it; latency percentiles are of all
requests together; ``steps`` is the most one rank ran; ``peak_blocks``, ``usage_max``,
``max_concurrency`` and ``max_used_blocks_seen`` are the most on one rank (whose pool
``num_gpu_blocks`` and ``usable_blocks`` are); ``usage_p50`` / ``p90`` are over the ranks' time
together; ``mean_concurrency`` is the whole cluster's running requests averaged over
``duration_s``; the timeline is the fullest rank's usage in each time slice.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import replace

from planner.simulate.engine import (
    TIMELINE_POINTS,
    BenchFigures,
    Percentiles,
    PrefixChain,
    SimConfig,
    SimEngine,
    SimRequest,
    SimResult,
    make_engine,
    usage_quantile,
)
from planner.simulate.workload import Workload

# the load balancer's penalty on waiting requests under KV-cache pressure (core_client.py)
WAITING_PENALTY = 6.0
USAGE_KNEE = 0.5


def pick_rank(loads: list[tuple[int, int, float]], start: int) -> int:
    """The rank vLLM's DP load balancer sends a new request to, one API server.

    Args:
        loads: per rank ``(waiting, running, kv_cache_usage)``.
        start: the rank the scan starts from (it moves on by one per request).

    Returns:
        The first rank, scanning from ``start``, with the lowest ``waiting + running``, plus
        ``waiting x 6 x max(0, usage - 0.5)`` when it has waiting requests. Example: loads
        ``[(2, 8, 0.9), (0, 11, 0.95), (1, 9, 0.4)]`` score 10 + 2 x 6 x 0.4 = 14.8, 11 and
        10 (usage under the knee): rank 2.
    """
    best, best_score = start, float("inf")
    n = len(loads)
    for i in range(n):
        idx = (start + i) % n
        waiting, running, usage = loads[idx]
        score: float = waiting + running
        if waiting:
            score += waiting * WAITING_PENALTY * max(0.0, usage - USAGE_KNEE)
        if score < best_score:
            best, best_score = idx, score
    return best


def simulate_ranks(workload: Workload, config: SimConfig) -> SimResult:
    """Replay ``workload`` over ``config.data_parallel_size`` ranks of ``config`` (the module
    docstring says what is modelled); the caller (``engine.simulate``) has checked the config.

    Returns:
        The cluster's :class:`SimResult`, each rank's in its ``ranks``.
    """
    dp = config.data_parallel_size
    engines = [make_engine(workload, config) for _ in range(dp)]
    finish_steps = engines[0].finish_steps  # one array for all: each request is on one rank
    for e in engines[1:]:
        e.finish_steps = finish_steps
    dispatched = [0] * dp
    rejected = 0
    start = 0
    limit, B = config.max_model_len, engines[0].B
    caching = engines[0].caching
    for i, q in enumerate(workload.requests):
        if q.prompt_tokens + q.output_tokens > limit:
            rejected += 1  # the API server refuses it: it never reaches a rank
            continue
        late = config.request_latency_s  # send to scheduler (no per-stream term across ranks)
        t = q.arrival_s + late
        for e in engines:
            e.advance(t)
        loads = [
            (len(e.waiting), len(e.running) + len(e.zombies), (e.capacity - e.free) / e.capacity)
            for e in engines
        ]
        k = pick_rank(loads, start)
        start = (start + 1) % dp
        e = engines[k]
        chain = None
        if caching and q.prefix_id is not None and q.prefix_tokens >= B:
            chain = e.chains.get(q.prefix_id)
            if chain is None:
                chain = e.chains[q.prefix_id] = PrefixChain(q.prefix_tokens // B)
        r = SimRequest(i, t, q.prompt_tokens, q.output_tokens, chain)
        r.late = late
        e.feed(r)
        dispatched[k] += 1
    for e in engines:
        e.drain()
    return _combine(workload, engines, dispatched, rejected, finish_steps)


def _combine(
    workload: Workload,
    engines: list[SimEngine],
    dispatched: list[int],
    rejected: int,
    finish_steps: array[int],
) -> SimResult:
    """The cluster's result from its ranks' (module docstring)."""
    ttft, tpot, e2e = array("d"), array("d"), array("d")
    for e in engines:
        ttft.extend(e.ttft)
        tpot.extend(e.tpot)
        e2e.extend(e.e2e)
    itl_hist: dict[int, list[float]] = {}
    for e in engines:
        for b, (w, sec) in e.itl_cells().items():
            cell = itl_hist.setdefault(b, [0.0, 0.0])
            cell[0] += w
            cell[1] += sec
    usage_time = [sum(col) for col in zip(*(e.usage_time for e in engines), strict=True)]
    duration = max(e.now for e in engines)
    capacity = engines[0].capacity
    timeline = _peak_timeline(engines, duration, capacity)
    seen = max(max(e.tl_used, default=0) for e in engines)
    ranks = tuple(
        replace(e.result(workload), requests=n, finish_steps=array("q"))
        for e, n in zip(engines, dispatched, strict=True)
    )
    prompt = sum(r.prompt_tokens for r in ranks)
    output = sum(r.output_tokens for r in ranks)
    queried = sum(r.prefix_query_tokens for r in ranks)
    hits = sum(r.prefix_hit_tokens for r in ranks)
    alloc_slots = sum(e.alloc_slots for e in engines)
    peak = max(r.peak_blocks for r in ranks)
    return SimResult(
        num_gpu_blocks=engines[0].cfg.num_gpu_blocks,
        usable_blocks=capacity,
        block_size=engines[0].B,
        requests=len(workload.requests),
        completed=sum(r.completed for r in ranks),
        rejected_too_long=rejected,
        preemptions=sum(r.preemptions for r in ranks),
        preempted_requests=sum(r.preempted_requests for r in ranks),
        recomputed_tokens=sum(r.recomputed_tokens for r in ranks),
        steps=max(r.steps for r in ranks),
        duration_s=duration,
        peak_blocks=peak,
        usage_p50=usage_quantile(usage_time, 0.5),
        usage_p90=usage_quantile(usage_time, 0.9),
        usage_max=peak / capacity,
        mean_concurrency=sum(e.conc_time for e in engines) / duration if duration else 0.0,
        max_concurrency=max(r.max_concurrency for r in ranks),
        prompt_tokens=prompt,
        output_tokens=output,
        output_tokens_per_s=output / duration if duration else 0.0,
        total_tokens_per_s=(prompt + output) / duration if duration else 0.0,
        ttft_s=Percentiles.of_array(ttft),
        tpot_s=Percentiles.of_array(tpot),
        e2e_s=Percentiles.of_array(e2e),
        fragmentation=sum(e.unused_slots for e in engines) / alloc_slots if alloc_slots else 0.0,
        prefix_query_tokens=queried,
        prefix_hit_tokens=hits,
        prefix_hit_rate=hits / queried if queried else 0.0,
        prefix_blocks_saved=sum(r.prefix_blocks_saved for r in ranks),
        timeline=timeline,
        finish_steps=finish_steps,
        allocated_blocks=sum(r.allocated_blocks for r in ranks),
        freed_blocks=sum(r.freed_blocks for r in ranks),
        max_used_blocks_seen=seen,
        ranks=ranks,
        cpu_blocks=ranks[0].cpu_blocks,
        cpu_hit_tokens=sum(r.cpu_hit_tokens for r in ranks),
        bench=BenchFigures.of(
            duration=duration,
            prompt_tokens=prompt,
            output_tokens=output,
            ttft=ttft,
            tpot=tpot,
            e2e=e2e,
            itl_hist=itl_hist,
            itl_sum=sum(e.itl_sum for e in engines),
        ),
    )


def _peak_timeline(
    engines: list[SimEngine], end: float, capacity: int
) -> list[tuple[float, float]]:
    """At most TIMELINE_POINTS (time, usage) points over ``[0, end]``, each the fullest rank's
    peak in its slice of time, as ``engine._downsample`` does for one rank; the last point is
    the fullest rank's pool at the end."""
    span = end or 1.0
    buckets: dict[int, float] = {}
    for e in engines:
        last = len(e.tl_time) - 1
        for t, used in zip(
            itertools.islice(e.tl_time, last), itertools.islice(e.tl_used, last), strict=True
        ):
            b = min(TIMELINE_POINTS - 1, int(t / span * TIMELINE_POINTS))
            u = used / capacity
            if u > buckets.get(b, -1.0):
                buckets[b] = u
    out = [
        (round((b + 1) * span / TIMELINE_POINTS, 6), round(u, 6))
        for b, u in sorted(buckets.items())
    ]
    at_end = max((e.tl_used[-1] for e in engines if e.tl_used), default=0) / capacity
    return out + [(round(span, 6), round(at_end, 6))]
