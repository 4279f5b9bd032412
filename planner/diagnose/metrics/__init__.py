"""``kvplan diagnose --metrics``: a running vLLM server's Prometheus metrics, read as the log
diagnosis reads its stat lines, with the same findings (:class:`~planner.diagnose.Finding`).

Sources (:func:`read_metrics`):

* a Prometheus text exposition: one scrape of ``/metrics``, from a file or an ``http(s)://``
  URL (read with a timeout and a size bound, never following a redirect);
* a series of scrapes: a directory of such files (one scrape each, in name order, timed by
  the time marker or sample timestamps they hold, else their modification time), or one file
  of scrapes concatenated, each after a comment line holding only its time (``# 1764632400``
  or ``# 2026-12-01T23:40:00+00:00``: what ``echo "# $(date -Is)"; curl -s URL`` writes), or
  with Prometheus sample timestamps;
* a Prometheus range-query JSON export (``/api/v1/query_range``'s ``{"status": "success",
  "data": {"resultType": "matrix", ...}}``, or a list of them, one per query).

The text format is parsed by ``prometheus_client``'s parser (the ``metrics`` extra), not here.

The metric names are vLLM's, per release (checked in the released wheels):

* V0 ``vllm/engine/metrics.py`` (0.6.3 lines 49-136): ``vllm:gpu_cache_usage_perc``,
  ``vllm:num_requests_running`` / ``_waiting``, ``vllm:num_preemptions_total``,
  ``vllm:gpu_prefix_cache_hit_rate`` (a gauge), the ``vllm:time_to_first_token_seconds``,
  ``vllm:time_per_output_token_seconds``, ``vllm:e2e_request_latency_seconds``,
  ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens`` histograms, labelled
  by ``model_name`` only; ``vllm:cache_config_info`` (line 543) has the CacheConfig's fields
  as labels.
* V1 ``vllm/v1/metrics/loggers.py`` 0.8.5 (lines 156-320): the same, labelled ``model_name``
  and ``engine`` (the DP rank), with prefix-cache counters ``vllm:gpu_prefix_cache_queries``
  and ``_hits`` instead of the hit-rate gauge;
* 0.10.1 (lines 189-431) adds ``vllm:kv_cache_usage_perc``, ``vllm:prefix_cache_queries`` and
  ``_hits`` (the ``gpu_`` names deprecated, still exported), and ``vllm:num_preemptions``
  (exposed, as every counter is, with ``_total``); 0.11.0 (lines 190-466) exports the
  ``gpu_`` names only with ``--show-hidden-metrics-for-version`` and adds
  ``vllm:inter_token_latency_seconds`` beside the deprecated ``time_per_output_token``.

Gauges are read at every scrape; counters and histograms are cumulative, so over a series the
window is the last scrape less the first (a counter that fell means the server restarted:
the scrapes since are used), and a single scrape covers the time since the server started.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.deployment import as_flags, fp8_kv_caveat
from planner.diagnose.diagnosis import Term, plan_for, verdict_of
from planner.diagnose.findings import (
    FP8_KV,
    LOW_PCT,
    MIN_SAMPLES,
    PINNED_PCT,
    PREFIX_CACHING_ON,
    Finding,
    as_named,
    explain,
    lower_gmu,
    runnable,
)
from planner.diagnose.log_figures import BootLog
from planner.diagnose.metrics.names import KV_USAGE, RUNNING, V0_ONLY, WAITING
from planner.diagnose.metrics.read import (
    NoVllmMetricsError,
    Scrape,
    fetch_url,
    parse_text,
    read_metrics,
)
from planner.diagnose.metrics.series import (
    Quantiles,
    RankMetrics,
    SeriesView,
    cluster_series,
    engine_key,
    first_value,
    rank_metrics,
    views_of,
)
from planner.diagnose.settings import layer_settings
from planner.recommend import worst_case_seqs

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.gpus import Gpu
    from planner.plan_types import Plan

TARGET_LOW_PCT, TARGET_HIGH_PCT = 80.0, 90.0  # the field guide's KV usage target
LOW_HIT_PCT = 10.0  # prefix-cache hit rate below which requests share little

# cache_config_info label -> the boot-log spelling diagnose's settings read
_CACHE_LABELS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "cache_dtype": "kv_cache_dtype",
    "block_size": "block_size",
    "enable_prefix_caching": "enable_prefix_caching",
}


# --------------------------------------------------------------------------- reading


# --------------------------------------------------------------------------- per engine


@dataclass(frozen=True)
class MetricsDiagnosis:
    """``kvplan diagnose --metrics``: the server's figures, per DP rank and for the cluster,
    the findings, and, given a GPU, the plan's pool against the server's.

    Attributes:
        source: the file, directory or URL as given.
        kind: "scrape", "series" or "range-json".
        scrapes: how many scrapes were read; window_s: seconds from the first to the last
            (None when untimed or one).
        names: which generation of vLLM's names the scrape uses: "kv_cache_usage_perc" (0.9
            and later), "gpu_cache_usage_perc" (V1 before), or "v0".
        model: the ``model_name`` label (the served name, which may be an alias).
        cache_config: ``vllm:cache_config_info``'s labels (the first engine's).
        settings, sources: what a plan used, as :class:`~planner.diagnose.Diagnosis` has
            them (sources "cache_config_info", "command line", "vLLM V1 default").
        outcome, worst_case_running, max_num_seqs, max_model_len, outcome_reason: the plan's
            verdict, as ``kvplan estimate`` words it (None without a plan).
        terms: the scrape's pool beside the plan's (GPU blocks, KV cache tokens).
        findings: the pool check, prefix caching off, then the cluster's findings.
        ranks: per DP rank; cluster: the ranks together.
        notes: what kvplan could not use and why.
    """

    source: str
    kind: str
    scrapes: int
    window_s: float | None
    names: str
    model: str | None
    cache_config: dict[str, str]
    settings: dict[str, Any]
    sources: dict[str, str]
    outcome: str | None
    worst_case_running: int | None
    max_num_seqs: int | None
    max_model_len: int | None
    outcome_reason: str | None
    terms: list[Term]
    findings: list[Finding]
    ranks: list[RankMetrics]
    cluster: RankMetrics
    notes: list[str]


# --------------------------------------------------------------------------- findings


def _starved(r: dict[str, Any], cap_known: bool) -> dict[str, Any] | None:
    """Why requests wait, from the scrapes where some did: the pool (KV usage at 90 % or
    more, or preemptions), ``max_num_seqs`` (running at the limit), else the per-step token
    budget (``max_num_batched_tokens``)."""
    series = r["_series"]
    points = []
    for _, v in series:
        if v is None:
            continue
        w, run, kv = (first_value(v.values, names) for names in (WAITING, RUNNING, KV_USAGE))
        if w is not None and w > 0:
            points.append((w, run, kv * 100 if kv is not None else None))
    if not points:
        return None
    kv_waiting = [kv for _, _, kv in points if kv is not None]
    running = [run for _, run, _ in points if run is not None]
    kv_max = max(kv_waiting) if kv_waiting else None
    run_max = round(max(running)) if running else None
    cap = r["max_num_seqs"]
    cause = "token_budget"
    if (kv_max is not None and kv_max >= TARGET_HIGH_PCT) or (r["preemptions"] or 0) > 0:
        cause = "kv_pool"
    elif cap is not None and run_max is not None and run_max >= cap:
        cause = "max_num_seqs"
    elif not cap_known and run_max is not None and len(running) >= 2:
        plateau = sum(round(x) == run_max for x in running)
        if plateau >= 2 and run_max == r["running_max"]:
            cause, cap = "max_num_seqs", run_max
            r["max_num_seqs"], r["max_num_seqs_source"] = run_max, "observed"
    return {
        "cause": cause,
        "waiting_scrapes": len(points),
        "scrapes": r["scrapes"] or len(series),
        "waiting_max": round(max(w for w, _, _ in points)),
        "running_max_while_waiting": run_max,
        "kv_usage_max_pct_while_waiting": round(kv_max, 2) if kv_max is not None else None,
        "max_num_seqs": cap,
        "max_num_seqs_source": r["max_num_seqs_source"],
    }


def rank_findings(
    r: dict[str, Any],
    p: Plan | None,
    serve: ServeSettings,
    gpu: Gpu | None,
    *,
    cap_known: bool,
    batched_tokens: int | None,
) -> list[Finding]:
    """The troubleshooting rules on one rank's (or the cluster's) figures, in the log
    diagnosis' kinds where they mean the same ("kv-pinned", "kv-low", "prefix-low-hit"), and
    "kv-usage", "starved-max-num-seqs", "starved-token-budget", "latency", "lengths"."""
    out: list[Finding] = []
    usage = r["kv_usage_p90_pct"]
    starved = _starved(r, cap_known)
    if usage is not None:
        band = (
            "above"
            if usage > TARGET_HIGH_PCT
            else "on-target"
            if usage >= TARGET_LOW_PCT
            else "below"
        )
        out.append(
            Finding(
                kind="kv-usage",
                severity="info",
                data={
                    "samples": r["scrapes"],
                    "p50_pct": r["kv_usage_p50_pct"],
                    "p90_pct": usage,
                    "max_pct": r["kv_usage_max_pct"],
                    "target_low_pct": TARGET_LOW_PCT,
                    "target_high_pct": TARGET_HIGH_PCT,
                    "band": band,
                },
            )
        )
    peak = r["kv_usage_max_pct"]
    samples = r["scrapes"]
    pre = r["preemptions"] or 0
    pinned = pre > 0 or (starved is not None and starved["cause"] == "kv_pool")
    if not pinned and usage is not None and samples >= MIN_SAMPLES:
        pinned = usage >= PINNED_PCT or (peak is not None and peak >= 99.0)
    if pinned:
        fix = []
        if p is not None and p.vllm.fits:
            fewer = {"max_num_seqs": worst_case_seqs(p.vllm)}
            fix.append(
                f"fewer sequences: {as_named(fewer)} keeps "
                f"{p.estimate.max_model_len:,}-token requests at ~90 % of the blocks"
            )
        elif pre:
            fix.append("fewer max_num_seqs (preemptions recompute requests)")
        fp8 = next((a for a in p.alternatives if a.changes == FP8_KV), None) if p else None
        fix.append(
            f"fp8 KV ({as_flags(FP8_KV)}: {fp8.max_concurrency:.2f}x concurrency)"
            if fp8
            else f"fp8 KV ({as_flags(FP8_KV)})"
        )
        fix += [
            "more KV memory: a higher gpu_memory_utilization, or more TP",
            "prefix sharing: enable prefix caching and put the shared part of prompts first",
        ]
        out.append(
            Finding(
                kind="kv-pinned",
                severity="warning",
                data={
                    "samples": samples,
                    "p90_pct": usage,
                    "peak_pct": peak,
                    "preemptions": r["preemptions"],
                    "preemptions_per_s": r["preemptions_per_s"],
                    "preemptions_per_1k_requests": r["preemptions_per_1k_requests"],
                    "max_waiting": r["waiting_max"] or 0,
                },
                fix=fix,
                caveats=[fp8_kv_caveat(gpu)],
            )
        )
    elif peak is not None and samples >= MIN_SAMPLES and peak < LOW_PCT and not starved:
        gmu = lower_gmu(BootLog(), p, serve, peak)
        out.append(
            Finding(
                kind="kv-low",
                severity="info",
                data={"samples": samples, "peak_pct": peak, "suggested_gmu": gmu},
                fix=[
                    as_named({"gpu_memory_utilization": gmu})
                    if gmu
                    else "a lower gpu_memory_utilization"
                ],
            )
        )
    if starved is not None and starved["cause"] == "max_num_seqs":
        cap = starved["max_num_seqs"]
        kv = starved["kv_usage_max_pct_while_waiting"]
        # KV usage grows about in step with running requests: aim the peak at 90 %
        more = max(cap + 1, math.floor(cap * TARGET_HIGH_PCT / kv)) if kv else 2 * cap
        starved["suggested_max_num_seqs"] = more
        out.append(
            Finding(
                kind="starved-max-num-seqs",
                severity="warning",
                data=starved,
                fix=[
                    f"{as_named({'max_num_seqs': more})} (KV at {kv or 0:.1f} % with "
                    f"{cap:,} running: about {TARGET_HIGH_PCT:.0f} % at {more:,})",
                ],
            )
        )
    elif starved is not None and starved["cause"] == "token_budget":
        starved["max_num_batched_tokens"] = batched_tokens
        fix = (
            [
                f"a larger max_num_batched_tokens than {batched_tokens:,}, e.g. "
                f"{as_named({'max_num_batched_tokens': 2 * batched_tokens})}"
            ]
            if batched_tokens
            else ["a larger max_num_batched_tokens (the prefill tokens a step admits)"]
        )
        if not cap_known and starved["max_num_seqs"] is None:
            fix.append("or, if running sits at it, a higher max_num_seqs (pass --max-num-seqs)")
        out.append(
            Finding(
                kind="starved-token-budget",
                severity="warning" if starved["waiting_scrapes"] >= 2 else "info",
                data=starved,
                fix=fix,
            )
        )
    hit = r["prefix_hit_pct"]
    if hit is not None and hit < LOW_HIT_PCT and (r["prompt"] is None or r["prompt"].count > 0):
        out.append(
            Finding(
                kind="prefix-low-hit",
                severity="info",
                data={"mean_hit_pct": round(hit, 1), "samples": r["scrapes"]},
                fix=["put the fixed part of the prompt first so requests share whole blocks"],
            )
        )
    latency = _latency(r, starved)
    if latency is not None:
        out.append(latency)
    if r["prompt"] is not None or r["output"] is not None:
        out.append(
            Finding(
                kind="lengths",
                severity="info",
                data={
                    "prompt": _qdict(r["prompt"]),
                    "output": _qdict(r["output"]),
                },
                fix=[
                    "--save-workload FILE writes these lengths as a workload spec for "
                    "kvplan simulate -w and kvplan estimate -w"
                ],
            )
        )
    return runnable(out, gpu)  # no fix the GPU cannot run


def _qdict(q: Quantiles | None) -> dict[str, Any] | None:
    if q is None:
        return None
    return {
        "count": q.count,
        "mean": round(q.mean, 4) if q.mean is not None else None,
        "p50": round(q.p50, 4) if q.p50 is not None else None,
        "p90": round(q.p90, 4) if q.p90 is not None else None,
        "p99": round(q.p99, 4) if q.p99 is not None else None,
        "p99_capped": q.capped,
    }


def _latency(r: dict[str, Any], starved: dict[str, Any] | None) -> Finding | None:
    """TTFT, TPOT and queue time, and whether TTFT is mostly queueing."""
    ttft, tpot, queue = r["ttft"], r["tpot"], r["queue"]
    if ttft is None and tpot is None:
        return None
    fix = []
    if ttft is not None and queue is not None and ttft.p50 and queue.p50 is not None:
        if queue.p50 >= 0.5 * ttft.p50:
            fix.append(
                f"TTFT is mostly queueing (queue p50 {queue.p50:.3g} s of TTFT p50 "
                f"{ttft.p50:.3g} s): admit more requests at once (the waiting finding's change)"
                if starved
                else f"TTFT is mostly queueing (queue p50 {queue.p50:.3g} s of {ttft.p50:.3g} s)"
            )
    return Finding(
        kind="latency",
        severity="info",
        data={
            "ttft_s": _qdict(ttft),
            "tpot_s": _qdict(tpot),
            "queue_s": _qdict(queue),
            "e2e_s": _qdict(r["e2e"]),
        },
        fix=fix,
    )


# --------------------------------------------------------------------------- the diagnosis


def names_of(scrapes: list[Scrape]) -> str:
    """The generation of vLLM's metric names the scrapes use."""
    names = {name for s in scrapes for name, _, _ in s.samples}
    if any(n in names for n in V0_ONLY):
        return "v0"
    if KV_USAGE[0] in names:
        return "kv_cache_usage_perc"
    if KV_USAGE[1] in names:
        return "gpu_cache_usage_perc"
    return "unknown"


def diagnose_metrics(
    source: str,
    *,
    scrapes: list[Scrape] | None = None,
    kind: str | None = None,
    model: str | None = None,
    gpu: Gpu | None = None,
    offline: bool | None = None,
    **settings_given: Any,
) -> MetricsDiagnosis:
    """Read the metrics at ``source`` (or the ``scrapes`` already read) and diagnose them.

    With a GPU (and the model: ``model`` or the scrape's ``model_name``), the plan for the
    settings ``vllm:cache_config_info`` states (gpu_memory_utilization, cache dtype, block
    size, prefix caching) under the flags given here is checked against the server's
    ``num_gpu_blocks``, and gives the defaults (``max_num_seqs``, ``max_num_batched_tokens``)
    the waiting findings compare with.
    """
    if scrapes is None:
        scrapes, kind = read_metrics(source)
    kind = kind or ("series" if len(scrapes) > 1 else "scrape")
    names = names_of(scrapes)
    parsed = [(s.time_s, *views_of(s)) for s in scrapes]
    engines = sorted({e for _, views, _, _ in parsed for e in views}, key=engine_key)
    if not engines:
        raise NoVllmMetricsError(
            f"{source}: no vLLM metric (looked for {', '.join(KV_USAGE + RUNNING + WAITING)}); "
            "is this vLLM's /metrics?"
        )
    info: dict[str, dict[str, str]] = {}
    models: set[str] = set()
    for _, _, i, m in parsed:
        info.update(i)
        models |= m
    notes: list[str] = []
    if names == "unknown":
        notes.append("no KV cache usage gauge (kv_cache_usage_perc or gpu_cache_usage_perc)")
    blocks = _blocks(info, engines)
    cache = info.get("0") or info.get("") or next(iter(info.values()), {})
    served = sorted(models)[0] if models else None
    if len(models) > 1:
        notes.append(f"several model_name labels ({', '.join(sorted(models))}); read together")
    instances = sorted(
        {labels["instance"] for s in scrapes for _, labels, _ in s.samples if "instance" in labels}
    )
    if len(instances) > 1:
        notes.append(
            f"several instances ({', '.join(instances[:4])}"
            f"{', ...' if len(instances) > 4 else ''}) read as one server; export one "
            'server\'s metrics (a query with {instance="..."}) to diagnose it alone'
        )

    log = _as_log(cache, served, names, blocks)
    # the settings given, as diagnose_file takes them (declared settings by name, typed)
    given = {"model": model, **settings_given}

    settings = layer_settings(log, given, notes)
    findings: list[Finding] = []
    the_plan = None
    if settings.model and gpu is not None:
        the_plan, settings = plan_for(log, settings, given, gpu, offline, findings, notes, True)
        notes[:] = [  # the log diagnosis' words, for a scrape
            n.replace("named in the log", "named by the model_name label").replace(
                "the settings the log states", "the settings cache_config_info states"
            )
            for n in notes
        ]
    elif gpu is None:
        notes.append(
            "no GPU: pass --gpu (and --model if model_name is an alias) to check the plan's "
            "pool against num_gpu_blocks and to know vLLM's max_num_seqs default"
        )
    stated = dict(settings.stated)
    sources = {
        k: ("cache_config_info" if v.startswith("log") else v) for k, v in settings.sources.items()
    }
    if "model" in sources and sources["model"] == "cache_config_info":
        sources["model"] = "model_name label"
    if gpu is not None:
        stated["gpu"], stated["gpu_memory_bytes"] = gpu.name, gpu.memory_bytes
        sources["gpu"] = sources["gpu_memory_bytes"] = "command line"

    cap_seqs: tuple[int | None, str | None] = (None, None)
    batched = settings_given.get("max_num_batched_tokens")
    max_num_seqs = settings_given.get("max_num_seqs")
    if max_num_seqs is not None:
        cap_seqs = (max_num_seqs, "command line")
    elif the_plan is not None:
        cap_seqs = (the_plan.vllm.max_num_seqs, "plan")
    if batched is None and the_plan is not None:
        batched = the_plan.vllm.max_num_batched_tokens
    cap_known = cap_seqs[0] is not None

    per_engine: dict[str, list[tuple[float | None, SeriesView | None]]] = {
        e: [(t, views.get(e)) for t, views, _, _ in parsed] for e in engines
    }
    ranks = []
    for e in engines:
        r = rank_metrics(e, per_engine[e], blocks.get(e), cap_seqs)
        r["findings"] = rank_findings(
            r, the_plan, settings.serve, gpu, cap_known=cap_known, batched_tokens=batched
        )
        ranks.append(_finish(r))
    total_blocks = sum(blocks.values()) if len(blocks) == len(engines) else None
    cluster_cap = (cap_seqs[0] * len(engines), cap_seqs[1]) if cap_seqs[0] is not None else cap_seqs
    c = rank_metrics("all", cluster_series(per_engine, blocks), total_blocks, cluster_cap)
    c["findings"] = (
        rank_findings(c, the_plan, settings.serve, gpu, cap_known=cap_known, batched_tokens=batched)
        if len(engines) > 1
        else ranks[0].findings
    )
    cluster = _finish(c)

    terms: list[Term] = []
    if the_plan is not None:
        findings += explain(log, the_plan)
        cap = the_plan.vllm
        label = cache.get("block_size", "")
        block = int(label) if label.isdigit() else the_plan.estimate.block_size
        server_blocks = blocks.get("0") or (min(blocks.values()) if blocks else None)
        terms = [
            Term("GPU blocks", "blocks", server_blocks, cap.num_gpu_blocks),
            Term(
                "KV cache tokens",
                "tokens",
                server_blocks * block if server_blocks is not None else None,
                cap.kv_cache_size_tokens,
            ),
        ]
    if cache.get("enable_prefix_caching") == "False":
        findings.append(
            Finding(
                kind="prefix-off",
                severity="info",
                data={},
                fix=[
                    as_flags(PREFIX_CACHING_ON),
                    "put the fixed part of the prompt (system prompt, tools) first",
                ],
            )
        )
    verdict: dict[str, Any] = {}
    if the_plan is not None:
        v = verdict_of(log, the_plan, findings, notes, what_if=False)
        verdict = {
            "outcome": v.outcome,
            "worst_case_running": v.running,
            "max_num_seqs": v.max_num_seqs,
            "max_model_len": v.max_model_len,
            "outcome_reason": v.reason,
        }
    times = [s.time_s for s in scrapes if s.time_s is not None]
    window = times[-1] - times[0] if len(times) > 1 and times[-1] > times[0] else None
    if kind != "scrape" and window is None:
        notes.append("the scrapes carry no times: rates per second are left out")
    return MetricsDiagnosis(
        source=source,
        kind=kind,
        scrapes=len(scrapes),
        window_s=round(window, 3) if window else None,
        names=names,
        model=served,
        cache_config=dict(cache),
        settings=stated,
        sources=sources,
        outcome=verdict.get("outcome"),
        worst_case_running=verdict.get("worst_case_running"),
        max_num_seqs=verdict.get("max_num_seqs"),
        max_model_len=verdict.get("max_model_len"),
        outcome_reason=verdict.get("outcome_reason"),
        terms=terms,
        findings=findings,
        ranks=ranks,
        cluster=cluster,
        notes=notes,
    )


def _finish(r: dict[str, Any]) -> RankMetrics:
    r = dict(r)
    del r["_series"]
    return RankMetrics(**r)


def _blocks(info: Mapping[str, Mapping[str, str]], engines: list[str]) -> dict[str, int]:
    """num_gpu_blocks per engine from cache_config_info (one without an engine label, as
    vLLM before 0.10 exports it, is every engine's)."""
    out: dict[str, int] = {}
    for e in engines:
        labels = info.get(e) or info.get("")
        text = (labels or {}).get("num_gpu_blocks", "")
        if text.isdigit() and int(text) > 0:
            out[e] = int(text)
    return out


def _as_log(
    cache: Mapping[str, str], model: str | None, names: str, blocks: Mapping[str, int]
) -> BootLog:
    """What the scrape states, as a boot log states it, so that the log diagnosis' settings
    and plan check read it: cache_config_info's settings, num_gpu_blocks, the model."""
    log = BootLog(engine="V0" if names == "v0" else "V1", model=model)
    if model:
        log.lines["model"] = 0
    for label, key in _CACHE_LABELS.items():
        value = cache.get(label)
        if value is None or value in ("None", ""):
            continue
        log.settings[key] = value
        log.lines[key] = 0
    if blocks:
        log.num_gpu_blocks = blocks.get("0") or min(blocks.values())
        log.lines["num_gpu_blocks"] = 0
    log.recognised = 1
    return log


# --------------------------------------------------------------------------- workload


# --------------------------------------------------------------------------- watch


def watch(
    url: str,
    *,
    interval_s: float = 5.0,
    keep: int = 120,
    polls: int | None = None,
    sleep: Callable[[float], None] | None = None,
    **plan: Any,
) -> Iterator[MetricsDiagnosis]:
    """Scrape ``url`` every ``interval_s`` and yield the diagnosis of the last ``keep``
    scrapes (so the rates and percentiles are over the watch), ``polls`` times (None: until
    the caller stops)."""
    series: list[Scrape] = []
    n = 0
    while polls is None or n < polls:
        if n:
            (sleep or time.sleep)(interval_s)
        text = fetch_url(url)
        series += parse_text(text, url, default_time=time.time())
        series = series[-keep:]
        n += 1
        yield diagnose_metrics(
            url, scrapes=list(series), kind="series" if len(series) > 1 else "scrape", **plan
        )
