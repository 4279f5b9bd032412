"""Replay a workload over vLLM's paged KV-block pool: usage, preemptions, concurrency, latency.

The scheduler follows vLLM V1 (0.33, ``vllm/v1/core/sched/scheduler.py``) where it matters for
memory:

- continuous batching: every step first schedules the running requests in admission order
  (one token per decoding request, the rest of the step's ``max_num_batched_tokens`` to a
  partially prefilled prompt), then admits waiting requests first-come first-served while the
  budget, ``max_num_seqs`` and free blocks allow; a long prompt is prefilled in chunks;
- blocks are allocated on demand, ``block_size`` tokens each, from one pool of
  ``num_gpu_blocks - 1`` blocks (vLLM keeps one null block);
- prefix caching hashes full blocks: requests with the same prefix share its full blocks
  (reference-counted); freed blocks stay cached until evicted, least recently freed first and
  the tail of a request before its head; a cached block counts as free, as in vLLM;
- when a running request needs a block and none is free, the newest running request is
  preempted (its blocks freed, its progress recomputed later) and put at the front of the
  queue; no new request is admitted in a step that preempted.

Three rules changed between releases; :class:`SimConfig` takes them from
:class:`planner.vllm_rules.VllmRules` (off: the older behaviour):

- ``reserve_full_isl`` (vLLM >= 0.19): a waiting or preempted request is admitted only when
  blocks for all of its tokens (prompt, plus the outputs of a resumed one) are free, prefix
  hits counted, not just for its first chunk (``Scheduler.schedule``,
  ``KVCacheManager.can_fit_full_sequence`` / ``allocate_slots(full_sequence_must_fit=...)``);
- ``prepend_uncached_free`` (vLLM >= 0.24): freed blocks without a block hash (a request's
  partly filled last block) go to the front of the free queue, to be reused first; cached ones
  to the back (``BlockPool.free_blocks``). Without prefix caching the order changes nothing
  the simulation counts;
- ``async_scheduling`` (vLLM's default from 0.14): step ``s + 1`` is scheduled before step
  ``s``'s output is processed (``EngineCore.step_with_batch_queue``), so a request that samples
  its last token in step ``s`` is not scheduled in ``s + 1`` (``Scheduler.schedule`` skips a
  request whose in-flight step reaches ``max_tokens``) but keeps its blocks and its
  ``max_num_seqs`` slot until ``s + 1`` is scheduled: they are free from step ``s + 2``. When
  nothing else runs, that is one more (empty, zero-time) step. Approximation: vLLM could pick
  such a request as a preemption victim; here it never is.

Speculative decoding reserves ``num_lookahead_tokens`` (k) slots past the tokens a request is
scheduled for, for the drafter to write into (``VllmConfig.num_lookahead_tokens``: k =
``num_speculative_tokens`` for EAGLE, EAGLE3, MTP and draft models, k + 1 for DFlash, 0 for
n-gram): ``KVCacheManager.allocate_slots(..., num_lookahead_tokens)`` holds slots for
min(computed + new + k, ``max_model_len``) tokens, for a waiting request's first chunk and a
running one's next chunk or decode token alike (``Scheduler.schedule``, 0.33); the
``reserve_full_isl`` gate counts the whole prompt without them. So a decoder takes a block k
tokens earlier, and stops at cdiv(``max_model_len``, block) blocks. Approximations: every decode
step computes one token per request, as if no draft were accepted (requests live longest: the
conservative case for memory), and the k draft tokens vLLM also schedules for each decoder
are not (they take k more slots and k tokens of ``max_num_batched_tokens``; passing 2k covers
their slots, at k too many for a prefill); fragmentation counts the tokens' empty slots only.

Decoding is event-driven: between events (a request finishes, the pool runs out, a request
arrives at an idle queue) all decoding requests advance together, and the blocks they need are
counted from how many of them cross a block boundary at each step (their position modulo
``block_size``), so cost grows with requests and events, not with tokens.

How long each step takes is :mod:`planner.simulate.clock`'s model (or a measured table); what
is replayed comes from :mod:`planner.simulate.workload`, sent as ``vllm bench serve`` sends it
(open loop at the requests' arrival times, or a closed loop of ``Workload.max_concurrency``),
each reaching the scheduler ``SimConfig.request_latency_s`` (+ ``stream_latency_s`` per other
request in flight) after it is sent.
"""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from types import FunctionType
from typing import Any, Final

from planner.kv_layout import KVEstimate
from planner.model.specs import cdiv
from planner.simulate.fast import numpy_module, python_class
from planner.simulate.roofline import LineTimer, StepTimer, line_timer_of, timers_of
from planner.simulate.workload import RequestList, Workload

# (Final: a constant where the engine is compiled, not a look-up in the module's globals)
USAGE_BINS: Final = 1000
# Called with the number of requests started, every 4,096 of them, while a replay runs in this
# process (the CLI's progress bar; None: nobody is watching). A request starts when it has
# arrived and every request ahead of it has been admitted: it is then admitted, or next.
PROGRESS: Callable[[int], None] | None = None
TIMELINE_POINTS = 240
# an event holds an admission number below 2**30 (a replay admitting more stops), so that an
# event stays below 2**62 up to step 2**30: one machine word where the engine is compiled
SEQ_MASK: Final = (1 << 30) - 1


def _native() -> None:
    """A function, compiled or not (:data:`COMPILED`)."""


# whether this module runs compiled (tools/build_fast.py: its functions are then native, not
# Python functions): a few hot spots take the way that is faster there, the same numbers
COMPILED: Final = not isinstance(_native, FunctionType)
SORT_RUN = 1 << 16  # Percentiles.of_array sorts latencies in runs of this many
TL_CHUNK: Final = 1 << 14  # SimEngine's timeline points, moved into its columns this many at a time
ARRIVAL_BATCH = 1024  # SimEngine._arrivals makes requests without a shared prefix this many at once


# --------------------------------------------------------------------------- inputs


@python_class  # pickled: a plain class even compiled (planner.simulate.fast)
@dataclass(frozen=True)
class BlockLayout:
    """How one request's tokens map onto pool blocks (each ``bytes_per_block`` bytes).

    A request holding ``L`` tokens uses ``full_groups * cdiv(L, block_size)`` blocks for its
    full-attention KV-cache groups, ``min(cdiv(L, block_size), cap)`` for each window group
    (sliding or chunked-local attention, capped at its window), and ``state_blocks`` pages for
    Mamba / linear-attention state. Only full-attention blocks are shared by prefix caching.
    """

    block_size: int
    full_groups: int = 1
    window_caps: tuple[int, ...] = ()
    state_blocks: int = 0

    def blocks(self, tokens: int) -> int:
        """Blocks one request holding ``tokens`` tokens occupies."""
        if tokens <= 0:
            return 0
        n = -(-tokens // self.block_size)
        return self.full_groups * n + sum(min(n, c) for c in self.window_caps) + self.state_blocks

    def weight(self, n: int) -> int:
        """Blocks allocated when a request grows from ``n`` to ``n + 1`` token blocks."""
        return self.full_groups + sum(1 for c in self.window_caps if c > n)

    @classmethod
    def from_estimate(cls, est: KVEstimate) -> tuple[BlockLayout, list[str]]:
        """The layout of ``est``'s vLLM KV-cache groups, and what the simulation approximates."""
        assert est.vllm is not None, "simulate models vLLM"
        bs = est.block_size
        full, caps, state = 0, [], 0
        notes: list[str] = []
        for g in est.vllm.groups:
            if g.is_state:
                state += g.blocks_per_request
            elif g.window:
                caps.append(cdiv(g.window - 1, bs) + 1)
            else:
                full += 1
        if caps:
            windows = sorted({g.window for g in est.vllm.groups if g.window})
            notes.append(
                "approximation: window layers (sliding / chunked-local, W = "
                + ", ".join(f"{w:,}" for w in windows)
                + ") hold cdiv(W - 1, block) + 1 blocks once a request is that long; the extra "
                "blocks a long prefill chunk needs for them briefly are not modelled, and "
                "their blocks are not shared by prefix caching"
            )
        if state:
            notes.append(
                f"approximation: Mamba / linear-attention state is {state} page(s) per request "
                "from admission to finish and is not shared by prefix caching"
            )
        if any(g.block_size != bs and not g.is_state for g in est.vllm.groups):
            notes.append(f"approximation: every attention group is paged in {bs}-token blocks")
        return cls(bs, full, tuple(caps), state), notes


@python_class  # pickled: a plain class even compiled (planner.simulate.fast)
@dataclass(frozen=True)
class SimConfig:
    """One scheduler and pool configuration to replay a workload against."""

    num_gpu_blocks: int
    layout: BlockLayout
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    roofline: StepTimer  # a Roofline, or measured step times (steptimes.StepTable)
    prefix_caching: bool = True
    # vLLM's release-dependent scheduling rules (module docstring); off: the older behaviour
    reserve_full_isl: bool = False
    prepend_uncached_free: bool = False
    async_scheduling: bool = False
    # speculative decoding: KV slots every request reserves past the tokens it is scheduled
    # for (vLLM's VllmConfig.num_lookahead_tokens; module docstring)
    num_lookahead_tokens: int = 0
    # data parallelism: this many ranks, each with this pool and these limits, requests
    # dispatched as vLLM's DP load balancer does (planner.simulate.cluster)
    data_parallel_size: int = 1
    # vLLM's native KV offloading (--kv-offloading-size, --kv-offloading-backend native): a CPU
    # tier of this many token blocks per rank that extends the prefix cache (_TierEngine); 0:
    # no tier
    cpu_blocks: int = 0
    # seconds from a request's send to its arrival at the scheduler (the API server's HTTP,
    # tokenizing and hand-off to the engine core): it reaches the scheduler that much later,
    # and its TTFT and E2E latency count from the send (planner.simulate.clock)
    request_latency_s: float = 0.0
    # and this much more per other request in flight when it is sent (the API server streams
    # their tokens meanwhile)
    stream_latency_s: float = 0.0
    # the API server is one process that streams every output token (detokenizing, one SSE
    # chunk): this many seconds of its time per output token, taken when the request is handed
    # to the engine; a request sent while it is busy waits its turn, first come first served
    # (SimEngine._api_wait, open loop only; planner.simulate.clock.API_TOKEN_S)
    api_token_s: float = 0.0


# --------------------------------------------------------------------------- results


@python_class  # pickled: a plain class even compiled (planner.simulate.fast)
@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles of per-request values: ``p90`` is the ``ceil(0.9 n)``-th
    smallest of ``n`` (of 200 requests, the 180th); all 0.0 when there are none."""

    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        if not values:
            return cls(0.0, 0.0, 0.0, 0.0)
        v = sorted(values)
        return cls(_nearest(v, 0.5), _nearest(v, 0.9), _nearest(v, 0.99), v[-1])

    @classmethod
    def of_array(cls, values: array[float]) -> Percentiles:
        """:meth:`of` ``values``, exactly, without a Python float per value: ``values`` is
        sorted in place in runs of :data:`SORT_RUN` (only one run's floats exist at a time, a
        few MB however long the array), then each rank is selected among the sorted runs by
        bisection. Example: 1M latencies (8 MB as an array) never become the 32 MB list that
        ``sorted`` would build."""
        n = len(values)
        if n <= SORT_RUN:
            return cls.of(values)
        np = numpy_module()
        if np is not None:  # sorted in place in one go: the same floats, so the same ranks
            view = np.frombuffer(values, dtype=np.float64)
            view.sort()
            ranks = [min(n - 1, max(0, math.ceil(q * n) - 1)) for q in (0.5, 0.9, 0.99)]
            p50, p90, p99, top = (float(view[k]) for k in (*ranks, n - 1))
            del view  # the array's buffer is released: it can grow again
            return cls(p50, p90, p99, top)
        runs = [(lo, min(n, lo + SORT_RUN)) for lo in range(0, n, SORT_RUN)]
        for lo, hi in runs:
            values[lo:hi] = array("d", sorted(values[lo:hi]))

        p50, p90, p99 = (
            _rank_in_runs(values, runs, min(n - 1, max(0, math.ceil(q * n) - 1)))
            for q in (0.5, 0.9, 0.99)
        )
        return cls(p50, p90, p99, max(values[hi - 1] for _, hi in runs))


# Percentiles' helpers, not nested functions: mypyc does not compile those in a method of a
# plain class (planner.simulate.fast.python_class)
def _nearest(v: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted ``v``."""
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def _rank_in_runs(values: array[float], runs: list[tuple[int, int]], k: int) -> float:
    """The value with k values before it in sorted order (0-based), ``values`` sorted in each
    of ``runs``."""
    for lo, hi in runs:
        a, b = lo, hi
        while a < b:  # the values of one run rise with the index: bisect it
            mid = (a + b) // 2
            v = values[mid]
            if sum(bisect_left(values, v, x, y) - x for x, y in runs) > k:
                b = mid  # more than k values are smaller: too big
            elif sum(bisect_right(values, v, x, y) - x for x, y in runs) > k:
                return v
            else:
                a = mid + 1
    raise AssertionError("every rank below n is in some run")


ITL_BINS_PER_E: Final = 500  # the inter-token latency histogram: 0.2 % wide bins in log(seconds)
EXACT_PERCENTILES = 1 << 18  # BenchFigures interpolates percentiles exactly up to this many


def _linear_percentile(v: Sequence[float], q: float) -> float:
    """numpy.percentile's default (linear) method on sorted ``v``: what vllm bench serve
    reports."""
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    a, b = float(v[lo]), float(v[hi])  # (a numpy array's elements are numpy floats)
    return a + (b - a) * (k - lo)


def _mean_median_p99(values: array[float]) -> tuple[float, float, float]:
    """Mean, median and p99 of ``values`` as vllm bench serve computes them (numpy's linear
    percentiles); past :data:`EXACT_PERCENTILES` values, the nearest-rank ones of
    :class:`Percentiles` (they differ by less than one value's spacing)."""
    n = len(values)
    if not n:
        return 0.0, 0.0, 0.0
    mean = math.fsum(values) / n
    if n <= EXACT_PERCENTILES:
        np = numpy_module() if n > SORT_RUN else None
        v: Sequence[float] = sorted(values) if np is None else np.sort(values)
        return mean, _linear_percentile(v, 0.5), _linear_percentile(v, 0.99)
    p = Percentiles.of_array(values)
    return mean, p.p50, p.p99


def _histogram_percentile(hist: dict[int, list[float]], total: float, q: float) -> float:
    """The mean of the histogram bin (``[tokens, seconds]``) holding the ``q`` quantile."""
    if not total:
        return 0.0
    acc, target = 0.0, q * total
    cell = [1.0, 0.0]
    for b in sorted(hist):
        cell = hist[b]
        acc += cell[0]
        if acc >= target:
            break
    return cell[1] / cell[0]


@python_class  # pickled: a plain class even compiled (planner.simulate.fast)
@dataclass(frozen=True)
class BenchFigures:
    """A replay's figures by ``vllm bench serve``'s names (its ``--save-result`` keys; times in
    ms): ``bench`` in ``kvplan simulate --json``.

    ``duration`` is from 0 to the last finish; throughputs are over it. TTFT, TPOT and E2E are
    per completed request (TPOT of those with more than one output token), their medians and
    p99s numpy's linear percentiles as vllm bench serve computes them. ITL is per output token
    after the first: each is the duration of the step that produced it, so its mean is exact
    and its median and p99 are the mean of the histogram bin holding them (step durations
    weighted by the tokens each produced, in 0.2 % wide bins).
    """

    completed: int
    duration: float
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float

    @classmethod
    def of(
        cls,
        *,
        duration: float,
        prompt_tokens: int,
        output_tokens: int,
        ttft: array[float],
        tpot: array[float],
        e2e: array[float],
        itl_hist: dict[int, list[float]],
        itl_sum: float,
    ) -> BenchFigures:
        completed = len(e2e)
        itl_n = sum(cell[0] for cell in itl_hist.values())
        t = [x * 1000 for x in _mean_median_p99(ttft)]
        p = [x * 1000 for x in _mean_median_p99(tpot)]
        e = [x * 1000 for x in _mean_median_p99(e2e)]
        per = 1 / duration if duration else 0.0
        return cls(
            completed=completed,
            duration=duration,
            request_throughput=completed * per,
            output_throughput=output_tokens * per,
            total_token_throughput=(prompt_tokens + output_tokens) * per,
            mean_ttft_ms=t[0],
            median_ttft_ms=t[1],
            p99_ttft_ms=t[2],
            mean_tpot_ms=p[0],
            median_tpot_ms=p[1],
            p99_tpot_ms=p[2],
            mean_itl_ms=itl_sum / itl_n * 1000 if itl_n else 0.0,
            median_itl_ms=_histogram_percentile(itl_hist, itl_n, 0.5) * 1000,
            p99_itl_ms=_histogram_percentile(itl_hist, itl_n, 0.99) * 1000,
            mean_e2el_ms=e[0],
            median_e2el_ms=e[1],
            p99_e2el_ms=e[2],
        )


@python_class  # pickled: a plain class even compiled (planner.simulate.fast)
@dataclass(frozen=True)
class SimResult:
    """What one replay measured. Times come from the step-time model; usage is the fraction of
    the pool's usable blocks held by running requests (cached free blocks count as free).

    Part of ``kvplan simulate --json`` (``runs[i].result``; ``finish_steps`` is left out). The
    numbers below are ``tests/golden/simulate-llama-3.1-8b-kvmem.json``: Llama-3.1-8B, 200
    requests of ``examples/workloads/chat.yaml``, ``--kv-cache-memory 20GiB``, H100 step-time model.

    Attributes:
        num_gpu_blocks: blocks in the pool, vLLM's null block included (20 GiB / 2,097,152 B
            = 10,240).
        usable_blocks: ``num_gpu_blocks - 1``, what requests can hold (10,239).
        block_size: tokens per block (16).
        requests: requests in the workload, rejected ones included (200).
        completed: requests that finished (200).
        rejected_too_long: requests whose prompt + output exceed ``max_model_len``; never
            scheduled, as vLLM's API server rejects them.
        preemptions: preemption events; a request preempted twice counts twice.
        preempted_requests: distinct requests preempted at least once.
        recomputed_tokens: tokens whose KV is computed again after a preemption: of every
            chunk prefilled after a readmission, the tokens the request had computed before
            it was preempted; prefix-cache hits are not computed, so not counted.
        steps: scheduler steps run (7,982).
        duration_s: simulated seconds from 0 to the last finish, idle gaps included (60.91).
        peak_blocks: most blocks held at the end of a step (668).
        usage_p50: time-weighted median of usage, in 1/1,000 bins and reported as the bin's
            upper edge: 0.022 means usage was below 2.2 % of the usable blocks half of the time.
        usage_p90: the same at 90 % of the time (0.038).
        usage_max: ``peak_blocks / usable_blocks``, exact (668 / 10,239 = 0.0652).
        mean_concurrency: running requests (prefilling or decoding) averaged over
            ``duration_s`` (5.90).
        max_concurrency: most requests running in one step (16).
        prompt_tokens: prompt tokens of the completed requests (162,643).
        output_tokens: output tokens of the completed requests (46,332).
        output_tokens_per_s: ``output_tokens / duration_s`` (46,332 / 60.91 s = 760.7).
        total_tokens_per_s: ``(prompt_tokens + output_tokens) / duration_s`` (3,431.1).
        ttft_s: send to the end of the step that completes the prefill (p50 52.7 ms, 20 ms of
            it the API server's latency, SimConfig.request_latency_s); a
            preempted request keeps its first first token.
        tpot_s: ``(finish - first token) / (output_tokens - 1)`` of each request with more
            than one output token (p50 7.73 ms: about one decode step).
        e2e_s: send to finish (p50 1.42 s).
        fragmentation: the share of allocated token slots left empty in requests' last,
            partly filled blocks, summed over steps; shared prefix blocks count once (0.0117).
        prefix_query_tokens: tokens looked up in the prefix cache, one lookup per admission
            (readmissions after a preemption included) (162,643).
        prefix_hit_tokens: of those, tokens found cached: whole blocks only (104,000).
        prefix_hit_rate: ``prefix_hit_tokens / prefix_query_tokens`` (0.639).
        prefix_blocks_saved: blocks not allocated thanks to those hits, per full-attention
            KV-cache group (104,000 / 16 x 1 group = 6,500).
        timeline: at most 240 ``(seconds, usage)`` points, each the peak of its slice of
            ``duration_s``, rounded to 6 digits; the last is the pool at the end.
        finish_steps: per workload request (by index), the step it finished in; -1 for one
            that did not (rejected). An ``array('q')`` (8 bytes a request, not a list of
            ints); compare it as ``list(r.finish_steps)``. Not in the JSON.
        allocated_blocks: blocks taken from the free pool, new ones and cached ones reused
            (6,750).
        freed_blocks: blocks given back to it; equal to ``allocated_blocks`` once every
            request has finished (6,750).
        max_used_blocks_seen: most blocks held at any recorded point, idle points included
            (668).
        ranks: with ``data_parallel_size`` > 1, each rank's own result (its pool, its
            requests; their ``finish_steps`` empty: the cluster's holds every request's), and
            the fields above are the cluster's (:func:`planner.simulate.cluster.simulate_ranks`
            says how each is combined); empty for one rank. In the JSON only when not empty.
    """

    num_gpu_blocks: int
    usable_blocks: int
    block_size: int
    requests: int
    completed: int
    rejected_too_long: int
    preemptions: int
    preempted_requests: int
    recomputed_tokens: int
    steps: int
    duration_s: float
    peak_blocks: int
    usage_p50: float
    usage_p90: float
    usage_max: float
    mean_concurrency: float
    max_concurrency: int
    prompt_tokens: int
    output_tokens: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    fragmentation: float
    prefix_query_tokens: int
    prefix_hit_tokens: int
    prefix_hit_rate: float
    prefix_blocks_saved: int
    timeline: list[tuple[float, float]]
    finish_steps: array[int] = field(repr=False, default_factory=lambda: array("q"))
    allocated_blocks: int = 0  # taken from the free pool: new blocks and cached ones reused
    freed_blocks: int = 0  # given back to it
    max_used_blocks_seen: int = 0
    ranks: tuple[SimResult, ...] = field(repr=False, default=())
    # the CPU tier (SimConfig.cpu_blocks; 0: none): of prefix_hit_tokens, those loaded from it
    cpu_blocks: int = 0
    cpu_hit_tokens: int = 0
    # vllm bench serve's figures by its names (BenchFigures); None only where built by hand
    bench: BenchFigures | None = None

    @property
    def gpu_hit_rate(self) -> float:
        """Looked-up tokens found in the GPU pool's prefix cache."""
        q = self.prefix_query_tokens
        return (self.prefix_hit_tokens - self.cpu_hit_tokens) / q if q else 0.0

    @property
    def cpu_hit_rate(self) -> float:
        """Looked-up tokens missing on the GPU and loaded from the CPU tier."""
        q = self.prefix_query_tokens
        return self.cpu_hit_tokens / q if q else 0.0


# --------------------------------------------------------------------------- engine


class PrefixChain:
    """Cached full blocks of one content chain (a shared prefix, or one request's own blocks
    kept after it is preempted): ``cached`` leading token blocks exist, ``holders`` maps how
    many leading blocks a running request holds to how many requests hold that many."""

    __slots__ = ("m", "cached", "holders", "in_use", "segments", "cpu", "cpu_segs")

    def __init__(self, m: int) -> None:
        self.m = m
        self.cached = 0
        self.holders: dict[int, int] = {}
        self.in_use = 0
        self.segments: list[list[Any]] = []
        # the CPU tier (_TierEngine only; unset otherwise): ``cpu`` leading token blocks are
        # there, in the runs ``cpu_segs`` of its LRU queue, oldest (highest blocks) first
        self.cpu: int
        self.cpu_segs: list[list[Any]]


class SimRequest:
    """One request's scheduling state; slots, since the engine holds up to millions of them.

    While a request decodes, the engine does not step it token by token: its context length
    before step ``s`` is ``s - base``, so it needs a new block in exactly the steps with
    ``s % block_size == res``, and then takes ``weight`` blocks. Example, block size 16: a
    100-token prefill that completes in step 39 decodes from step 40, so ``base`` = 40 - 100 =
    -60 and ``res`` = -60 % 16 = 4; in step 52 it holds 112 = 7 x 16 tokens and its 113th
    token takes a new block, again in steps 68, 84, ... ``weight`` is 1 for a model with one
    full-attention group (gemma-2 with a 4,096-token window at block size 16: 2, dropping to 1
    once the request holds the window's 257 blocks).
    """

    __slots__ = (
        "arrival",
        "prompt",
        "output",
        "chain",
        "own",
        "num_tokens",
        "computed",
        "generated",
        "held",
        "seq",
        "base",
        "res",
        "weight",
        "first_token",
        "preemptions",
        "l_start",
        "hw",
        "index",
        "late",
    )
    # set by SimEngine when admitted: admission number, its key in ``SimEngine.running`` (newest
    # is last)
    seq: int
    # set by SimEngine._add_decoder when it starts decoding (see the class docstring):
    base: int  # step - context length, constant while it decodes: length = s - base
    res: int  # (base - lookahead) % block_size: the residue of the steps it takes blocks in
    weight: int  # blocks it takes at each block boundary (window groups drop out)
    l_start: int  # context length when this decode run began (for fragmentation)

    def __init__(
        self, index: int, arrival: float, prompt: int, output: int, chain: PrefixChain | None
    ) -> None:
        self.index = index
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.chain = chain  # its shared prefix's cached blocks (None: nothing to share)
        self.own: PrefixChain | None = None  # its own full blocks kept cached after a preemption
        self.num_tokens = prompt  # tokens to prefill: prompt + outputs so far
        self.computed = 0  # tokens whose KV is computed: prefill progress
        self.generated = 0  # output tokens sampled so far
        self.held = 0  # leading blocks of ``chain`` this request holds
        self.first_token = -1.0  # time its first token was sampled; -1 before
        self.preemptions = 0
        self.hw = 0  # most tokens it had computed when preempted: a re-prefill below recomputes
        self.late = 0.0  # seconds from its send to ``arrival`` (the scheduler's): see _sent_late
        # not set until it is admitted (seq) or starts decoding (the rest), a million times
        # fewer stores: see the class attributes


class ItlBin:
    """One bin of the engine's inter-token latency histogram: decode tokens, and the
    seconds they took in all (:meth:`SimEngine.itl_cells` lists them)."""

    __slots__ = ("tokens", "seconds")

    def __init__(self, tokens: int, seconds: float) -> None:
        self.tokens = tokens
        self.seconds = seconds


def _unused_slots(x: int, b: int) -> int:
    """sum over 1 <= y <= x of (-y) mod b: empty slots in the last block at each length."""
    q, r = divmod(x, b)
    return q * b * (b - 1) // 2 + r * b - r * (r + 1) // 2


class SimEngine:
    def __init__(self, workload: Workload, config: SimConfig) -> None:
        self.cfg = config
        lay = config.layout
        self.layout = lay
        self.B = lay.block_size  # tokens per block
        # full-attention KV-cache groups: one token block of a request is ``fg`` pool blocks
        # there. Chains and ``held`` count token blocks, the pool and ``queue`` pool blocks.
        self.fg = lay.full_groups
        self.caching = config.prefix_caching and lay.full_groups > 0
        self.capacity = config.num_gpu_blocks - 1  # vLLM's null block
        self.free = self.capacity
        # free blocks in eviction order, as [count, chain] runs: chain None for plain blocks,
        # else cached blocks of that chain (only kept with prefix caching)
        self.queue: deque[list[Any]] = deque()
        if self.caching:
            self.queue.append([self.capacity, None])
        self.T = config.max_num_batched_tokens  # a step's tokens: 1 per decoder, rest prefill
        self.max_seqs = config.max_num_seqs
        self.roof = config.roofline
        self.step_s, self.decode_s = timers_of(config.roofline)  # the same floats, faster
        # compiled, a dense model's step times are a native object's methods instead (the
        # same floats again, called without boxing; interpreted, the closures are faster)
        self.line: LineTimer | None = line_timer_of(config.roofline) if COMPILED else None
        self.full_isl = config.reserve_full_isl
        self.prepend = config.prepend_uncached_free and self.caching
        self.asyn = config.async_scheduling
        # async scheduling: requests that sampled their last token, holding their blocks and
        # a max_num_seqs slot until the next step is scheduled (a kind-2 event releases them)
        self.zombies: dict[int, SimRequest] = {}
        fg, bs = lay.full_groups, lay.block_size
        # speculative lookahead: a request computing up to t tokens holds slots for
        # min(t + k, max_model_len) (KVCacheManager.allocate_slots), so a decoder stops growing
        # at cdiv(max_model_len, block) token blocks: a cap like a window's, weight 0 past it
        self.k = k = config.num_lookahead_tokens
        limit = config.max_model_len
        self.cap_len = -(-limit // bs) if k else math.inf
        self.caps = sorted(set(lay.window_caps) | ({-(-limit // bs)} if k else set()))
        # full attention only and no lookahead: blocks are a division, inlined
        self.plain = not lay.window_caps and not lay.state_blocks and not k
        if not lay.window_caps and not lay.state_blocks:

            def blocks(tokens: int) -> int:
                return fg * -(-tokens // bs)

            self.blocks = blocks
        else:
            self.blocks = lay.blocks
        if k:
            blocks_of = self.blocks

            def slot_blocks(tokens: int) -> int:
                return blocks_of(min(tokens + k, limit))

            self.slot_blocks = slot_blocks
        else:
            self.slot_blocks = self.blocks

        # requests are made into SimRequest as they arrive (run), and dropped once they finish
        self.requests = workload.requests
        self.chains: dict[str, PrefixChain] = {}
        self.rejected = 0
        self.finish_steps = array("q", [-1]) * len(workload.requests)

        # preempted requests, then arrived ones in arrival order; arrived requests are queued
        # one at a time as the queue empties (_pull): ``waiting`` is empty only when no request
        # that has arrived waits
        self.waiting: deque[SimRequest] = deque()
        self.incoming: Iterator[SimRequest] = iter(())
        self.nxt: SimRequest | None = None  # the next request to arrive or be queued
        self.pulled = 0  # requests queued so far (the progress bar's count)
        self.running: dict[int, SimRequest] = {}
        self.partial: SimRequest | None = None
        self.seqs = 0  # admissions so far: the next one's number
        self.step = 0
        self.now = 0.0
        self.next_arrival = math.inf
        # decoding requests, in aggregate
        self.dec_n = 0
        self.dec_sum = 0  # sum of their context lengths before the current step
        # cw[i]: blocks the decoders take in any step s with s % B == i, the sum of the
        # ``weight`` of the decoders whose ``res`` is i; a decode stretch of k steps needs
        # (k // B) * cw_total blocks plus the cw of its remaining residues
        self.cw = [0] * self.B
        self.cw_total = 0  # sum(cw): blocks the decoders take over any B consecutive steps
        self.buckets: list[dict[int, SimRequest]] = [{} for _ in range(self.B)]
        # a heap of events as ints, (step << 32) | (seq << 2) | kind, so ordered by
        # step, then admission; kind 0 finishes decoder seq, 1 lowers its window-group weight
        # (both stale unless seq is still running: a preempted request comes back with a new
        # seq), 2 releases finished request seq (async scheduling; stale unless a zombie)
        self.events: list[int] = []
        # statistics
        self.usage_time = [0.0] * (USAGE_BINS + 1)
        self.peak = 0
        # (seconds, blocks used) after each step or stretch and at idle points, as two columns
        # (kept as lists of TL_CHUNK points at most, added to the columns a chunk at a time:
        # the tl_time and tl_used properties)
        self._tl_time: array[float] = array("d")
        self._tl_used: array[int] = array("q")
        self.tl_t: list[float] = []
        self.tl_u: list[int] = []
        self.conc_time = 0.0
        self.max_conc = 0
        self.preemptions = 0
        self.preempted = 0  # distinct requests preempted
        self.recomputed = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        self.blocks_saved = 0
        self.ttft: array[float] = array("d")
        self.tpot: array[float] = array("d")
        self.e2e: array[float] = array("d")  # one per finished request
        # inter-token latencies: step durations weighted by the decode tokens each produced,
        # binned in log(seconds) (BenchFigures), and their exact sum
        self.itl_hist: dict[int, ItlBin] = {}  # bin -> its tokens and their seconds
        self.itl_sum = 0.0
        self.prompt_done = 0
        self.output_done = 0
        self.unused_slots = 0
        self.alloc_slots = 0
        # _frag_range's sums of empty slots: a whole cycle of B lengths, and the first r
        # lengths of one (r * B - r (r + 1) / 2), for a decoder's finish
        self.frag_half = self.B * (self.B - 1) // 2
        self.frag_part = [r * self.B - r * (r + 1) // 2 for r in range(self.B)]
        self.chain_tb = 0  # leading shared blocks in use, summed over chains
        self.allocated = 0
        self.freed = 0
        self.cpu_hit_tokens = 0  # _TierEngine's
        # _process_events may inline _finish (not with async scheduling, nor _TierEngine's,
        # nor a closed loop's)
        self.plain_finish = not self.asyn
        # a closed-loop client (Workload.max_concurrency): completion times in order, and the
        # next request while it waits for a slot (the completion it needs, its own arrival)
        self.closed = workload.max_concurrency or 0
        # seconds from a request's send to its arrival at the scheduler (the API server:
        # HTTP, tokenizing, the engine-core hand-off), plus this much per other request in
        # flight (SimConfig.request_latency_s, stream_latency_s); requests sent so far
        self.late = config.request_latency_s
        self.late_per_stream = config.stream_latency_s
        # the API server's output-token work (SimConfig.api_token_s): busy until api_free
        self.api_tok = config.api_token_s
        self.api_free = 0.0
        self.sent = 0
        self.done_times: array[float] = array("d")
        self.blocked_need = 0
        self.blocked_at = 0.0
        # or, scheduling asynchronously, the zombie's registration and its release
        # (_TierEngine's and a closed loop's are not)
        self.zombie_finish = self.asyn and not self.closed
        if self.closed:
            self.plain_finish = False

    @property
    def tl_time(self) -> array[float]:
        """The recorded points' times (seconds), in order."""
        self._flush_timeline()
        return self._tl_time

    @property
    def tl_used(self) -> array[int]:
        """The recorded points' blocks in use, in order."""
        self._flush_timeline()
        return self._tl_used

    def _point(self, t: float, used: int) -> None:
        """Record the pool at ``t``: ``used`` blocks in use (a timeline point; the hot paths,
        :meth:`_stretch` and :meth:`_single_step`, inline it)."""
        tl = self.tl_t
        tl.append(t)
        self.tl_u.append(used)
        if len(tl) >= TL_CHUNK:
            self._flush_timeline()

    def _flush_timeline(self) -> None:
        """Move the points recorded since the last call into the columns: a list's append
        per point and an array's ``fromlist`` per chunk cost less than an array's append per
        point (which parses its argument and reallocates the array every 1/16 of growth)."""
        if self.tl_t:
            self._tl_time.fromlist(self.tl_t)
            self._tl_used.fromlist(self.tl_u)
            self.tl_t.clear()
            self.tl_u.clear()

    # ------------------------------------------------------------------ pool
    def _take(self, k: int) -> None:
        """Allocate ``k`` blocks from the head of the free queue, evicting cached ones."""
        self.free -= k
        self.allocated += k
        if self.caching:
            self._evict(k)

    def _evict(self, k: int) -> None:
        """Take ``k`` blocks off the head of the free queue (prefix caching on); cached
        blocks among them leave their chains."""
        q, fg = self.queue, self.fg
        while k:
            seg = q[0]
            c = seg[0]
            chain = seg[1]
            if c <= k:
                q.popleft()
                k -= c
                if chain is not None:
                    chain.cached -= c // fg
                    seg[0] = 0
            else:
                left = c - k
                k = 0
                if chain is None:
                    seg[0] = left
                else:  # whole token blocks left stay cached; a split one becomes plain
                    keep = left // fg
                    chain.cached -= c // fg - keep
                    seg[0] = keep * fg
                    if left - keep * fg:
                        q.appendleft([left - keep * fg, None])

    def _give(
        self,
        plain: int,
        own: int,
        own_chain: PrefixChain | None,
        shared: int,
        chain: PrefixChain | None,
        front: int = 0,
    ) -> None:
        """Return a request's blocks: its plain ones, then its own full blocks (kept cached for
        when it resumes), then shared blocks no one holds any more, in vLLM's tail-first order.
        ``front`` of the plain ones have no block hash and go to the front of the queue
        (``prepend_uncached_free``)."""
        total = plain + own * self.fg + shared * self.fg
        self.free += total
        self.freed += total
        if not self.caching:
            return
        q = self.queue
        if front:
            plain -= front
            if q and q[0][1] is None:
                q[0][0] += front
            else:
                q.appendleft([front, None])
        if plain:
            if q and q[-1][1] is None:
                q[-1][0] += plain  # plain blocks are interchangeable: extend the tail run
            else:
                q.append([plain, None])
        if own:
            assert own_chain is not None
            seg = [own * self.fg, own_chain]
            own_chain.segments.append(seg)
            q.append(seg)
        if shared:
            assert chain is not None
            seg = [shared * self.fg, chain]
            chain.segments.append(seg)
            q.append(seg)

    def _hits(self, r: SimRequest) -> tuple[int, int, int]:
        """(shared, own) token blocks found cached for ``r``, and how many cached-but-free
        blocks taking them removes from the free count."""
        if not self.caching:
            return 0, 0, 0
        chain, fg = r.chain, self.fg
        shared = touch = 0
        m = 0
        if chain is not None:
            shared, m = chain.cached, chain.m
            if shared > chain.in_use:
                touch = (shared - chain.in_use) * fg
        own = 0
        if r.own is not None and shared == m:
            own = min(r.own.cached, (r.num_tokens - 1) // self.B - shared)
            touch += own * fg
        return shared, own, touch

    def _hold(self, chain: PrefixChain, old: int, new: int) -> None:
        """A request now holds ``new`` (was ``old``) leading blocks of ``chain``."""
        h = chain.holders
        if old:
            if h[old] == 1:
                del h[old]
            else:
                h[old] -= 1
        if new:
            h[new] = h.get(new, 0) + 1
        if new > chain.cached:
            chain.cached = new
        in_use = max(h) if h else 0
        self.chain_tb += in_use - chain.in_use
        chain.in_use = in_use

    def _release_plain(self, tokens: int) -> None:
        """Free the blocks of a request holding ``tokens`` tokens and no shared prefix, as
        ``_give(plain, 0, None, 0, None, front)``: the common case of :meth:`_release`."""
        total = self.fg * -(-tokens // self.B) if self.plain else self.slot_blocks(tokens)
        self.free += total
        self.freed += total
        if self.caching:
            q = self.queue
            if self.prepend:  # its partly filled last block (and lookahead ones) have no hash
                full = tokens // self.B
                front = total - (self.fg * full if self.plain else self.blocks(full * self.B))
                if front:
                    total -= front
                    if q and q[0][1] is None:
                        q[0][0] += front
                    else:
                        q.appendleft([front, None])
            if total:
                if q and q[-1][1] is None:
                    q[-1][0] += total
                else:
                    q.append([total, None])

    def _release(self, r: SimRequest, tokens: int, preempted: bool) -> None:
        """Free the blocks ``r`` holds for ``tokens`` tokens."""
        chain, held = r.chain, r.held
        if chain is None and not preempted:
            self._release_plain(tokens)
            return
        plain = self.slot_blocks(tokens) - self.fg * held
        own = 0
        own_chain = None
        if preempted and self.caching:
            own = tokens // self.B - held if (chain is None or held == chain.m) else 0
            if own > 0:
                own_chain = r.own = r.own or PrefixChain(0)
                own_chain.cached = own
                plain -= own * self.fg
            else:
                own = 0
        shared = 0
        if chain is not None and held:
            before = chain.in_use
            self._hold(chain, held, 0)
            shared = before - chain.in_use if held == before else 0
        r.held = 0
        front = 0
        if self.prepend:  # its partly filled last block has no hash (BlockPool.free_blocks)
            front = self.slot_blocks(tokens) - self.blocks(tokens // self.B * self.B)
        self._give(plain, own, own_chain, shared, chain, front)

    # ------------------------------------------------------------------ decoders
    def _add_decoder(self, r: SimRequest) -> None:
        """``r`` finished its prefill in the last step; from ``self.step`` on it decodes."""
        B = self.B
        length = r.computed
        r.base = base = self.step - length
        # it holds slots for length + k tokens, and takes a block when that is a multiple of B
        r.res = res = (base - self.k) % B
        caps = self.caps
        # without window groups (or lookahead) every block boundary takes the full-attention
        # blocks
        n = -(-min(length + self.k, self.cfg.max_model_len) // B)  # token blocks it holds
        r.weight = w = self._weight(n) if caps else self.fg
        r.l_start = length
        self.cw[res] += w
        self.cw_total += w
        self.buckets[res][r.seq] = r
        self.dec_n += 1
        self.dec_sum += length
        finish = base + r.prompt + r.output - 2
        heappush(self.events, finish << 32 | r.seq << 2)
        if caps:
            self._push_cap(r, n, finish)

    def _weight(self, n: int) -> int:
        """Blocks a decoder takes growing from ``n`` token blocks: the layout's, none at the
        max_model_len cap (lookahead only; see __init__)."""
        return 0 if n >= self.cap_len else self.layout.weight(n)

    def _push_cap(self, r: SimRequest, n: int, finish: int) -> None:
        """Schedule the step after which ``r`` (holding ``n`` token blocks) stops growing a
        window group, or every group at the max_model_len cap: it takes its c-th token block
        in the step where it holds length + k = (c - 1) * B slots' worth of tokens."""
        for c in self.caps:
            if c > n:
                step = r.base + (c - 1) * self.B - self.k
                if step <= finish:
                    heappush(self.events, step << 32 | r.seq << 2 | 1)
                return

    def _drop_decoder(self, r: SimRequest) -> int:
        """Remove ``r`` from the decoding aggregates; returns its context length now."""
        length = self.step - r.base
        res, w = r.res, r.weight
        self.cw[res] -= w
        self.cw_total -= w
        del self.buckets[res][r.seq]
        self.dec_n -= 1
        self.dec_sum -= length
        if length > r.l_start:  # decode steps run at lengths l_start .. length - 1
            self._frag_range(r, r.l_start + 1, length)
        return length

    def _frag_range(self, r: SimRequest, x0: int, x1: int) -> None:
        """Fragmentation sums for steps after which ``r`` held x0 .. x1 tokens: the empty
        slots of its last block, sum over y of (-y) mod B (see :func:`_unused_slots`)."""
        B = self.B
        half = B * (B - 1) // 2  # empty slots over one full cycle of lengths
        q, r1 = x1 // B, x1 % B
        q0, r0 = (x0 - 1) // B, (x0 - 1) % B
        unused = (q - q0) * half + r1 * B - r1 * (r1 + 1) // 2 - r0 * B + r0 * (r0 + 1) // 2
        tokens = (x1 * (x1 + 1) - (x0 - 1) * x0) // 2
        self.unused_slots += unused
        self.alloc_slots += tokens + unused - r.held * B * (x1 - x0 + 1)

    # ------------------------------------------------------------------ requests
    def _preempt(self, v: SimRequest) -> None:
        """Preempt running request ``v`` (already popped from ``running``): free everything,
        recompute later from the front of the queue."""
        if v is self.partial:
            self.partial = None
            tokens = v.computed
        else:
            tokens = self._drop_decoder(v)
            v.num_tokens = tokens + 1  # prompt + outputs so far
            v.generated = tokens + 1 - v.prompt
            v.generated = tokens + 1 - v.prompt
        self._release(v, tokens, preempted=True)
        v.hw = max(v.hw, tokens)
        v.computed = 0
        v.preemptions += 1
        self.preemptions += 1
        if v.preemptions == 1:
            self.preempted += 1
        self.waiting.appendleft(v)

    def _finish(self, r: SimRequest, tokens: int) -> None:
        del self.running[r.seq]
        if self.asyn:  # released once the next step is scheduled (module docstring)
            r.computed = tokens
            self.zombies[r.seq] = r
            heappush(self.events, self.step << 32 | r.seq << 2 | 2)
        elif r.chain is None:
            self._release_plain(tokens)
        else:
            self._release(r, tokens, preempted=False)
        self.finish_steps[r.index] = self.step - 1
        output, now, first, arrival = r.output, self.now, r.first_token, r.arrival
        self.prompt_done += r.prompt
        self.output_done += output
        late = r.late  # it was sent that long before it reached the scheduler
        self.ttft.append(first - arrival + late)
        self.e2e.append(now - arrival + late)
        if output > 1:
            self.tpot.append((now - first) / (output - 1))
        if self.closed:
            self._completed(now)

    def _itl(self, dt: float, tokens: int) -> None:
        """``tokens`` decode tokens each came ``dt`` seconds after their request's last one."""
        b = math.floor(math.log(dt) * ITL_BINS_PER_E)
        cell = self.itl_hist.get(b)
        if cell is None:
            self.itl_hist[b] = ItlBin(tokens, dt * tokens)
        else:
            cell.tokens += tokens
            cell.seconds += dt * tokens
        self.itl_sum += dt * tokens

    def _completed(self, now: float) -> None:
        """A request completed at ``now``: a closed-loop client sends its next one (it may have
        been waiting for this slot)."""
        self.done_times.append(now)
        if self.blocked_need and len(self.done_times) >= self.blocked_need:
            r = self.nxt
            assert r is not None
            r.arrival = max(self.blocked_at, now + r.late)
            self.next_arrival = r.arrival
            self.blocked_need = 0

    def _api_wait(self, r: SimRequest) -> None:
        """``r`` (sent at ``r.arrival - r.late``) waits for the API server to finish the
        output tokens of the requests sent before it (SimConfig.api_token_s), then takes its
        own: it reaches the scheduler ``request_latency_s`` plus the longer of that wait and
        its ``stream_latency_s`` share after its send (both are the API server's time on the
        others' tokens, counted once)."""
        send = r.arrival - r.late
        free = self.api_free
        start = send if send >= free else free
        self.api_free = start + self.api_tok * r.output
        extra = (start - send) - (r.late - self.late)
        if extra > 0:
            r.late += extra
            r.arrival += extra

    def _closed_loop(self, inner: Iterator[SimRequest]) -> Iterator[SimRequest]:
        """``inner``'s requests, each sent when fewer than ``closed`` are in flight: the
        ``j``-th (from 0) waits for the ``(j - closed + 1)``-th completion; until it comes its
        arrival is unknown (inf) and :meth:`_completed` sets it."""
        c, done = self.closed, self.done_times
        for j, r in enumerate(inner):
            need = j - c + 1
            if need > 0:
                if len(done) >= need:
                    r.arrival = max(r.arrival, done[need - 1] + r.late)
                else:
                    self.blocked_need, self.blocked_at = need, r.arrival
                    r.arrival = math.inf
            yield r

    def _prefilled(self, r: SimRequest) -> None:
        """``r``'s prefill completed in the step just run: it sampled a token."""
        r.generated += 1
        if r.first_token < 0:
            r.first_token = self.now
        if r.generated >= r.output:
            self._finish(r, r.computed)
        else:
            self._add_decoder(r)

    # ------------------------------------------------------------------ steps
    def _record(self, dt: float, used_first: int, used_last: int, steps: int) -> None:
        """Statistics for ``steps`` steps lasting ``dt`` s, usage rising from first to last."""
        cap = self.capacity
        if used_last > self.peak:
            self.peak = used_last
        lo = used_first * USAGE_BINS // cap
        hi = used_last * USAGE_BINS // cap
        ut = self.usage_time
        if lo == hi:
            ut[lo] += dt
        else:
            share = dt / (hi - lo + 1)
            for b in range(lo, hi + 1):
                ut[b] += share
        running = len(self.running)
        self.conc_time += running * dt
        if running > self.max_conc:
            self.max_conc = running
        self._point(self.now, used_last)
        self.alloc_slots += self.chain_tb * self.B * steps

    def _process_events(self, last: int) -> None:
        """Finishes and window caps of decoders, and releases of finished requests (async
        scheduling), at steps up to ``last`` (the step just run)."""
        ev = self.events
        running, zombies = self.running, self.zombies
        B, half, part = self.B, self.frag_half, self.frag_part
        # a finish without a shared prefix, scheduling synchronously: _finish inlined below
        plain_finish, plain, fg = self.plain_finish, self.plain, self.fg
        zombie_finish = self.zombie_finish
        caching, prepend, fq = self.caching, self.prepend, self.queue
        finish_steps, step, now = self.finish_steps, self.step, self.now
        ttft, e2e, tpot = self.ttft, self.e2e, self.tpot
        end = (last + 1) << 32
        while ev and ev[0] < end:
            e = heappop(ev)
            seq, kind = (e >> 2) & SEQ_MASK, e & 3
            r = zombies.get(seq) if kind == 2 else running.get(seq)
            if r is None:
                continue  # stale
            assert e >> 32 == last
            if kind == 2:
                del zombies[seq]
                if r.chain is not None or not zombie_finish:
                    self._release(r, r.computed, preempted=False)
                    continue
                tokens = r.computed  # released below, as _release_plain does
            elif kind == 0:  # _drop_decoder and its _frag_range, inlined: 1 call a request
                res, w = r.res, r.weight
                self.cw[res] -= w
                self.cw_total -= w
                del self.buckets[res][seq]
                self.dec_n -= 1
                length = self.step - r.base
                self.dec_sum -= length
                x0 = r.l_start  # decode steps ran at lengths l_start .. length - 1
                if length > x0:
                    q, r1 = length // B, length % B  # (not divmod: a tuple, boxed compiled)
                    q0, r0 = x0 // B, x0 % B
                    unused = (q - q0) * half + part[r1] - part[r0]
                    self.unused_slots += unused
                    self.alloc_slots += (
                        (length * (length + 1) - x0 * (x0 + 1)) // 2
                        + unused
                        - r.held * B * (length - x0)
                    )
                if r.chain is None and plain_finish:  # _finish and _release_plain, inlined
                    del running[seq]
                    tokens = length  # released below
                    finish_steps[r.index] = step - 1
                    output, first, arrival, late = r.output, r.first_token, r.arrival, r.late
                    self.prompt_done += r.prompt
                    self.output_done += output
                    ttft.append(first - arrival + late)
                    e2e.append(now - arrival + late)
                    if output > 1:
                        tpot.append((now - first) / (output - 1))
                elif zombie_finish:  # _finish with async scheduling, inlined
                    del running[seq]
                    r.computed = length
                    zombies[seq] = r
                    heappush(ev, step << 32 | seq << 2 | 2)
                    finish_steps[r.index] = step - 1
                    output, first, arrival, late = r.output, r.first_token, r.arrival, r.late
                    self.prompt_done += r.prompt
                    self.output_done += output
                    ttft.append(first - arrival + late)
                    e2e.append(now - arrival + late)
                    if output > 1:
                        tpot.append((now - first) / (output - 1))
                    continue
                else:
                    self._finish(r, length)
                    continue
            else:
                # token blocks after this step's growth
                n = (last - r.base + self.k) // self.B + 1
                w = self._weight(n)
                self.cw[r.res] += w - r.weight
                self.cw_total += w - r.weight
                r.weight = w
                self._push_cap(r, n, r.base + r.prompt + r.output - 2)
                continue
            # _release_plain(tokens), inlined: a released zombie's or a plain finish's blocks
            total = fg * -(-tokens // B) if plain else self.slot_blocks(tokens)
            self.free += total
            self.freed += total
            if caching:
                if prepend:  # blocks(tokens // B * B) is fg * (tokens // B) when plain
                    front = total - (fg * (tokens // B) if plain else self.blocks(tokens // B * B))
                    if front:
                        total -= front
                        if fq and fq[0][1] is None:
                            fq[0][0] += front
                        else:
                            fq.appendleft([front, None])
                if total:
                    if fq and fq[-1][1] is None:
                        fq[-1][0] += total
                    else:
                        fq.append([total, None])

    def _blocks_needed(self, s: int, k: int) -> int:
        """Blocks the decoders allocate over steps s .. s + k - 1."""
        B, cw = self.B, self.cw
        q, rem = k // B, k % B
        start = s % B
        if start + rem <= B:
            part = sum(cw[start : start + rem])
        else:
            part = sum(cw[start:]) + sum(cw[: start + rem - B])
        return q * self.cw_total + part

    def _steps_fitting(self, s: int, free: int) -> int:
        """How many decode steps from ``s`` the free blocks cover."""
        B, cw, total = self.B, self.cw, self.cw_total
        q, rem = free // total, free % total
        k = q * B
        while True:
            need = cw[(s + k) % B]
            if need > rem:
                return k
            rem -= need
            k += 1

    def _stretch(self) -> bool:
        """Run decode-only steps up to the next event in one go; False if the very next step
        runs out of blocks (the caller then runs it as a single step, with preemption).

        The hot path of a lightly loaded replay, once per event: :meth:`_blocks_needed`,
        :meth:`_take`, :meth:`_itl` and :meth:`_record` are inlined here, and the stretch's
        duration is the one :meth:`_steps_until` already computed when it is for these steps
        (the same call, so the same float)."""
        ev = self.events
        running, zombies = self.running, self.zombies
        while ev:  # drop stale events
            e = ev[0]
            if ((e >> 2) & SEQ_MASK) in (zombies if e & 3 == 2 else running):
                break
            heappop(ev)
        s = self.step
        k = (ev[0] >> 32) - s + 1
        n = self.dec_n
        kv = self.dec_sum + n
        dt = -1.0  # not computed yet
        # (one step, the release of a finished request's blocks as often as not, always runs:
        # _steps_until would say 1 too, the next arrival being after now)
        if k > 1 and not self.waiting and self.next_arrival < math.inf:
            until, dt = self._steps_until(self.next_arrival - self.now, n, k)
            if until < k:
                k = until
            elif until > k:
                dt = -1.0
        need = 0
        B, cw, cw_total = self.B, self.cw, self.cw_total
        if cw_total:
            # _blocks_needed(s, k), inlined
            q, rem = k // B, k % B
            start = s % B
            if COMPILED:  # a C loop over the list (interpreted, slices and sum() are faster)
                need = q * cw_total
                for i in range(start, start + rem):
                    need += cw[i - B if i >= B else i]
            elif start + rem <= B:
                need = q * cw_total + sum(cw[start : start + rem])
            else:
                need = q * cw_total + sum(cw[start:]) + sum(cw[: start + rem - B])
            free = self.free
            if self.waiting and need:
                # never evict blocks the blocked head of the queue would hit: the step that
                # does runs on its own, where admission is checked after the eviction
                free = self._room(self.waiting[0], min(need, free))
            if need > free:
                k = self._steps_fitting(s, free)
                if k == 0:
                    return False
                need = self._blocks_needed(s, k)
                dt = -1.0
        cap = self.capacity
        used_first = cap - self.free + cw[s % B]
        if need:  # _take(need), the head of the queue inlined
            self.free -= need
            self.allocated += need
            if self.caching:
                seg = self.queue[0]
                if seg[1] is None and seg[0] > need:
                    seg[0] -= need
                else:
                    self._evict(need)
        if dt < 0:
            line = self.line
            dt = self.decode_s(n, kv, k) if line is None else line.decode(n, kv, k)
        if dt > 0:  # _itl(dt / k, n * k), inlined
            per = dt / k
            tokens = n * k
            b = math.floor(math.log(per) * ITL_BINS_PER_E)
            cell = self.itl_hist.get(b)
            if cell is None:
                self.itl_hist[b] = ItlBin(tokens, per * tokens)
            else:  # (a native object's fields compiled, not a list's boxed numbers)
                cell.tokens += tokens
                cell.seconds += per * tokens
            self.itl_sum += per * tokens
        self.now = now = self.now + dt
        self.step = s + k
        self.dec_sum += n * k
        # _record(dt, used_first, used_last, k), inlined
        used_last = cap - self.free
        if used_last > self.peak:
            self.peak = used_last
        lo = used_first * USAGE_BINS // cap
        hi = used_last * USAGE_BINS // cap
        ut = self.usage_time
        if lo == hi:
            ut[lo] += dt
        else:
            share = dt / (hi - lo + 1)
            for u in range(lo, hi + 1):
                ut[u] += share
        conc = len(running)
        self.conc_time += conc * dt
        if conc > self.max_conc:
            self.max_conc = conc
        tl = self.tl_t  # _point(now, ...), inlined
        tl.append(now)
        self.tl_u.append(used_last)
        if len(tl) >= TL_CHUNK:
            self._flush_timeline()
        self.alloc_slots += self.chain_tb * B * k
        if ev[0] >> 32 < s + k:
            self._process_events(s + k - 1)
        return True

    def _room(self, r: SimRequest, limit: int) -> int:
        """Blocks (at most ``limit``) that can be taken from the free queue before reaching a
        cached block ``r`` would hit."""
        if not self.caching or (r.chain is None and r.own is None):
            return limit
        mine = (r.chain, r.own)
        room = 0
        for seg in self.queue:
            if seg[0] and seg[1] is not None and seg[1] in mine:
                return room
            room += seg[0]
            if room >= limit:
                return limit
        return min(room, limit)

    def _steps_until(self, seconds: float, n: int, limit: int) -> tuple[int, float]:
        """Decode steps until the first one that starts at least ``seconds`` from now (>= 1),
        and how long that many steps take (``decode_s``; -1.0 where it was not computed).

        Step times only grow within a stretch, so with g(k) the k-th step's time the answer
        lies in [seconds / g(hi - 1), hi], hi = ceil(seconds / g(0)): a narrow bracket to
        bisect, since contexts grow slowly relative to their length."""
        kv = self.dec_sum + n
        line = self.line
        if line is not None:  # (compiled: the native step times)
            first = line.step(n, kv, kv, 0)
        else:
            first = self.step_s(n, kv, kv)
        hi = math.ceil(seconds / first) if first > 0 else limit
        if hi >= limit:
            at_limit = self.decode_s(n, kv, limit) if line is None else line.decode(n, kv, limit)
            if at_limit < seconds or limit == 1:
                return limit, at_limit
            return self._bisect(seconds, n, kv, 1, limit, at_limit)
        hi = max(1, hi)
        top = kv + n * (hi - 1)
        if line is not None:
            last = line.step(n, top, top, 0)
        else:
            last = self.step_s(n, top, top)
        lo = max(1, min(hi, int(seconds / last)))
        return self._bisect(seconds, n, kv, lo, hi, -1.0)

    def _bisect(
        self, seconds: float, n: int, kv: int, lo: int, hi: int, at_hi: float
    ) -> tuple[int, float]:
        """Smallest k in [lo, hi] whose k decode steps take at least ``seconds`` (hi must),
        and their time if it was computed (``at_hi``: hi's, -1.0 if not known)."""
        decode_s, line = self.decode_s, self.line
        while lo < hi:
            mid = (lo + hi) // 2
            t = decode_s(n, kv, mid) if line is None else line.decode(n, kv, mid)
            if t >= seconds:
                hi, at_hi = mid, t
            else:
                lo = mid + 1
        return lo, at_hi

    def _admissible(self) -> bool:
        """Could this step admit the head of the queue (or does it run out of blocks)?"""
        if len(self.running) + len(self.zombies) >= self.max_seqs or self.dec_n >= self.T:
            return False
        need = self.cw[self.step % self.B]
        free = self.free - need
        if free < 0:
            return True
        r = self.waiting[0]
        if need and self._room(r, need) < need:
            return True  # the decoders evict blocks it would hit: let the step decide
        if self.caching and (r.chain is not None or r.own is not None):
            shared, own, touch = self._hits(r)
            hits = shared + own
        else:
            hits = touch = 0
        end = (
            r.num_tokens
            if self.full_isl
            else min(r.num_tokens, hits * self.B + self.T - self.dec_n)
        )
        blocks = self.fg * -(-end // self.B) if self.plain else self.blocks(end)
        return blocks - self.fg * hits + touch <= free

    def _exhaust(self, r0: int) -> bool:
        """Decoders crossing a block boundary this step, oldest first, each take their blocks;
        when none are free the newest running request is preempted (vLLM
        ``self.running.pop()``), possibly the one asking. Returns whether it preempted."""
        running = self.running
        preempted = False
        taking = 0  # blocks of the decoders so far, taken together before anything is freed
        for seq, r in sorted(self.buckets[r0].items()):
            if seq not in running:
                continue
            w = r.weight
            if self.free - taking < w:
                self._take(taking)
                taking = 0
                while self.free < w:
                    _, victim = running.popitem()
                    self._preempt(victim)
                    preempted = True
                    if victim is r:
                        return True
            taking += w
        self._take(taking)
        return preempted

    def _single_step(self) -> None:
        """One scheduler step: the decoders' blocks (preempting if they run out), the partial
        prefill's next chunk, then admissions; statistics; then what the step completed.
        The hot path of a replay: pool and decoder updates are inlined here (the methods they
        stand for: :meth:`_take`, :meth:`_record`, :meth:`_prefilled`, :meth:`_add_decoder`)."""
        s = self.step
        if not self.running and not self.waiting:
            # only finished requests' releases are due (async scheduling): a step that
            # schedules nothing and takes no time; what the full path records for it
            self.step = s + 1
            used = self.capacity - self.free
            if used > self.peak:
                self.peak = used
            self._point(self.now, used)
            self.alloc_slots += self.chain_tb * self.B
            ev = self.events
            if ev and ev[0] >> 32 <= s:
                self._process_events(s)
            return
        # (self._take and self._evict called as methods: bound methods made into locals at
        # every call are slower, compiled, than the calls they save)
        B, blocks, fg = self.B, self.blocks, self.fg
        slot_blocks = self.slot_blocks
        caching, q = self.caching, self.queue
        need = self.cw[s % B]
        preempted = False
        if need:
            if need <= self.free:  # _take(need), the head of the queue inlined
                self.free -= need
                self.allocated += need
                if caching:
                    seg = q[0]
                    if seg[1] is None and seg[0] > need:
                        seg[0] -= need
                    else:
                        self._evict(need)
            else:
                preempted = self._exhaust(s % B)
        n = self.dec_n
        tokens, kv = n, self.dec_sum + n
        pairs = kv
        budget = self.T - n
        done: list[SimRequest] = []
        p = self.partial
        if p is not None and budget > 0:
            a = p.computed
            b = min(p.num_tokens, a + budget)
            need = slot_blocks(b) - slot_blocks(a)
            if need > self.free:  # the partial prefill is the newest running request
                del self.running[p.seq]
                self._preempt(p)
                preempted = True
            else:
                self._take(need)
                p.computed = b
                if p.chain is not None and p.held < p.chain.m:
                    new = min(p.chain.m, b // B)
                    self._hold(p.chain, p.held, new)
                    p.held = new
                if p.hw > a:
                    self.recomputed += min(b, p.hw) - a
                tokens += b - a
                kv += b
                pairs += (b * (b + 1) - a * (a + 1)) // 2
                budget -= b - a
                unused = -b % B  # fragmentation: empty slots in its last block now
                self.unused_slots += unused
                self.alloc_slots += b + unused - p.held * B
                if b == p.num_tokens:
                    self.partial = None
                    done.append(p)
        waiting, running = self.waiting, self.running
        if not preempted and waiting and budget > 0:
            seqs = self.max_seqs - len(self.zombies)
            full_isl, plain, now = self.full_isl, self.plain, self.now
            # counters kept in locals over the loop, stored back after it (and around _touch)
            free, allocated = self.free, self.allocated
            queried = unused_slots = alloc_slots = 0
            while len(running) < seqs:
                r = waiting[0]
                if caching and (r.chain is not None or r.own is not None):
                    shared, own, touch = self._hits(r)
                    hits = shared + own
                else:
                    shared = own = touch = hits = 0
                a = hits * B
                num = r.num_tokens
                b = num if num - a <= budget else a + budget
                # blocks(b) - fg * hits, inlined where every group is full attention
                new_blocks = fg * (-(-b // B) - hits) if plain else slot_blocks(b) - fg * hits
                if new_blocks + touch > free:
                    break
                if full_isl and blocks(num) - fg * hits + touch > free:
                    break  # vLLM >= 0.19 reserves the whole prompt (module docstring)
                waiting.popleft()
                if not waiting and self.next_arrival <= now:  # _pull(), inlined
                    nxt = self.nxt
                    assert nxt is not None
                    waiting.append(nxt)
                    self.nxt = nxt = next(self.incoming, None)
                    self.next_arrival = math.inf if nxt is None else nxt.arrival
                    self.pulled += 1
                    if PROGRESS is not None and not self.pulled & 4095:
                        PROGRESS(self.pulled)
                if touch:
                    self.free, self.allocated = free, allocated
                    self._touch(r, shared, own, touch)
                    free, allocated = self.free, self.allocated
                free -= new_blocks  # _take(new_blocks), the head of the queue inlined
                allocated += new_blocks
                if caching and new_blocks:
                    seg = q[0]
                    if seg[1] is None and seg[0] > new_blocks:
                        seg[0] -= new_blocks
                    else:
                        self._evict(new_blocks)
                queried += num
                if hits:
                    self.hit_tokens += a
                    self.blocks_saved += fg * hits
                if r.hw > a:
                    self.recomputed += min(b, r.hw) - a
                if r.own is not None:  # whatever was not reused is stale now
                    for seg in r.own.segments:
                        seg[1] = None
                    r.own = None
                r.computed = b
                if r.chain is not None:
                    held = min(r.chain.m, b // B)
                    self._hold(r.chain, 0, held)
                    r.held = held
                r.seq = seq = self.seqs
                self.seqs = seq + 1
                if seq > SEQ_MASK:
                    raise AssertionError("more than 2**30 admissions: an event cannot hold one")
                running[seq] = r
                tokens += b - a
                kv += b
                pairs += (b * (b + 1) - a * (a + 1)) // 2
                budget -= b - a
                unused = -b % B
                unused_slots += unused
                alloc_slots += b + unused - r.held * B
                if b == num:
                    done.append(r)
                else:
                    self.partial = r
                if not waiting or budget <= 0:
                    break
            self.free, self.allocated = free, allocated
            self.query_tokens += queried
            self.unused_slots += unused_slots
            self.alloc_slots += alloc_slots
        if not running and not done and not self.zombies:
            if waiting and not preempted:  # cannot fit even into an empty pool
                raise AssertionError("a request larger than the pool reached the scheduler")
        if not tokens:
            dt = 0.0
        elif self.line is None:
            dt = self.step_s(tokens, kv, pairs, len(running))
        else:
            dt = self.line.step(tokens, kv, pairs, len(running))
        if n and dt > 0:
            self._itl(dt, n)
        self.now = now = self.now + dt
        self.step = step = s + 1
        self.dec_sum += n
        # _record(dt, used, used, 1)
        used = self.capacity - self.free
        if used > self.peak:
            self.peak = used
        self.usage_time[used * USAGE_BINS // self.capacity] += dt
        conc = len(running)
        self.conc_time += conc * dt
        if conc > self.max_conc:
            self.max_conc = conc
        tl = self.tl_t  # _point(now, ...), inlined
        tl.append(now)
        self.tl_u.append(used)
        if len(tl) >= TL_CHUNK:
            self._flush_timeline()
        self.alloc_slots += self.chain_tb * B
        ev = self.events
        if ev and ev[0] >> 32 <= s:
            self._process_events(s)
        if not done:
            return
        if self.caps:
            for r in done:
                self._prefilled(r)
            return
        # _prefilled and _add_decoder, without window groups: every block boundary takes fg
        cw, buckets = self.cw, self.buckets
        for r in done:
            r.generated += 1
            if r.first_token < 0:
                r.first_token = now
            if r.generated >= r.output:
                self._finish(r, r.computed)
                continue
            length = r.computed
            r.base = base = step - length
            r.res = res = base % B
            r.weight = fg
            r.l_start = length
            cw[res] += fg
            self.cw_total += fg
            buckets[res][r.seq] = r
            self.dec_n += 1
            self.dec_sum += length
            heappush(ev, (base + r.prompt + r.output - 2) << 32 | r.seq << 2)  # kind 0

    def _touch(self, r: SimRequest, shared: int, own: int, touch: int) -> None:
        """Take cached free blocks out of the free queue for a prefix-cache hit: a hit always
        takes every cached block of its chains, so all their free segments go."""
        self.free -= touch
        self.allocated += touch
        live = 0
        for chain in (r.chain, r.own if own else None):
            if chain is not None:
                for seg in chain.segments:
                    live += seg[0]
                    seg[0] = 0
                chain.segments = []
        assert live == touch, (live, touch)

    # ------------------------------------------------------------------ main loop
    def _arrivals(self, late: bool = False) -> Iterator[SimRequest]:
        """The workload's requests as they arrive, rejected ones counted and left out; with
        ``late``, each sent late as :meth:`_sent_late` sends them (open loop only), done here
        where the requests are made a batch at a time (one generator fewer a request)."""
        reqs, limit, B = self.requests, self.cfg.max_model_len, self.B
        chains, caching = self.chains, self.caching
        if isinstance(reqs, RequestList):
            prompts, outputs, arrivals = reqs.prompt, reqs.output, reqs.arrival
            groups = reqs.prefix
            ids, tokens = reqs.prefix_ids, reqs.prefix_tokens
            if groups is None or not caching:
                # nothing to share: a batch at a time, made in C (map) where none is too long
                n = len(prompts)
                base, per, e2e = self.late, self.late_per_stream, self.e2e
                tok = self.api_tok
                for lo in range(0, n, ARRIVAL_BATCH):
                    hi = min(n, lo + ARRIVAL_BATCH)
                    p, o = prompts[lo:hi], outputs[lo:hi]
                    if max(map(operator.add, p, o)) <= limit:
                        batch = list(
                            map(
                                SimRequest,
                                range(lo, hi),
                                arrivals[lo:hi],
                                p,
                                o,
                                itertools.repeat(None),
                            )
                        )
                        if not late:
                            yield from batch
                            continue
                        for one in batch:  # _sent_late's loop (open: no cap on those in flight)
                            lt = base + per * (self.sent - len(e2e)) if per else base
                            self.sent += 1
                            one.late = lt
                            one.arrival += lt
                            if tok:
                                self._api_wait(one)
                            yield one
                        continue
                    for i in range(lo, hi):
                        prompt, output = prompts[i], outputs[i]
                        if prompt + output > limit:
                            self.rejected += 1
                            continue
                        one = SimRequest(i, arrivals[i], prompt, output, None)
                        if late:
                            lt = base + per * (self.sent - len(e2e)) if per else base
                            self.sent += 1
                            one.late = lt
                            one.arrival += lt
                            if tok:
                                self._api_wait(one)
                        yield one
                return
            for i in range(len(prompts)):
                prompt, output = prompts[i], outputs[i]
                if prompt + output > limit:
                    self.rejected += 1
                    continue
                chain = None
                if caching and groups is not None and (g := groups[i]) >= 0 and tokens[g] >= B:
                    chain = chains.get(ids[g])
                    if chain is None:
                        chain = chains[ids[g]] = PrefixChain(tokens[g] // B)
                yield SimRequest(i, arrivals[i], prompt, output, chain)
            return
        for i, r in enumerate(reqs):
            if r.prompt_tokens + r.output_tokens > limit:
                self.rejected += 1
                continue
            chain = None
            if caching and r.prefix_id is not None and r.prefix_tokens >= B:
                chain = chains.get(r.prefix_id)
                if chain is None:
                    chain = chains[r.prefix_id] = PrefixChain(r.prefix_tokens // B)
            yield SimRequest(i, r.arrival_s, r.prompt_tokens, r.output_tokens, chain)

    def _pull(self) -> None:
        """Queue the next arrived request (``next_arrival <= now``) behind the waiting ones.

        Arrived requests are queued one at a time, when the queue runs empty: fresh arrivals
        are admitted first-come first-served behind any preempted request, so the queue's order
        is the same, but an overloaded replay (a million requests at t = 0) holds one waiting
        :class:`SimRequest` instead of a million."""
        r = self.nxt
        assert r is not None and r.arrival <= self.now
        self.waiting.append(r)
        self.nxt = r = next(self.incoming, None)
        self.next_arrival = math.inf if r is None else r.arrival
        self.pulled += 1
        if PROGRESS is not None and not self.pulled & 4095:
            PROGRESS(self.pulled)

    def _sent_late(self, inner: Iterator[SimRequest]) -> Iterator[SimRequest]:
        """``inner``'s requests, each reaching the scheduler ``late`` seconds after it is sent
        (its ``arrival`` is then the scheduler's; TTFT and E2E add ``late`` back)."""
        base, per, e2e = self.late, self.late_per_stream, self.e2e
        most = self.closed - 1 if self.closed else math.inf
        # the API server's turn: an open loop only (a closed loop sends one request a
        # completion; charged at admission, the tokens of C requests sent at once would
        # stagger them however idle the server is)
        tok = self.api_tok and not self.closed
        for r in inner:
            # the others sent and not finished: as many as there are when it is pulled (a
            # closed loop's request is sent when C - 1 others are in flight)
            late = base + per * min(most, self.sent - len(e2e)) if per else base
            self.sent += 1
            r.late = late
            r.arrival += late
            if tok:
                self._api_wait(r)
            yield r

    def run(self) -> None:
        late = bool(self.late or self.late_per_stream or (self.api_tok and not self.closed))
        reqs = self.requests
        if (
            late
            and not self.closed
            and isinstance(reqs, RequestList)
            and (reqs.prefix is None or not self.caching)
        ):
            self.incoming = self._arrivals(late=True)  # _sent_late's work done there
        else:
            self.incoming = self._arrivals()
            if late:
                self.incoming = self._sent_late(self.incoming)
        if self.closed:
            self.incoming = self._closed_loop(self.incoming)
        self.nxt = nxt = next(self.incoming, None)
        self.next_arrival = math.inf if nxt is None else nxt.arrival
        waiting, running = self.waiting, self.running
        while True:  # (methods called as such: a bound method in a local is slow compiled)
            now = self.now
            if not waiting and self.next_arrival <= now:
                self._pull()
            if not running and not self.zombies:
                if not waiting:
                    self._point(now, self.capacity - self.free)
                    if self.nxt is None:
                        return
                    assert self.next_arrival < math.inf, "a closed loop waits on nothing"
                    self.now = self.next_arrival  # idle until the next request
                    continue
            elif (
                running
                and self.partial is None
                and (not waiting or not self._admissible())
                and self._stretch()
            ):
                continue
            self._single_step()

    # ------------------------------------------------------------------ data-parallel rank
    def feed(self, r: SimRequest) -> None:
        """Queue ``r``, dispatched to this rank when it arrived (``planner.simulate.cluster``);
        an idle rank waits for it, as :meth:`run` waits for the next arrival."""
        if not self.running and not self.zombies and not self.waiting and self.now < r.arrival:
            self._point(self.now, self.capacity - self.free)
            self.now = r.arrival
        self.waiting.append(r)

    def advance(self, horizon: float) -> None:
        """Run this rank's steps that start before ``horizon``, the next request's arrival
        anywhere in the cluster (a decode stretch stops at the first step starting at or
        after it, as at an arrival of its own), or until it is idle. :meth:`run`'s loop, for
        a rank whose requests a dispatcher feeds."""
        self.next_arrival = horizon
        waiting, running = self.waiting, self.running
        while self.now < horizon:
            if not running and not self.zombies:
                if not waiting:
                    return
            elif (
                running
                and self.partial is None
                and (not waiting or not self._admissible())
                and self._stretch()
            ):
                continue
            self._single_step()

    def drain(self) -> None:
        """Run to the end (no more requests come), recording the pool at the end as
        :meth:`run` does."""
        self.advance(math.inf)
        self._point(self.now, self.capacity - self.free)

    def itl_cells(self) -> dict[int, list[float]]:
        """The inter-token latency histogram as :class:`BenchFigures` takes it: bin ->
        ``[tokens, their seconds]``."""
        return {b: [c.tokens, c.seconds] for b, c in self.itl_hist.items()}

    def result(self, workload: Workload) -> SimResult:
        duration = self.now

        def usage_at(q: float) -> float:
            return usage_quantile(self.usage_time, q)

        return SimResult(
            num_gpu_blocks=self.cfg.num_gpu_blocks,
            usable_blocks=self.capacity,
            block_size=self.B,
            requests=len(workload.requests),
            completed=len(self.e2e),  # one end-to-end latency per finished request
            rejected_too_long=self.rejected,
            preemptions=self.preemptions,
            preempted_requests=self.preempted,
            recomputed_tokens=self.recomputed,
            steps=self.step,
            duration_s=duration,
            peak_blocks=self.peak,
            usage_p50=usage_at(0.5),
            usage_p90=usage_at(0.9),
            usage_max=self.peak / self.capacity,
            mean_concurrency=self.conc_time / duration if duration else 0.0,
            max_concurrency=self.max_conc,
            prompt_tokens=self.prompt_done,
            output_tokens=self.output_done,
            output_tokens_per_s=self.output_done / duration if duration else 0.0,
            total_tokens_per_s=(self.prompt_done + self.output_done) / duration
            if duration
            else 0.0,
            ttft_s=Percentiles.of_array(self.ttft),
            tpot_s=Percentiles.of_array(self.tpot),
            e2e_s=Percentiles.of_array(self.e2e),
            fragmentation=self.unused_slots / self.alloc_slots if self.alloc_slots else 0.0,
            prefix_query_tokens=self.query_tokens,
            prefix_hit_tokens=self.hit_tokens,
            prefix_hit_rate=self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
            prefix_blocks_saved=self.blocks_saved,
            timeline=_downsample(self.tl_time, self.tl_used, self.capacity),
            finish_steps=self.finish_steps,
            allocated_blocks=self.allocated,
            freed_blocks=self.freed,
            max_used_blocks_seen=_max_of(self.tl_used),
            cpu_blocks=self.cfg.cpu_blocks if self.caching else 0,
            cpu_hit_tokens=self.cpu_hit_tokens,
            bench=BenchFigures.of(
                duration=duration,
                prompt_tokens=self.prompt_done,
                output_tokens=self.output_done,
                ttft=self.ttft,
                tpot=self.tpot,
                e2e=self.e2e,
                itl_hist=self.itl_cells(),
                itl_sum=self.itl_sum,
            ),
        )


class _TierEngine(SimEngine):
    """The engine with vLLM's native CPU KV tier (``OffloadingConnector``, the default chunk
    of one block, LRU policy): a second, LRU cache of full token blocks that only extends
    the prefix cache; the GPU pool and the scheduler are unchanged.

    - **Write-through.** Every full block a request computed is written to the CPU tier
      (vLLM stores them as they are computed; here when the request releases its blocks, on
      finish or preemption: a block can only be missing on the GPU after its holder released
      it). A block already there is only refreshed. The blocks of one request are ordered as
      vLLM's LRU policy commits them at its finish: its tail least recent, its head most.
    - **LRU eviction.** When the tier is full, its least recently stored blocks go, a chain's
      tail before its head.
    - **Hits.** An admission whose GPU lookup stops inside its shared prefix goes on looking
      up the prefix's blocks in the CPU tier; those found are loaded into newly allocated GPU
      blocks (taken like new ones, evicting from the free queue) and count as computed and as
      cached on the GPU from then on.
    - **Approximated.** A load is free: no PCIe time and no extra step (vLLM loads
      asynchronously; the request waits in WAITING_FOR_REMOTE_KVS at least one step). A
      preempted request's own (unshared) blocks are written through but never loaded back
      (a resume finds them on the GPU or recomputes them), and a prefix completed from the CPU
      tier is not followed into such blocks.
    """

    def __init__(self, workload: Workload, config: SimConfig) -> None:
        super().__init__(workload, config)
        self.cpu_cap = config.cpu_blocks
        self.cpu_used = 0
        # the tier's blocks, least recently stored first, as [count, chain] runs (count 0:
        # stale, skipped when reached)
        self.cpu_q: deque[list[Any]] = deque()
        self.cpu_own: dict[int, PrefixChain] = {}  # a preempted request's own blocks there
        self.cpu_pending = 0  # token blocks of the last _hits found in the tier
        self.plain_finish = False  # its _finish writes through
        self.zombie_finish = False  # and its _release

    def _cpu_evict(self, k: int) -> None:
        q = self.cpu_q
        self.cpu_used -= k
        while k:
            seg = q[0]
            c = seg[0]
            if c <= k:
                q.popleft()
                k -= c
                if c:
                    chain = seg[1]
                    chain.cpu -= c
                    assert chain.cpu_segs[0] is seg
                    del chain.cpu_segs[0]
            else:
                seg[0] = c - k
                seg[1].cpu -= k
                k = 0

    def _cpu_store(self, chain: PrefixChain, n: int) -> None:
        """Write (or refresh) the ``n`` leading token blocks of ``chain``, tail first."""
        n = min(n, self.cpu_cap)
        if n <= 0:
            return
        if not hasattr(chain, "cpu"):
            chain.cpu = 0
            chain.cpu_segs = []
        segs = chain.cpu_segs
        if n >= chain.cpu:  # all its blocks become the most recent
            for seg in segs:
                seg[0] = 0
            self.cpu_used -= chain.cpu
            chain.cpu = 0
            chain.cpu_segs = segs = []
            over = self.cpu_used + n - self.cpu_cap
            if over > 0:
                self._cpu_evict(over)
            chain.cpu = n
            self.cpu_used += n
        else:  # its n leading blocks, in its newest runs, move to the end
            k = n
            while k:
                seg = segs[-1]
                if seg[0] <= k:
                    k -= seg[0]
                    seg[0] = 0
                    segs.pop()
                else:
                    seg[0] -= k
                    k = 0
        seg = [n, chain]
        segs.append(seg)
        self.cpu_q.append(seg)

    def _cpu_release(self, r: SimRequest, tokens: int, preempted: bool) -> None:
        """Write through the full blocks ``r`` computed, as it releases them."""
        held = r.held
        own = tokens // self.B - held
        oc = self.cpu_own.pop(r.index, None)
        if own > 0 or oc is not None:
            if oc is None:
                oc = PrefixChain(0)
            if preempted:
                self.cpu_own[r.index] = oc
            self._cpu_store(oc, own)
        if held:
            assert r.chain is not None
            self._cpu_store(r.chain, held)

    def _finish(self, r: SimRequest, tokens: int) -> None:
        if not self.asyn:  # else when the zombie is released (_release)
            self._cpu_release(r, tokens, False)
        super()._finish(r, tokens)

    def _release(self, r: SimRequest, tokens: int, preempted: bool) -> None:
        if preempted or self.asyn:
            self._cpu_release(r, tokens, preempted)
        super()._release(r, tokens, preempted)

    def _hits(self, r: SimRequest) -> tuple[int, int, int]:
        shared, own, touch = super()._hits(r)
        chain = r.chain
        self.cpu_pending = c = 0
        if chain is not None and shared < chain.m and getattr(chain, "cpu", 0) > shared:
            self.cpu_pending = c = chain.cpu - shared
            shared += c
            touch += c * self.fg
        return shared, own, touch

    def _touch(self, r: SimRequest, shared: int, own: int, touch: int) -> None:
        c = self.cpu_pending
        gpu = touch - c * self.fg
        if gpu:
            super()._touch(r, shared - c, own, gpu)
        if c:  # loaded into new blocks, taken from the head of the free queue
            self._take(c * self.fg)
            self.cpu_hit_tokens += c * self.B
            self.blocks_saved -= c * self.fg


def make_engine(workload: Workload, config: SimConfig) -> SimEngine:
    """The engine for ``config``: with a CPU tier when it has one and caches prefixes."""
    if config.cpu_blocks > 0 and config.prefix_caching and config.layout.full_groups > 0:
        return _TierEngine(workload, config)
    return SimEngine(workload, config)


def usage_quantile(usage_time: Sequence[float], q: float) -> float:
    """The upper edge of the 1/USAGE_BINS usage bin below which the pool spent ``q`` of the
    time (``SimResult.usage_p50``)."""
    total_t = sum(usage_time)
    if total_t <= 0:
        return 0.0
    acc = 0.0
    for b, t in enumerate(usage_time):
        acc += t
        if acc >= q * total_t - 1e-12:
            return min(1.0, (b + 1) / USAGE_BINS)
    return 1.0


def _max_of(values: array[int]) -> int:
    """``max(values, default=0)``, by numpy where it is installed and ``values`` long (a
    million-request replay records millions of points)."""
    np = numpy_module() if len(values) > SORT_RUN else None
    if np is None:
        return max(values, default=0)
    return int(np.frombuffer(values, dtype=np.int64).max())


def _downsample(
    times: Sequence[float], useds: Sequence[int], capacity: int
) -> list[tuple[float, float]]:
    """At most TIMELINE_POINTS (time, usage fraction) points, keeping each bucket's peak.

    ``times`` never fall (the clock only moves forward), so a bucket's points are one run of
    them: its end is found by bisection and its peak by ``max`` over the run, not a Python
    step per point (a million-request replay records millions). ``max(used) / capacity`` is
    the largest ``used / capacity`` (dividing by a positive number keeps the order)."""
    if not times:
        return []
    end = times[-1] or 1.0

    def bucket(t: float) -> int:
        return min(TIMELINE_POINTS - 1, int(t / end * TIMELINE_POINTS))

    out = []
    last = len(times) - 1  # every point but the last
    np = numpy_module() if isinstance(useds, array) and len(useds) > SORT_RUN else None
    view = None if np is None else np.frombuffer(useds, dtype=np.int64)  # the same ints
    i = 0
    while i < last:
        b = bucket(times[i])
        j = bisect_right(times, b, i, last, key=bucket)
        u = (max(useds[i:j]) if view is None else int(view[i:j].max())) / capacity
        out.append((round((b + 1) * end / TIMELINE_POINTS, 6), round(u, 6)))
        i = j
    return out + [(round(end, 6), round(useds[-1] / capacity, 6))]  # the pool at the end
