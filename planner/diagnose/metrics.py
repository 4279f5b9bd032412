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

import json
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.diagnose.boot_log import BootLog
from planner.diagnose.diagnosis import NothingRecognisedError, Term
from planner.diagnose.findings import LOW_PCT, MIN_SAMPLES, PINNED_PCT, Finding, as_named
from planner.errors import InputFileError, KvplanError

if TYPE_CHECKING:
    from planner.deployment import ServeSettings
    from planner.gpus import Gpu
    from planner.recommend import Plan

MAX_METRICS_BYTES = 50 << 20  # one file, one response, or a directory's files together
MAX_SCRAPES = 10_000
MAX_DIR_FILES = 10_000
MAX_VALUE = 1e18  # a sample beyond this (or NaN) is no figure: sums and x100 stay finite
HTTP_TIMEOUT_S = 5.0  # connect, and the whole response
TARGET_LOW_PCT, TARGET_HIGH_PCT = 80.0, 90.0  # the field guide's KV usage target
LOW_HIT_PCT = 10.0  # prefix-cache hit rate below which requests share little

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
# cache_config_info label -> the boot-log spelling diagnose's settings read
_CACHE_LABELS = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "cache_dtype": "kv_cache_dtype",
    "block_size": "block_size",
    "enable_prefix_caching": "enable_prefix_caching",
}
_TIME_MARK = re.compile(
    r"#\s*(\d{9,11}(?:\.\d+)?|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)\s*"
)


class MetricsFileError(InputFileError):
    """Metrics that cannot be read: missing, too large, not an exposition, unreachable: exit 2."""


class NoVllmMetricsError(NothingRecognisedError):
    """An exposition with no vLLM metric in it."""


class MissingExtraError(KvplanError):
    """The text format needs ``prometheus_client`` (the ``metrics`` extra): exit 2."""

    exit_code = 2


# --------------------------------------------------------------------------- reading


@dataclass
class Scrape:
    """One scrape: when (seconds since the epoch; None when the source does not say), and its
    samples as ``(name, labels, value)``."""

    time_s: float | None
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def read_metrics(
    source: str, *, timeout_s: float = HTTP_TIMEOUT_S, limit: int = MAX_METRICS_BYTES
) -> tuple[list[Scrape], str]:
    """The scrapes at ``source`` (a URL, a directory, a file) and what it was: "scrape",
    "series" or "range-json"."""
    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*://", source):
        text = fetch_url(source, timeout_s=timeout_s, limit=limit)
        return _kind(parse_text(text, source, default_time=time.time()))
    path = Path(source)
    if path.is_dir():
        return _read_dir(path, limit), "series"
    from planner.files import read_text_file

    text = read_text_file(path, limit=limit, what="metrics file", error=MetricsFileError)
    if text.lstrip()[:1] in ("{", "["):
        return parse_range_json(text, source), "range-json"
    return _kind(parse_text(text, source, default_time=None))


def _kind(scrapes: list[Scrape]) -> tuple[list[Scrape], str]:
    return scrapes, "series" if len(scrapes) > 1 else "scrape"


def _read_dir(path: Path, limit: int) -> list[Scrape]:
    from planner.files import read_text_file

    try:
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError as exc:
        raise MetricsFileError(f"{path}: cannot list: {exc.strerror or exc}") from None
    if not files:
        raise MetricsFileError(f"{path}: the directory holds no scrape files")
    if len(files) > MAX_DIR_FILES:
        raise MetricsFileError(f"{path}: more than {MAX_DIR_FILES:,} files; keep fewer scrapes")
    out: list[Scrape] = []
    left = limit
    for p in files:
        text = read_text_file(p, limit=left, what="metrics file", error=MetricsFileError)
        left -= len(text.encode("utf-8"))
        out += parse_text(text, str(p), default_time=p.stat().st_mtime)
    out.sort(key=lambda s: (s.time_s is None, s.time_s or 0.0))
    return out[:MAX_SCRAPES]


def fetch_url(
    url: str, *, timeout_s: float = HTTP_TIMEOUT_S, limit: int = MAX_METRICS_BYTES
) -> str:
    """The body of ``url`` (``http`` or ``https``, the host the user named: no proxy from the
    environment, no redirect followed), at most ``limit`` bytes within ``timeout_s`` in all."""
    import http.client
    import urllib.error
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MetricsFileError(
            f"{url}: not an http:// or https:// URL with a host; give the server's /metrics URL "
            "or a file"
        )

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # a 3xx is then an HTTPError: kvplan reads only the URL it was given

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)
    request = urllib.request.Request(
        url, headers={"Accept": "text/plain; version=0.0.4", "User-Agent": "kvplan"}
    )
    deadline = time.monotonic() + timeout_s
    try:
        with opener.open(request, timeout=timeout_s) as response:
            chunks: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    raise MetricsFileError(f"{url}: no complete response within {timeout_s:g} s")
                chunk = response.read1(1 << 16)  # what has come, not a full 64 KiB
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise MetricsFileError(
                        f"{url}: the response is larger than the {limit:,}-byte limit"
                    )
                chunks.append(chunk)
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and size < int(length):
                raise MetricsFileError(f"{url}: the response was cut short")
    except urllib.error.HTTPError as exc:
        where = f" to {exc.headers.get('Location')}" if 300 <= exc.code < 400 else ""
        raise MetricsFileError(f"{url}: HTTP {exc.code} {exc.reason}{where}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise MetricsFileError(f"{url}: no response within {timeout_s:g} s") from None
        raise MetricsFileError(
            f"{url}: cannot connect: {getattr(reason, 'strerror', None) or reason}"
        ) from None
    except TimeoutError:
        raise MetricsFileError(f"{url}: no complete response within {timeout_s:g} s") from None
    except http.client.IncompleteRead:
        raise MetricsFileError(f"{url}: the response was cut short") from None
    except (http.client.HTTPException, OSError) as exc:
        raise MetricsFileError(f"{url}: cannot read: {exc}") from None
    raw = b"".join(chunks)
    if b"\0" in raw:
        raise MetricsFileError(f"{url}: binary response (NUL bytes), not a Prometheus exposition")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetricsFileError(f"{url}: not UTF-8 text (byte {exc.start:,})") from None


def _mark_time(line: str) -> float | None:
    m = _TIME_MARK.fullmatch(line.strip())
    if m is None:
        return None
    text = m.group(1)
    if "-" not in text[:5]:
        return float(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def parse_text(text: str, where: str, *, default_time: float | None) -> list[Scrape]:
    """The scrapes in a text exposition: split at time markers, and where a metric's
    ``# HELP`` line comes again (a scrape appended without a marker), then by sample
    timestamps within each."""
    chunks: list[tuple[float | None, int, list[str]]] = [(default_time, 1, [])]
    helped: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            mark = _mark_time(line)
            if mark is not None:
                if any(x.strip() for x in chunks[-1][2]):
                    chunks.append((mark, number + 1, []))
                else:
                    chunks[-1] = (mark, number + 1, [])
                helped = set()
                continue
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "HELP":
                if parts[2] in helped:
                    chunks.append((None, number, []))
                    helped = set()
                helped.add(parts[2])
        chunks[-1][2].append(line)
    if len(chunks) > MAX_SCRAPES:
        raise MetricsFileError(f"{where}: more than {MAX_SCRAPES:,} scrapes; keep fewer")
    scrapes: list[Scrape] = []
    for when, first, lines in chunks:
        scrapes += _parse_chunk(lines, where, first, when)
        if len(scrapes) > MAX_SCRAPES:
            raise MetricsFileError(f"{where}: more than {MAX_SCRAPES:,} scrapes; keep fewer")
    scrapes = [s for s in scrapes if s.samples]
    if not scrapes:
        raise NoVllmMetricsError(f"{where}: no metric samples; is this a /metrics scrape?")
    return scrapes


def _parser() -> Callable[[str], Iterable[Any]]:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise MissingExtraError(
            "reading Prometheus text needs prometheus-client: pip install 'kvplan[metrics]' "
            "(or pip install prometheus-client)"
        ) from None
    return text_string_to_metric_families


def _parse_chunk(lines: list[str], where: str, first: int, when: float | None) -> list[Scrape]:
    parse = _parser()
    text = "\n".join(lines) + "\n"
    try:
        families = list(parse(text))
    except Exception as exc:  # the parser raises ValueError, and others on odd input
        raise MetricsFileError(_bad_line(lines, where, first, exc)) from None
    by_stamp: dict[float, Scrape] = {}
    current = Scrape(when)
    for family in families:
        for sample in family.samples:
            item = (sample.name, dict(sample.labels), float(sample.value))
            if sample.timestamp is not None:
                stamp = float(sample.timestamp)
                by_stamp.setdefault(stamp, Scrape(stamp)).samples.append(item)
            else:
                current.samples.append(item)
    if by_stamp:
        stamped = [by_stamp[t] for t in sorted(by_stamp)]
        stamped[-1].samples += current.samples  # unstamped samples go with the last stamp
        return stamped
    return [current]


def _bad_line(lines: list[str], where: str, first: int, exc: Exception) -> str:
    """Which line the parser refused, found by parsing the lines one at a time."""
    parse = _parser()
    for i, line in enumerate(lines):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(parse(line + "\n"))
        except Exception:
            shown = line if len(line) <= 80 else line[:77] + "..."
            return f"{where}: line {first + i:,} is not Prometheus text format: {shown!r}"
    return f"{where}: not a Prometheus text exposition ({str(exc)[:100]})"


def parse_range_json(text: str, where: str) -> list[Scrape]:
    """Scrapes from a Prometheus query API export: matrix (``values``) or vector (``value``)
    results, grouped by timestamp; a list of responses (one per query) is merged."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetricsFileError(f"{where}: not JSON ({str(exc)[:80]})") from None
    responses = data if isinstance(data, list) else [data]
    by_time: dict[float, Scrape] = {}
    for i, response in enumerate(responses):
        body = response.get("data") if isinstance(response, dict) else None
        results = body.get("result") if isinstance(body, dict) else None
        if not isinstance(results, list):
            raise MetricsFileError(
                f"{where}: response {i + 1} is not a Prometheus query result "
                '(expected {"data": {"resultType": "matrix", "result": [...]}})'
            )
        for series in results:
            if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
                raise MetricsFileError(f"{where}: response {i + 1}: a result has no 'metric'")
            labels = {str(k): str(v) for k, v in series["metric"].items()}
            name = labels.pop("__name__", "")
            points = series.get("values")
            if points is None and "value" in series:
                points = [series["value"]]
            if not isinstance(points, list):
                raise MetricsFileError(f"{where}: {name or 'a series'}: no 'values'")
            for point in points:
                try:
                    stamp, value = float(point[0]), float(point[1])
                except (TypeError, ValueError, IndexError, KeyError):
                    raise MetricsFileError(
                        f'{where}: {name}: point {str(point)[:40]!r} is not [time, "value"]'
                    ) from None
                by_time.setdefault(stamp, Scrape(stamp)).samples.append((name, labels, value))
            if len(by_time) > MAX_SCRAPES:
                raise MetricsFileError(f"{where}: more than {MAX_SCRAPES:,} timestamps")
    if not by_time:
        raise NoVllmMetricsError(f"{where}: the export holds no samples")
    return [by_time[t] for t in sorted(by_time)]


# --------------------------------------------------------------------------- per engine


@dataclass
class _View:
    """One engine's figures in one scrape: values by sample name (summed over labels other
    than the engine's), histogram buckets by name ({upper bound: cumulative count})."""

    values: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)


def _views(scrape: Scrape) -> tuple[dict[str, _View], dict[str, dict[str, str]], set[str]]:
    """Each engine's view, the cache_config_info labels by engine ("" for all), and the
    model names the samples carry."""
    views: dict[str, _View] = {}
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
        view = views.setdefault(engine or "0", _View())
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


def _first(values: Mapping[str, float], names: tuple[str, ...]) -> float | None:
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


def _quantiles(buckets: Mapping[float, float], total_sum: float | None) -> Quantiles | None:
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


def _window(
    series: list[tuple[float | None, _View | None]], names: tuple[str, ...]
) -> tuple[float | None, float | None]:
    """A counter's increase over the scrapes, from the last restart (a fall) on, and the
    seconds it spans (None when not timed)."""
    points = [(t, _first(v.values, names)) for t, v in series if v is not None]
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


def _hist_window(
    series: list[tuple[float | None, _View | None]], names: tuple[str, ...]
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


def _rank(
    engine: str,
    series: list[tuple[float | None, _View | None]],
    blocks: int | None,
    max_num_seqs: tuple[int | None, str | None],
) -> dict[str, Any]:
    """One engine's figures (the :class:`RankMetrics` fields but findings)."""
    kv = [
        (x * 100, v)
        for _, v in series
        if v is not None and (x := _first(v.values, KV_USAGE)) is not None
    ]
    usage = [u for u, _ in kv]
    running = [
        r for _, v in series if v is not None and (r := _first(v.values, RUNNING)) is not None
    ]
    waiting = [
        w for _, v in series if v is not None and (w := _first(v.values, WAITING)) is not None
    ]
    pre, span = _window(series, PREEMPTIONS)
    finished, _ = _window(series, FINISHED)
    queries, _ = _window(series, PREFIX_QUERIES)
    hits, _ = _window(series, PREFIX_HITS)
    rate = [
        x * 100
        for _, v in series
        if v is not None and (x := _first(v.values, PREFIX_HIT_RATE)) is not None and x >= 0
    ]
    if queries and hits is not None:
        hit_pct: float | None = 100 * hits / queries
    else:
        hit_pct = sum(rate) / len(rate) if rate else None
    hists = {key: _hist_window(series, names) for key, names in HISTOGRAMS.items()}
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
        **{key: _quantiles(*hists[key]) for key in HISTOGRAMS},
        "prompt_buckets": hists["prompt"][0],
        "output_buckets": hists["output"][0],
        "num_gpu_blocks": blocks,
        "max_num_seqs": max_num_seqs[0],
        "max_num_seqs_source": max_num_seqs[1],
        "window_s": round(window, 3) if window else None,
        "_series": series,
    }


def _cluster_series(
    per_engine: dict[str, list[tuple[float | None, _View | None]]], blocks: dict[str, int]
) -> list[tuple[float | None, _View | None]]:
    """The ranks as one: counts and buckets summed per scrape, KV usage averaged (weighted by
    each rank's blocks when all are known)."""
    engines = sorted(per_engine, key=_engine_key)
    n = max(len(s) for s in per_engine.values())
    out: list[tuple[float | None, _View | None]] = []
    for i in range(n):
        views = [(e, per_engine[e][i][1]) for e in engines if i < len(per_engine[e])]
        when = next((per_engine[e][i][0] for e in engines if i < len(per_engine[e])), None)
        present = [(e, v) for e, v in views if v is not None]
        if not present:
            out.append((when, None))
            continue
        merged = _View()
        for _, v in present:
            for name, value in v.values.items():
                merged.values[name] = merged.values.get(name, 0.0) + value
            for name, hist in v.buckets.items():
                into = merged.buckets.setdefault(name, {})
                for b, c in hist.items():
                    into[b] = into.get(b, 0.0) + c
        usage = [(e, _first(v.values, KV_USAGE)) for e, v in present]
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


def _engine_key(engine: str) -> tuple[int, str]:
    return (int(engine), "") if engine.isdigit() else (1 << 30, engine)


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
        w, run, kv = (_first(v.values, names) for names in (WAITING, RUNNING, KV_USAGE))
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
    from planner.deployment import as_flags, fp8_kv_caveat
    from planner.diagnose.findings import FP8_KV, lower_gmu

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
                "kv-usage",
                "info",
                {
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
            from planner.recommend import worst_case_seqs

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
                "kv-pinned",
                "warning",
                {
                    "samples": samples,
                    "p90_pct": usage,
                    "peak_pct": peak,
                    "preemptions": r["preemptions"],
                    "preemptions_per_s": r["preemptions_per_s"],
                    "preemptions_per_1k_requests": r["preemptions_per_1k_requests"],
                    "max_waiting": r["waiting_max"] or 0,
                },
                fix,
                caveats=[fp8_kv_caveat(gpu)],
            )
        )
    elif peak is not None and samples >= MIN_SAMPLES and peak < LOW_PCT and not starved:
        gmu = lower_gmu(BootLog(), p, serve, peak)
        out.append(
            Finding(
                "kv-low",
                "info",
                {"samples": samples, "peak_pct": peak, "suggested_gmu": gmu},
                [
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
                "starved-max-num-seqs",
                "warning",
                starved,
                [
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
                "starved-token-budget",
                "warning" if starved["waiting_scrapes"] >= 2 else "info",
                starved,
                fix,
            )
        )
    hit = r["prefix_hit_pct"]
    if hit is not None and hit < LOW_HIT_PCT and (r["prompt"] is None or r["prompt"].count > 0):
        out.append(
            Finding(
                "prefix-low-hit",
                "info",
                {"mean_hit_pct": round(hit, 1), "samples": r["scrapes"]},
                ["put the fixed part of the prompt first so requests share whole blocks"],
            )
        )
    latency = _latency(r, starved)
    if latency is not None:
        out.append(latency)
    if r["prompt"] is not None or r["output"] is not None:
        out.append(
            Finding(
                "lengths",
                "info",
                {
                    "prompt": _qdict(r["prompt"]),
                    "output": _qdict(r["output"]),
                },
                [
                    "--save-workload FILE writes these lengths as a workload spec for "
                    "kvplan simulate -w and kvplan estimate -w"
                ],
            )
        )
    return out


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
        "latency",
        "info",
        {
            "ttft_s": _qdict(ttft),
            "tpot_s": _qdict(tpot),
            "queue_s": _qdict(queue),
            "e2e_s": _qdict(r["e2e"]),
        },
        fix,
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
    parsed = [(s.time_s, *_views(s)) for s in scrapes]
    engines = sorted({e for _, views, _, _ in parsed for e in views}, key=_engine_key)
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
    from planner.diagnose.settings import layer_settings

    settings = layer_settings(log, given, notes)
    findings: list[Finding] = []
    the_plan = None
    if settings.model and gpu is not None:
        from planner.diagnose.diagnosis import plan_for

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

    per_engine: dict[str, list[tuple[float | None, _View | None]]] = {
        e: [(t, views.get(e)) for t, views, _, _ in parsed] for e in engines
    }
    ranks = []
    for e in engines:
        r = _rank(e, per_engine[e], blocks.get(e), cap_seqs)
        r["findings"] = rank_findings(
            r, the_plan, settings.serve, gpu, cap_known=cap_known, batched_tokens=batched
        )
        ranks.append(_finish(r))
    total_blocks = sum(blocks.values()) if len(blocks) == len(engines) else None
    cluster_cap = (cap_seqs[0] * len(engines), cap_seqs[1]) if cap_seqs[0] is not None else cap_seqs
    c = _rank("all", _cluster_series(per_engine, blocks), total_blocks, cluster_cap)
    c["findings"] = (
        rank_findings(c, the_plan, settings.serve, gpu, cap_known=cap_known, batched_tokens=batched)
        if len(engines) > 1
        else ranks[0].findings
    )
    cluster = _finish(c)

    terms: list[Term] = []
    if the_plan is not None:
        from planner.diagnose.findings import explain

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
        from planner.deployment import as_flags
        from planner.diagnose.findings import PREFIX_CACHING_ON

        findings.append(
            Finding(
                "prefix-off",
                "info",
                {},
                [
                    as_flags(PREFIX_CACHING_ON),
                    "put the fixed part of the prompt (system prompt, tools) first",
                ],
            )
        )
    verdict: dict[str, Any] = {}
    if the_plan is not None:
        from planner.diagnose.diagnosis import verdict_of

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


def _next_125(bound: float) -> float:
    """The next value of vLLM's 1-2-5 bucket series after ``bound`` (``build_1_2_5_buckets``
    in the loggers: 1, 2, 5, 10, 20, 50, ...)."""
    exponent = math.floor(math.log10(bound)) if bound > 0 else 0
    for e in (exponent, exponent + 1):
        for m in (1, 2, 5):
            if m * 10**e > bound:
                return float(m * 10**e)
    return bound * 2


def _weight(count: float) -> float | int:
    """A bucket's count as a spec weight: whole counts stay whole."""
    return int(count) if count == int(count) else round(count, 6)


def histogram_rows(buckets: Mapping[float, float], max_len: int | None = None) -> list[list[Any]]:
    """A length histogram as workload spec rows ``[lo, hi, weight]``: the bucket ``(a, b]`` is
    the whole numbers ``a + 1 .. b`` (1 .. b for the first), weighted by its count. The
    ``+Inf`` bucket holds what is above the largest bound, which vLLM sets at the largest 1-2-5
    value within ``max_model_len``: so it is ``last + 1 .. max_len`` (``max_len``: the model
    length when known, else the next 1-2-5 value less 1)."""
    bounds = sorted(b for b in buckets if b != math.inf)
    rows: list[list[Any]] = []
    below, lower = 0.0, 0
    for b in bounds:
        count = buckets[b] - below
        hi = math.floor(b)
        if count > 0 and hi >= max(lower + 1, 1):
            rows.append([max(lower + 1, 1), hi, _weight(count)])
        below, lower = buckets[b], max(hi, lower)
    rest = buckets.get(math.inf, below) - below
    if rest > 0:
        top = max_len if max_len and max_len > lower else int(_next_125(lower or 1)) - 1
        rows.append([lower + 1, max(top, lower + 1), _weight(rest)])
    return rows


def workload_spec(dg: MetricsDiagnosis, *, num_requests: int = 1000) -> dict[str, Any]:
    """The cluster's observed prompt and output lengths as a workload spec
    (:mod:`planner.simulate.workload`): empirical histograms, ``num_requests`` requests, and
    Poisson arrivals at the finished-request rate when the window is timed."""
    c = dg.cluster
    if not c.prompt_buckets or not c.output_buckets:
        raise KvplanError(
            f"{dg.source}: no prompt and output length histograms "
            "(vllm:request_prompt_tokens, vllm:request_generation_tokens) to make a workload of"
        )
    top = dg.max_model_len
    prompt = histogram_rows(c.prompt_buckets, top)
    output = histogram_rows(c.output_buckets, top)
    if not prompt or not output:
        raise KvplanError(f"{dg.source}: the length histograms observed no request")
    spec: dict[str, Any] = {
        "name": "observed",
        "seed": 0,
        "num_requests": num_requests,
        "prompt_tokens": {"dist": "empirical", "histogram": prompt},
        "output_tokens": {"dist": "empirical", "histogram": output},
    }
    if c.requests_finished and c.window_s:
        spec["arrival"] = {
            "process": "poisson",
            "rate_per_s": round(c.requests_finished / c.window_s, 4),
        }
    return spec


def workload_yaml(dg: MetricsDiagnosis) -> str:
    """:func:`workload_spec` as YAML, with a comment naming where it came from."""
    import yaml

    spec = workload_spec(dg)
    head = (
        f"# Observed lengths from {dg.source} ({dg.scrapes} scrape"
        f"{'s' if dg.scrapes != 1 else ''}): vLLM's length histograms, each bucket drawn "
        "uniformly.\n# kvplan simulate MODEL -w THIS_FILE  |  kvplan estimate MODEL -w THIS_FILE\n"
    )
    return head + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None)


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
