"""The figures of one scrape or a series of them, per DP rank (:class:`RankMetrics`): gauges at
each scrape, counters and histograms over the window (the last scrape less the first, or since
a restart), quantiles as Prometheus' histogram_quantile computes them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.diagnose.findings import Finding
from planner.diagnose.metrics.read import (
    MAX_VALUE,
    Scrape,
)

if TYPE_CHECKING:
    pass
from planner.diagnose.metrics.names import (
    CACHE_CONFIG,
    FINISHED,
    HISTOGRAMS,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HIT_RATE,
    PREFIX_HITS,
    PREFIX_QUERIES,
    RUNNING,
    WAITING,
)


@dataclass
class SeriesView:
    """One engine's figures in one scrape: values by sample name (summed over labels other
    than the engine's), histogram buckets by name ({upper bound: cumulative count})."""

    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)


def views_of(scrape: Scrape) -> tuple[dict[str, SeriesView], dict[str, dict[str, str]], set[str]]:
    """Each engine's view, the cache_config_info labels by engine ("" for all), and the
    model names the samples carry."""
    views: dict[str, SeriesView] = {}
    info: dict[str, dict[str, str]] = {}
    models: set[str] = set()
    for name, labels, value in scrape.samples:
        if not name.startswith("vllm:"):
            continue
        engine = labels.get("engine", "")
        if name == CACHE_CONFIG:
            info[engine] = labels
            continue
        if "model_name" in labels:
            models.add(labels["model_name"])
        if not abs(value) <= MAX_VALUE:  # NaN, infinite or absurd: not a figure
            continue
        view = views.setdefault(engine or "0", SeriesView())
        if name.endswith("_bucket") and "le" in labels:
            try:
                bound = float(labels["le"])
            except ValueError:
                continue
            hist = view.buckets.setdefault(name[: -len("_bucket")], {})
            hist[bound] = hist.get(bound, 0.0) + value
        else:
            view.values[name] = view.values.get(name, 0.0) + value
    return views, info, models


def first_value(values: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    return next((values[n] for n in names if n in values), None)


@dataclass(frozen=True)
class Quantiles:
    """A histogram's observations over the window: count, mean (sum / count), and p50, p90,
    p99 as Prometheus' ``histogram_quantile`` interpolates them; ``capped``: p99 lies in the
    ``+Inf`` bucket, so it is the largest finite bound, a floor."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    capped: bool


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> tuple[float | None, bool]:
    """``q`` of cumulative ``buckets`` ({upper bound: count}) as Prometheus interpolates it:
    linearly within the bucket the rank falls in, from 0 for the first; in the ``+Inf`` bucket,
    the largest finite bound (and True: a floor)."""
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return None, False
    total = buckets[math.inf]
    if total <= 0:
        return None, False
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                finite = [b for b in bounds if b != math.inf]
                return (finite[-1] if finite else None), True
            if count == below:
                return bound, False
            return lower + (bound - lower) * (rank - below) / (count - below), False
        lower, below = bound, count
    return None, False


def quantiles_of(buckets: Mapping[float, float], total_sum: float | None) -> Quantiles | None:
    if math.inf not in buckets or buckets[math.inf] <= 0:
        return None
    count = buckets[math.inf]
    p50, _ = histogram_quantile(0.5, buckets)
    p90, _ = histogram_quantile(0.9, buckets)
    p99, capped = histogram_quantile(0.99, buckets)
    mean = total_sum / count if total_sum is not None and count else None
    return Quantiles(round(count), mean, p50, p90, p99, capped)


def percentile(values: list[float], q: float) -> float:
    """``q`` of ``values``, interpolated linearly between the sorted values (position
    ``q x (n - 1)``, as numpy's default)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class RankMetrics:
    """One DP rank's (vLLM's ``engine`` label) figures over the scrapes, or the cluster's
    (``engine`` "all": usage averaged over the ranks, weighted by their blocks when known;
    counts summed).

    Attributes:
        engine: the ``engine`` label ("0" where there is none: V0), or "all".
        scrapes: how many scrapes had this engine's KV usage.
        kv_usage_p50_pct, kv_usage_p90_pct, kv_usage_max_pct: the KV usage gauge, in %.
        running_max, waiting_max: the most requests running / waiting in one scrape.
        waiting_scrapes: scrapes with requests waiting.
        preemptions: over the window (since the start for one scrape); None: not exported.
        preemptions_per_s: over the window's seconds (None without two timed scrapes).
        preemptions_per_1k_requests: per 1,000 finished requests in the window.
        requests_finished: ``vllm:request_success_total`` over the window.
        prefix_hit_pct: prefix-cache hits over queries in the window (V0: its gauge's mean).
        ttft, tpot, e2e, queue: seconds (:class:`Quantiles`); prompt, output: tokens.
        prompt_buckets, output_buckets: the length histograms over the window, cumulative
            ({upper bound: count}), what ``--save-workload`` turns into a workload.
        num_gpu_blocks: from ``vllm:cache_config_info`` (the sum, for the cluster).
        max_num_seqs: the limit the waiting findings compare with, and where it comes from
            (``max_num_seqs_source``: "command line", "plan" (vLLM's default on the GPU, as
            the plan resolves it), "observed" (running never went past it while requests
            waited), or None).
        findings: this rank's (:class:`~planner.diagnose.Finding`).
    """

    engine: str
    scrapes: int
    kv_usage_p50_pct: float | None
    kv_usage_p90_pct: float | None
    kv_usage_max_pct: float | None
    running_max: int | None
    waiting_max: int | None
    waiting_scrapes: int
    preemptions: int | None
    preemptions_per_s: float | None
    preemptions_per_1k_requests: float | None
    requests_finished: int | None
    prefix_hit_pct: float | None
    ttft: Quantiles | None
    tpot: Quantiles | None
    e2e: Quantiles | None
    queue: Quantiles | None
    prompt: Quantiles | None
    output: Quantiles | None
    prompt_buckets: dict[float, float]
    output_buckets: dict[float, float]
    num_gpu_blocks: int | None
    max_num_seqs: int | None
    max_num_seqs_source: str | None
    window_s: float | None
    findings: list[Finding]


def counter_window(
    series: list[tuple[float | None, SeriesView | None]], names: tuple[str, ...]
) -> tuple[float | None, float | None]:
    """A counter's increase over the scrapes, from the last restart (a fall) on, and the
    seconds it spans (None when not timed)."""
    points = [(t, first_value(v.values, names)) for t, v in series if v is not None]
    points = [(t, x) for t, x in points if x is not None]
    if not points:
        return None, None
    start = 0
    for i in range(1, len(points)):
        if points[i][1] < points[i - 1][1]:  # type: ignore[operator]
            start = i
    first_t, first_x = points[start]
    last_t, last_x = points[-1]
    assert first_x is not None and last_x is not None
    if len(points) - start == 1:
        return last_x, None  # one scrape (or one since a restart): since the server started
    span = last_t - first_t if first_t is not None and last_t is not None else None
    return last_x - first_x, span if span and span > 0 else None


def histogram_window(
    series: list[tuple[float | None, SeriesView | None]], names: tuple[str, ...]
) -> tuple[dict[float, float], float | None]:
    """A histogram's buckets and sum over the window (last less first; the last alone for
    one scrape, or when its count fell: a restart)."""
    name = next(
        (n for n in names if any(v is not None and n in v.buckets for _, v in series)), None
    )
    if name is None:
        return {}, None
    views = [v for _, v in series if v is not None and name in v.buckets]
    last = views[-1]
    buckets = dict(last.buckets[name])
    total = last.values.get(name + "_sum")
    first = views[0]
    if len(views) > 1 and math.inf in first.buckets[name] and math.inf in buckets:
        before = first.buckets[name]
        if all(buckets.get(b, 0.0) >= before.get(b, 0.0) for b in before):
            buckets = {b: buckets[b] - before.get(b, 0.0) for b in buckets}
            first_sum = first.values.get(name + "_sum")
            total = total - first_sum if total is not None and first_sum is not None else None
    return buckets, total


def rank_metrics(
    engine: str,
    series: list[tuple[float | None, SeriesView | None]],
    blocks: int | None,
    max_num_seqs: tuple[int | None, str | None],
) -> dict[str, Any]:
    """One engine's figures (the :class:`RankMetrics` fields but findings)."""
    kv = [
        (x * 100, v)
        for _, v in series
        if v is not None and (x := first_value(v.values, KV_USAGE)) is not None
    ]
    usage = [u for u, _ in kv]
    running = [
        r for _, v in series if v is not None and (r := first_value(v.values, RUNNING)) is not None
    ]
    waiting = [
        w for _, v in series if v is not None and (w := first_value(v.values, WAITING)) is not None
    ]
    pre, span = counter_window(series, PREEMPTIONS)
    finished, _ = counter_window(series, FINISHED)
    queries, _ = counter_window(series, PREFIX_QUERIES)
    hits, _ = counter_window(series, PREFIX_HITS)
    rate = [
        x * 100
        for _, v in series
        if v is not None and (x := first_value(v.values, PREFIX_HIT_RATE)) is not None and x >= 0
    ]
    if queries and hits is not None:
        hit_pct: float | None = 100 * hits / queries
    else:
        hit_pct = sum(rate) / len(rate) if rate else None
    hists = {key: histogram_window(series, names) for key, names in HISTOGRAMS.items()}
    times = [t for t, v in series if t is not None and v is not None]
    window = times[-1] - times[0] if len(times) > 1 else None
    return {
        "engine": engine,
        "scrapes": len(usage),
        "kv_usage_p50_pct": round(percentile(usage, 0.5), 2) if usage else None,
        "kv_usage_p90_pct": round(percentile(usage, 0.9), 2) if usage else None,
        "kv_usage_max_pct": round(max(usage), 2) if usage else None,
        "running_max": round(max(running)) if running else None,
        "waiting_max": round(max(waiting)) if waiting else None,
        "waiting_scrapes": sum(w > 0 for w in waiting),
        "preemptions": round(pre) if pre is not None else None,
        "preemptions_per_s": round(pre / span, 4) if pre is not None and span else None,
        "preemptions_per_1k_requests": round(1000 * pre / finished, 2)
        if pre is not None and finished
        else None,
        "requests_finished": round(finished) if finished is not None else None,
        "prefix_hit_pct": round(hit_pct, 2) if hit_pct is not None else None,
        **{key: quantiles_of(*hists[key]) for key in HISTOGRAMS},
        "prompt_buckets": hists["prompt"][0],
        "output_buckets": hists["output"][0],
        "num_gpu_blocks": blocks,
        "max_num_seqs": max_num_seqs[0],
        "max_num_seqs_source": max_num_seqs[1],
        "window_s": round(window, 3) if window else None,
        "_series": series,
    }


def cluster_series(
    per_engine: dict[str, list[tuple[float | None, SeriesView | None]]], blocks: dict[str, int]
) -> list[tuple[float | None, SeriesView | None]]:
    """The ranks as one: counts and buckets summed per scrape, KV usage averaged (weighted by
    each rank's blocks when all are known)."""
    engines = sorted(per_engine, key=engine_key)
    n = max(len(s) for s in per_engine.values())
    out: list[tuple[float | None, SeriesView | None]] = []
    for i in range(n):
        views = [(e, per_engine[e][i][1]) for e in engines if i < len(per_engine[e])]
        when = next((per_engine[e][i][0] for e in engines if i < len(per_engine[e])), None)
        present = [(e, v) for e, v in views if v is not None]
        if not present:
            out.append((when, None))
            continue
        merged = SeriesView()
        for _, v in present:
            for name, value in v.values.items():
                merged.values[name] = merged.values.get(name, 0.0) + value
            for name, hist in v.buckets.items():
                into = merged.buckets.setdefault(name, {})
                for b, c in hist.items():
                    into[b] = into.get(b, 0.0) + c
        usage = [(e, first_value(v.values, KV_USAGE)) for e, v in present]
        known = [(e, u) for e, u in usage if u is not None]
        for name in KV_USAGE:
            merged.values.pop(name, None)
        if known:
            if all(e in blocks for e, _ in known):
                value = sum(u * blocks[e] for e, u in known) / sum(blocks[e] for e, _ in known)
            else:
                value = sum(u for _, u in known) / len(known)
            merged.values[KV_USAGE[0]] = value
        for name in PREFIX_HIT_RATE:  # a V0 rate does not add up
            rates = [v.values[name] for _, v in present if name in v.values]
            if rates:
                merged.values[name] = sum(rates) / len(rates)
        out.append((when, merged))
    return out


def engine_key(engine: str) -> tuple[int, str]:
    return (int(engine), "") if engine.isdigit() else (1 << 30, engine)
