"""Reading a vLLM server's Prometheus metrics (:func:`read_metrics`): one scrape from a file or a
URL (a timeout, a size bound, no redirect), a directory or file of scrapes, or a range-query
JSON export, parsed by prometheus_client's parser; the metric names per release are in
:mod:`planner.diagnose.metrics`."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.diagnose.diagnosis import NothingRecognisedError
from planner.errors import InputFileError, KvplanError
from planner.files import read_text_file

if TYPE_CHECKING:
    pass


MAX_METRICS_BYTES = 50 << 20  # one file, one response, or a directory's files together


MAX_SCRAPES = 10_000


MAX_DIR_FILES = 10_000


MAX_VALUE = 1e18  # a sample beyond this (or NaN) is no figure: sums and x100 stay finite


HTTP_TIMEOUT_S = 5.0  # connect, and the whole response


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

    text = read_text_file(path, limit=limit, what="metrics file", error=MetricsFileError)
    if text.lstrip()[:1] in ("{", "["):
        return parse_range_json(text, source), "range-json"
    return _kind(parse_text(text, source, default_time=None))


def _kind(scrapes: list[Scrape]) -> tuple[list[Scrape], str]:
    return scrapes, "series" if len(scrapes) > 1 else "scrape"


def _read_dir(path: Path, limit: int) -> list[Scrape]:
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
