"""Workloads for ``kvplan simulate``: a JSONL trace of real requests, or a YAML spec of
length distributions, an arrival process and shared-prefix groups, generated with a seed.

Trace, one JSON object per line (``arrival_s`` defaults to 0; a prefix is optional)::

    {"prompt_tokens": 1312, "output_tokens": 240, "arrival_s": 0.52,
     "prefix_id": "system", "prefix_tokens": 800}

``prompt_tokens`` is the whole prompt, shared prefix included; ``prefix_tokens`` of it are the
same for every request with that ``prefix_id`` (so it must be less than ``prompt_tokens``).

Spec (YAML)::

    name: chat
    seed: 7
    num_requests: 2000
    arrival: {process: poisson, rate_per_s: 8}       # or burst / all-at-once
    # optional: burstiness (gamma arrivals, vllm bench serve's --burstiness) and
    # max_concurrency (a closed loop: at most C requests in flight, as --max-concurrency)
    prompt_tokens: {dist: lognormal, mean: 400, sigma: 0.9, min: 4, max: 8000}
    output_tokens: {dist: empirical, histogram: [[16, 128, 0.5], [128, 1024, 0.5]]}
    prefixes:
      - {id: system, tokens: 800, fraction: 0.7}

In a spec, ``prompt_tokens`` is the request's own text; a request in a prefix group gets the
group's tokens on top. Generating the same spec with the same seed gives the same requests.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import operator
import random
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import InputFileError, WorkloadError

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal", "empirical")
ARRIVALS = ("poisson", "burst", "all-at-once")
MAX_BAD_LINES_SHOWN = 5
MAX_BAD_LINES_KEPT = 100  # Workload.skipped keeps this many messages; num_skipped counts all
MAX_TOKENS = 1 << 40  # the planner's MAX_COUNT: a request longer than this is never served
MAX_REQUESTS = 2_000_000  # a 100 MB trace holds about 1.5 million
MAX_LINE_BYTES = 1 << 16  # a trace line is ~100 bytes
MAX_SPEC_BYTES = 1 << 20
MAX_ARRIVAL_S = 1e9  # 30 years: later arrival times lose sub-millisecond resolution


@dataclass(frozen=True, slots=True)
class Request:
    """One request: its whole prompt (shared prefix included) and how many tokens it generates."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0
    prefix_id: str | None = None
    prefix_tokens: int = 0


class RequestList(Sequence[Request]):
    """Requests stored as columns (about 28 bytes a request instead of ~170 for a tuple of
    :class:`Request`): what :func:`parse_trace` returns for a big trace. Reads like a tuple of
    Requests (built on access) and compares equal to one holding the same requests."""

    __slots__ = ("prompt", "output", "arrival", "prefix", "prefix_ids", "prefix_tokens")

    def __init__(
        self,
        prompt: array[int],
        output: array[int],
        arrival: array[float],
        prefix: array[int] | None = None,
        prefix_ids: Sequence[str] = (),
        prefix_tokens: Sequence[int] = (),
    ) -> None:
        self.prompt, self.output, self.arrival = prompt, output, arrival
        self.prefix = prefix  # per request: an index into prefix_ids / prefix_tokens, or -1
        self.prefix_ids, self.prefix_tokens = tuple(prefix_ids), tuple(prefix_tokens)

    def __len__(self) -> int:
        return len(self.prompt)

    def _at(self, i: int) -> Request:
        g = -1 if self.prefix is None else self.prefix[i]
        if g < 0:
            return Request(self.prompt[i], self.output[i], self.arrival[i])
        return Request(
            self.prompt[i],
            self.output[i],
            self.arrival[i],
            self.prefix_ids[g],
            self.prefix_tokens[g],
        )

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self._at(j) for j in range(*i.indices(len(self))))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("request index out of range")
        return self._at(i)

    def __iter__(self) -> Iterator[Request]:
        return map(self._at, range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RequestList({len(self):,} requests)"

    def __reduce__(self) -> Any:
        return (
            RequestList,
            (
                self.prompt,
                self.output,
                self.arrival,
                self.prefix,
                self.prefix_ids,
                self.prefix_tokens,
            ),
        )


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order, where they came from, and what was skipped on the way.

    ``max_concurrency`` (None: open loop) makes the client a closed loop, as ``vllm bench
    serve --max-concurrency C`` is: request ``i`` is sent at its ``arrival_s`` or when fewer
    than C requests are in flight, whichever is later (the (i - C + 1)-th completion), and its
    TTFT and E2E latency count from when it is sent. Requests rejected as too long never hold
    a slot.
    """

    name: str
    source: str
    requests: Sequence[Request]  # a tuple, or a RequestList from a trace
    seed: int | None = None
    skipped: tuple[str, ...] = ()  # the first MAX_BAD_LINES_KEPT bad lines, with what is wrong
    num_skipped: int = 0
    max_concurrency: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.requests)


# --------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class Distribution:
    """A distribution of token counts; ``sample`` returns whole numbers in ``[low, high]``."""

    low: int = 1
    high: int | None = None

    def draw(self, rng: random.Random) -> float:
        raise NotImplementedError

    def sample(self, rng: random.Random, n: int) -> list[int]:
        """``n`` draws, clipped to ``[low, high]`` (``high`` defaults to MAX_TOKENS: a draw of
        1e300 tokens, or an infinite one, is simply too long) and rounded."""
        low, high = self.low, self.high if self.high is not None else MAX_TOKENS
        out = []
        for _ in range(n):
            x = self.draw(rng)
            out.append(low if math.isnan(x) else round(min(max(x, low), high)))
        return out


@dataclass(frozen=True)
class Fixed(Distribution):
    value: int = 1

    def draw(self, rng: random.Random) -> float:
        return self.value


@dataclass(frozen=True)
class Uniform(Distribution):
    """Whole numbers from ``min`` to ``max``, both included."""

    def draw(self, rng: random.Random) -> float:
        assert self.high is not None
        return rng.randint(self.low, self.high)


@dataclass(frozen=True)
class Normal(Distribution):
    mean: float = 1.0
    std: float = 0.0

    def draw(self, rng: random.Random) -> float:
        return rng.gauss(self.mean, self.std)


@dataclass(frozen=True)
class LogNormal(Distribution):
    """Parameterised by its own mean (before clipping) and the sigma of log(x):
    ``mu = ln(mean) - sigma^2 / 2``, so a 1,000-token mean stays 1,000 whatever the spread."""

    mean: float = 1.0
    sigma: float = 0.0

    def draw(self, rng: random.Random) -> float:
        # rng.lognormvariate is exp(normalvariate), which overflows past e^709.78
        log = rng.normalvariate(math.log(self.mean) - self.sigma * self.sigma / 2, self.sigma)
        return math.exp(min(log, 709.0))

    def sample(self, rng: random.Random, n: int) -> list[int]:
        """:meth:`Distribution.sample` with :meth:`draw` inlined: the same numbers, without a
        method call and the parameters' arithmetic per draw (specs are mostly lognormal).
        ``rng.normalvariate`` is inlined too: CPython's Kinderman-Monahan ratio of uniforms
        (``Lib/random.py``, the same from 3.10 to 3.13), the same operations on the same
        ``rng.random()`` draws (tests/test_workload.py checks it against ``draw``)."""
        low, high = self.low, self.high if self.high is not None else MAX_TOKENS
        mu, sigma = math.log(self.mean) - self.sigma * self.sigma / 2, self.sigma
        uniform, exp, log, isnan = rng.random, math.exp, math.log, math.isnan
        magic = 4 * math.exp(-0.5) / math.sqrt(2.0)  # random.NV_MAGICCONST, as random.py has it
        out = []
        for _ in range(n):
            while True:
                u1 = uniform()
                u2 = 1.0 - uniform()
                z = magic * (u1 - 0.5) / u2
                if z * z / 4.0 <= -log(u2):
                    break
            x = exp(min(mu + z * sigma, 709.0))
            out.append(low if isnan(x) else round(min(max(x, low), high)))
        return out


@dataclass(frozen=True)
class Empirical(Distribution):
    """A histogram: bins ``(lo, hi, weight)``; a bin is picked by weight, then a whole number
    in ``[lo, hi]`` uniformly (``lo == hi`` is a point mass)."""

    bins: tuple[tuple[int, int, float], ...] = ()
    cumulative: tuple[float, ...] = field(default=(), compare=False)

    def draw(self, rng: random.Random) -> float:
        lo, hi, _ = self.bins[_pick(rng.random() * self.cumulative[-1], self.cumulative)]
        return rng.randint(lo, hi)


def _pick(x: float, cumulative: Sequence[float]) -> int:
    for i, edge in enumerate(cumulative):
        if x < edge:
            return i
    return len(cumulative) - 1


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class PrefixGroup:
    """``fraction`` of requests start with the same ``tokens``-token prefix (a system prompt)."""

    id: str
    tokens: int
    fraction: float


@dataclass(frozen=True)
class Arrival:
    """When requests arrive: ``poisson`` at ``rate_per_s``, ``burst`` of ``size`` every
    ``interval_s``, or ``all-at-once`` at t = 0.

    ``burstiness`` other than 1 draws ``poisson`` gaps from a gamma distribution of shape
    ``burstiness`` and mean ``1 / rate_per_s``, as ``vllm bench serve --burstiness`` does
    (``np.random.gamma(shape=burstiness, scale=1 / (rate x burstiness))``): below 1 burstier,
    above 1 more even."""

    process: str = "all-at-once"
    rate_per_s: float = 0.0
    size: int = 0
    interval_s: float = 0.0
    burstiness: float = 1.0

    def times(self, rng: random.Random, n: int) -> list[float]:
        if self.process == "poisson":
            t, out = 0.0, []
            if self.burstiness != 1.0:
                shape, scale = self.burstiness, 1.0 / (self.rate_per_s * self.burstiness)
                for _ in range(n):
                    t += rng.gammavariate(shape, scale)
                    out.append(t)
                return out
            for _ in range(n):
                t += rng.expovariate(self.rate_per_s)
                out.append(t)
            return out
        if self.process == "burst":
            return [(i // self.size) * self.interval_s for i in range(n)]
        return [0.0] * n


@dataclass(frozen=True)
class WorkloadSpec:
    """A YAML workload spec, parsed: what :func:`generate` draws requests from."""

    name: str
    num_requests: int
    prompt_tokens: Distribution
    output_tokens: Distribution
    arrival: Arrival = Arrival()
    prefixes: tuple[PrefixGroup, ...] = ()
    seed: int = 0
    source: str = ""
    max_concurrency: int | None = None


class _Section:
    """Reads one mapping of a spec, naming the file and key path in every error."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, Mapping):
            raise WorkloadError(f"{where}: expected a mapping, got {_show(data)}")
        self.data, self.where = data, where

    def number(self, key: str, default: float | None = None, *, positive: bool = True) -> float:
        value = self.data.get(key, default)
        if value is None:
            raise WorkloadError(f"{self.where}: '{key}' is missing")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise WorkloadError(f"{self.where}: '{key}' must be a number, got {_show(value)}")
        if positive and value <= 0:
            raise WorkloadError(f"{self.where}: '{key}' must be positive, got {value}")
        if value < 0:
            raise WorkloadError(f"{self.where}: '{key}' must not be negative, got {value}")
        return float(value)

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise WorkloadError(f"{self.where}: '{key}' is missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadError(f"{self.where}: '{key}' must be a whole number, got {_show(value)}")
        if value < minimum:
            raise WorkloadError(f"{self.where}: '{key}' must be at least {minimum}, got {value}")
        return value

    def unknown(self, allowed: Iterable[str]) -> None:
        extra = sorted(set(self.data) - set(allowed))
        if extra:
            names = ", ".join(sorted(allowed))
            raise WorkloadError(f"{self.where}: unknown key(s) {', '.join(extra)}; use {names}")


def _show(value: Any) -> str:
    """A short picture of a value for a message (containers are not printed: one from a hostile
    file can be huge, deep or recursive)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value)))}-digit number"
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) else repr(value)
    return text if len(text) < 40 else text[:37] + "..."


def parse_distribution(data: Any, where: str) -> Distribution:
    """One length distribution from its YAML mapping (``dist`` names the kind)."""
    if isinstance(data, int) and not isinstance(data, bool) and data >= 1:
        return Fixed(low=1, value=data)  # `output_tokens: 256` means fixed
    s = _Section(data, where)
    kind = str(s.data.get("dist", "")).strip().lower()
    if kind not in DISTRIBUTIONS:
        raise WorkloadError(
            f"{where}: unknown distribution {_show(s.data.get('dist'))}; "
            f"use one of: {', '.join(DISTRIBUTIONS)}"
        )
    low = s.integer("min", 1, minimum=1)
    high = s.integer("max", 0, minimum=0) or None
    if high is not None and high < low:
        raise WorkloadError(f"{where}: max {high} is less than min {low}")
    common = {"dist", "min", "max"}
    if kind == "fixed":
        s.unknown({"dist", "value"})
        value = s.integer("value")
        return Fixed(low=1, value=value)
    if kind == "uniform":
        s.unknown(common)
        if high is None:
            raise WorkloadError(f"{where}: a uniform distribution needs 'max'")
        return Uniform(low=low, high=high)
    if kind == "normal":
        s.unknown(common | {"mean", "std"})
        return Normal(
            low=low, high=high, mean=s.number("mean"), std=s.number("std", positive=False)
        )
    if kind == "lognormal":
        s.unknown(common | {"mean", "sigma"})
        return LogNormal(
            low=low, high=high, mean=s.number("mean"), sigma=s.number("sigma", positive=False)
        )
    s.unknown(common | {"histogram"})
    return _empirical(s.data.get("histogram"), where, low, high)


def _empirical(rows: Any, where: str, low: int, high: int | None) -> Empirical:
    if not isinstance(rows, list) or not rows:
        raise WorkloadError(f"{where}: 'histogram' must be a list of [lo, hi, weight] rows")
    bins = []
    for i, row in enumerate(rows):
        ok = (
            isinstance(row, list)
            and len(row) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in row[:2])
            and isinstance(row[2], (int, float))
            and not isinstance(row[2], bool)
        )
        if not ok or not (1 <= row[0] <= row[1]) or row[2] < 0:
            raise WorkloadError(
                f"{where}: histogram row {i + 1} {_show(row)} is not [lo, hi, weight] with "
                "1 <= lo <= hi and weight >= 0"
            )
        bins.append((int(row[0]), int(row[1]), float(row[2])))
    cumulative = tuple(_cumsum(b[2] for b in bins))
    if cumulative[-1] <= 0:
        raise WorkloadError(f"{where}: histogram weights add up to 0")
    return Empirical(low=low, high=high, bins=tuple(bins), cumulative=cumulative)


def _cumsum(values: Iterable[float]) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _arrival(data: Any, where: str) -> Arrival:
    if data is None:
        return Arrival()
    if isinstance(data, str):
        data = {"process": data}
    s = _Section(data, where)
    process = str(s.data.get("process", "")).strip().lower().replace("_", "-")
    process = {"all-at-once": "all-at-once", "batch": "all-at-once", "once": "all-at-once"}.get(
        process, process
    )
    if process == "poisson":
        s.unknown({"process", "rate_per_s", "burstiness"})
        return Arrival(
            process, rate_per_s=s.number("rate_per_s"), burstiness=s.number("burstiness", 1.0)
        )
    if process == "burst":
        s.unknown({"process", "size", "interval_s"})
        return Arrival(process, size=s.integer("size"), interval_s=s.number("interval_s"))
    if process == "all-at-once":
        s.unknown({"process"})
        return Arrival(process)
    raise WorkloadError(
        f"{where}: unknown arrival process {_show(s.data.get('process'))}; "
        f"use one of: {', '.join(ARRIVALS)}"
    )


def parse_spec(data: Any, source: str) -> WorkloadSpec:
    """A :class:`WorkloadSpec` from the parsed YAML mapping; errors name ``source`` and the key."""
    s = _Section(data, source)
    s.unknown(
        {
            "name",
            "seed",
            "num_requests",
            "arrival",
            "prompt_tokens",
            "output_tokens",
            "prefixes",
            "max_concurrency",
        }
    )
    for key in ("prompt_tokens", "output_tokens"):
        if key not in s.data:
            raise WorkloadError(f"{source}: '{key}' is missing (a length distribution)")
    prefixes = []
    raw_prefixes = s.data.get("prefixes") or []
    if not isinstance(raw_prefixes, list):
        raise WorkloadError(f"{source}: 'prefixes' must be a list of {{id, tokens, fraction}}")
    for i, item in enumerate(raw_prefixes):
        p = _Section(item, f"{source}: prefixes[{i}]")
        p.unknown({"id", "tokens", "fraction"})
        fraction = p.number("fraction")
        if fraction > 1:
            raise WorkloadError(f"{p.where}: 'fraction' must be at most 1, got {fraction}")
        prefixes.append(
            PrefixGroup(str(p.data.get("id", f"prefix-{i}")), p.integer("tokens"), fraction)
        )
    if sum(p.fraction for p in prefixes) > 1 + 1e-9:
        raise WorkloadError(f"{source}: prefix fractions add up to more than 1")
    if len({p.id for p in prefixes}) != len(prefixes):
        raise WorkloadError(f"{source}: prefix ids must differ")
    return WorkloadSpec(
        name=str(s.data.get("name") or Path(source).stem),
        num_requests=s.integer("num_requests", 1000),
        prompt_tokens=parse_distribution(s.data["prompt_tokens"], f"{source}: prompt_tokens"),
        output_tokens=parse_distribution(s.data["output_tokens"], f"{source}: output_tokens"),
        arrival=_arrival(s.data.get("arrival"), f"{source}: arrival"),
        prefixes=tuple(prefixes),
        seed=s.integer("seed", 0, minimum=0),
        source=source,
        max_concurrency=s.integer("max_concurrency")
        if s.data.get("max_concurrency") is not None
        else None,
    )


def generate(
    spec: WorkloadSpec, *, seed: int | None = None, num_requests: int | None = None
) -> Workload:
    """Draw the spec's requests. Each quantity has its own random stream derived from the seed,
    so changing one distribution does not reshuffle the others.

    Args:
        spec: the parsed spec.
        seed: overrides the spec's seed.
        num_requests: overrides the spec's request count.

    Returns:
        The requests, sorted by arrival time.
    """
    seed = spec.seed if seed is None else seed
    n = spec.num_requests if num_requests is None else num_requests
    if n < 1:
        raise WorkloadError(f"{spec.source}: the workload has no requests (num_requests {n})")
    if n > MAX_REQUESTS:
        raise WorkloadError(
            f"{spec.source}: {_show(n)} requests is more than the {MAX_REQUESTS:,} kvplan "
            "simulates; lower num_requests (or --num-requests)"
        )

    def stream(name: str) -> random.Random:
        return random.Random(f"kvplan:{seed}:{name}")

    own = spec.prompt_tokens.sample(stream("prompt_tokens"), n)
    outputs = spec.output_tokens.sample(stream("output_tokens"), n)
    arrivals = spec.arrival.times(stream("arrival"), n)
    if not math.isfinite(arrivals[-1]) or arrivals[-1] > MAX_ARRIVAL_S:
        raise WorkloadError(
            f"{spec.source}: arrivals reach {arrivals[-1]:g} s, past the {MAX_ARRIVAL_S:g} s "
            "kvplan simulates; raise rate_per_s or lower interval_s"
        )
    # columns (a RequestList, ~28 bytes a request), not a tuple of Request (~200 bytes)
    prompts = array("q", own)
    prefix = None
    if spec.prefixes:
        rng = stream("prefixes")
        cumulative = _cumsum(p.fraction for p in spec.prefixes)
        prefix = array("q", [-1]) * n
        for i in range(n):
            x = rng.random()
            if x < cumulative[-1]:
                g = prefix[i] = _pick(x, cumulative)
                prompts[i] += spec.prefixes[g].tokens
    requests = RequestList(
        prompts,
        array("q", outputs),
        array("d", arrivals),
        prefix,
        [p.id for p in spec.prefixes],
        [p.tokens for p in spec.prefixes],
    )
    return Workload(
        name=spec.name,
        source=spec.source,
        requests=requests,
        seed=seed,
        max_concurrency=spec.max_concurrency,
    )


# --------------------------------------------------------------------------- bench-shaped

# ShareGPT as vllm bench serve draws it (--dataset-name sharegpt, Llama-3 tokenizer): 1,000
# prompts held 229,711 input and 203,068 output tokens (vllm-project/vllm PR #18566), ~230 and
# ~203 a request; lognormal spreads as examples/workloads/chat.yaml's.
SHAREGPT_PROMPT_MEAN, SHAREGPT_OUTPUT_MEAN = 230, 203
DATASETS = ("lognormal", "random", "sharegpt")


def bench_workload(
    *,
    prompt_tokens: int | None,
    output_tokens: int | None,
    dataset: str = "lognormal",
    range_ratio: float = 0.0,
    num_requests: int = 1000,
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
    shared_prefix: int = 0,
    max_model_len: int | None = None,
    seed: int = 0,
) -> Workload:
    """Requests shaped as ``vllm bench serve`` sends them.

    Args:
        prompt_tokens / output_tokens: the average lengths (``--avg-prompt-tokens``,
            ``--avg-output-tokens``; vllm's ``--random-input-len`` / ``--random-output-len``).
        dataset: ``lognormal`` (kvplan estimate's shorthand: sigma 1.0 and 0.8 around the
            means), ``random`` (vllm's random dataset: uniform in [L (1 - r), L (1 + r)] with
            ``range_ratio`` r, fixed at r = 0), or ``sharegpt`` (ShareGPT-like lognormal
            lengths around 230 / 203 tokens unless the averages are given).
        num_requests: ``--num-prompts``.
        request_rate: requests per second (inf: all at t = 0, vllm's default).
        burstiness: gamma shape of the gaps (1: Poisson).
        max_concurrency: a closed loop of at most this many in flight (:class:`Workload`).
        shared_prefix: tokens every request starts with, shared (vllm's
            ``--random-prefix-len``), on top of its own prompt.
        max_model_len: outputs are cut so prompt + output fit it.
        seed: the random streams' seed.
    """
    from planner.errors import UsageError

    if dataset not in DATASETS:
        raise UsageError(f"unknown --dataset {dataset!r}; use one of: {', '.join(DATASETS)}")
    if dataset == "sharegpt":
        prompt_tokens = prompt_tokens or SHAREGPT_PROMPT_MEAN
        output_tokens = output_tokens or SHAREGPT_OUTPUT_MEAN
    if prompt_tokens is None or output_tokens is None:
        raise UsageError("give --avg-prompt-tokens and --avg-output-tokens together")
    for flag, value in (
        ("--avg-prompt-tokens", prompt_tokens),
        ("--avg-output-tokens", output_tokens),
    ):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, got {value}")
    if not 0 <= range_ratio < 1:
        raise UsageError(f"--range-ratio must be in [0, 1), got {range_ratio:g}")
    if not request_rate > 0:
        raise UsageError(
            f"--request-rate must be positive (inf: all at once), got {request_rate:g}"
        )
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise UsageError(f"--burstiness must be a positive number, got {burstiness:g}")
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError(f"--max-concurrency must be at least 1, got {max_concurrency}")
    if shared_prefix < 0:
        raise UsageError(f"--shared-prefix must not be negative, got {shared_prefix}")
    limit = max_model_len or MAX_TOKENS
    prompts: Distribution
    outputs: Distribution
    if dataset == "random":

        def span(mean: int) -> Distribution:
            lo, hi = (
                max(1, math.floor(mean * (1 - range_ratio))),
                math.ceil(mean * (1 + range_ratio)),
            )
            return Fixed(value=mean) if lo == hi or range_ratio == 0 else Uniform(low=lo, high=hi)

        prompts, outputs = span(prompt_tokens), span(output_tokens)
    else:
        prompts = LogNormal(1, max(1, limit - 1), mean=prompt_tokens, sigma=1.0)
        outputs = LogNormal(1, max(1, limit // 2), mean=output_tokens, sigma=0.8)
    arrival = (
        Arrival()
        if math.isinf(request_rate)
        else Arrival("poisson", rate_per_s=request_rate, burstiness=burstiness)
    )
    shape = f"{dataset} {prompt_tokens:,}+{output_tokens:,} tokens"
    if shared_prefix:
        shape += f" after a shared {shared_prefix:,}"
    rate = "all at once" if math.isinf(request_rate) else f"{request_rate:g}/s"
    if not math.isinf(request_rate) and burstiness != 1.0:
        rate += f" (gamma, burstiness {burstiness:g})"
    if max_concurrency:
        rate += f", at most {max_concurrency:,} in flight"
    spec = WorkloadSpec(
        name=f"{shape}, {rate}",
        num_requests=num_requests,
        prompt_tokens=prompts,
        output_tokens=outputs,
        arrival=arrival,
        prefixes=(PrefixGroup("shared", shared_prefix, 1.0),) if shared_prefix else (),
        seed=seed,
        source="--avg-prompt-tokens/--avg-output-tokens",
        max_concurrency=max_concurrency,
    )
    w = generate(spec)
    reqs = w.requests
    assert isinstance(reqs, RequestList)
    if max(map(operator.add, reqs.prompt, reqs.output)) > limit:
        # outputs cut so that prompt + output fit max_model_len
        pairs = zip(reqs.prompt, reqs.output, strict=True)
        out = array("q", (o if p + o <= limit else max(1, limit - p) for p, o in pairs))
        from dataclasses import replace

        w = replace(
            w,
            requests=RequestList(
                reqs.prompt, out, reqs.arrival, reqs.prefix, reqs.prefix_ids, reqs.prefix_tokens
            ),
        )
    return w


# --------------------------------------------------------------------------- trace


def _whole(value: Any, key: str, minimum: int) -> tuple[int | None, str | None]:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"{key} {_show(value)} is not a whole number"
    if value < minimum:
        word = "negative" if value < 0 else f"less than {minimum}"
        return None, f"{key} {value} is {word}"
    if value > files.MAX_INT:  # 1e19 as a float: a count no array (or engine) holds
        return None, f"{key} {_show(value)} is out of range (at most 2^63 - 1)"
    return value, None


def _trace_request(obj: Any) -> Request | str:
    """One trace line as a Request, or what is wrong with it."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {_show(obj)}"
    problems = []
    values: dict[str, int] = {}
    for key, minimum in (("prompt_tokens", 1), ("output_tokens", 1)):
        if key not in obj:
            problems.append(f"{key} missing")
            continue
        value, problem = _whole(obj[key], key, minimum)
        if problem:
            problems.append(problem)
        else:
            assert value is not None
            values[key] = value
    arrival = obj.get("arrival_s", 0.0)
    if (
        isinstance(arrival, bool)
        or not isinstance(arrival, (int, float))
        or not 0 <= arrival <= MAX_ARRIVAL_S
    ):
        problems.append(
            f"arrival_s {_show(arrival)} is not a finite time >= 0 (at most {MAX_ARRIVAL_S:g} s)"
        )
    prefix_id = obj.get("prefix_id")
    prefix_tokens = 0
    if prefix_id is not None or "prefix_tokens" in obj:
        if prefix_id is None or "prefix_tokens" not in obj:
            problems.append("prefix_id and prefix_tokens go together")
        elif isinstance(prefix_id, bool) or not isinstance(prefix_id, (str, int)):
            problems.append(f"prefix_id {_show(prefix_id)} is not a string")
        else:
            value, problem = _whole(obj["prefix_tokens"], "prefix_tokens", 0)
            if problem:
                problems.append(problem)
            else:
                assert value is not None
                prefix_tokens = value
                prompt = values.get("prompt_tokens")
                if prompt is not None and prefix_tokens >= prompt:
                    problems.append(
                        f"prefix_tokens {prefix_tokens} is not less than prompt_tokens {prompt} "
                        "(the prompt includes the prefix and at least one token of its own)"
                    )
    if problems:
        return "; ".join(problems)
    return Request(
        prompt_tokens=values["prompt_tokens"],
        output_tokens=values["output_tokens"],
        arrival_s=float(arrival),
        prefix_id=None if prefix_id is None else str(prefix_id),
        prefix_tokens=prefix_tokens,
    )


def parse_trace(
    lines: Iterable[str],
    source: str,
    *,
    skip_bad_lines: bool = False,
    num_requests: int | None = None,
) -> Workload:
    """Requests from JSONL lines (blank lines ignored), sorted by arrival (ties keep file order).

    Lines are consumed one at a time, so a generator over a file (:func:`load_workload`) keeps
    memory to the requests kept: all of them, or with ``num_requests`` only the earliest N.

    Args:
        lines: the file's lines.
        source: the file name, for messages.
        skip_bad_lines: skip lines with missing, negative or malformed fields (listed in
            ``Workload.skipped``) instead of failing on them.
        num_requests: keep the ``num_requests`` earliest requests (by arrival, then line).

    Returns:
        The workload; raises :class:`WorkloadError` on bad lines (naming them), no requests, or
        more than :data:`MAX_REQUESTS` requests to keep.
    """
    if num_requests is not None and num_requests < 1:
        raise WorkloadError(f"{source}: --num-requests must be at least 1")
    limit = MAX_REQUESTS if num_requests is None else min(num_requests, MAX_REQUESTS)
    # Kept requests as columns, in file order. While arrivals do not decrease (the usual
    # trace) that is arrival order already, and past ``limit`` a new line is the latest
    # (arrival, line) kept, so it is the one dropped. The first arrival out of order with a
    # limit switches to a max-heap on (arrival, line), keys negated.
    prompts: array[int] = array("q")
    outputs: array[int] = array("q")
    arrivals: array[float] = array("d")
    groups: array[int] = array("i")
    in_order = True
    heap: list[tuple[float, int, Request]] | None = None
    group_of: dict[str, int] = {}
    prefix_ids: list[str] = []
    prefix_tokens_of: list[int] = []
    last = -math.inf
    bad: list[str] = []
    num_bad = 0
    prefix_lines: dict[str, tuple[int, int]] = {}
    plain = _PLAIN_LINE.fullmatch
    number = 0
    it = iter(lines)
    # batches grow from 16 lines while they are plain (so a trace of long lines, never plain,
    # is read a few lines at a time)
    size = 16
    while batch := list(itertools.islice(it, size)):
        if heap is None and len(prompts) + len(batch) <= limit:
            chunk = _plain_batch(batch, last)
            if chunk is not None:  # every line a plain one the loop below would keep
                prompts.extend(chunk[0])
                outputs.extend(chunk[1])
                arrivals.extend(chunk[2])
                groups.extend(array("i", [-1]) * len(batch))
                last = chunk[2][-1]
                number += len(batch)
                size = min(2 * size, BATCH_LINES)
                continue
        elif heap is None and len(prompts) == limit and num_requests is not None:
            if _plain_batch(batch, last, in_order=False) is not None:
                number += len(batch)  # every line plain and no earlier than the last kept:
                size = min(2 * size, BATCH_LINES)  # the loop below would drop each
                continue
        size = 16
        for line in batch:
            number += 1
            m = plain(line) if len(line) < 256 else None
            if m is not None:  # the fast path: what the checks below would accept unchanged
                prompt_text, output_text, arrival_text, prefix_id, prefix_text = m.groups()
                prompt, output = int(prompt_text), int(output_text)
                arrival = float(arrival_text) if arrival_text is not None else 0.0
                prefix_tokens = int(prefix_text) if prefix_id is not None else 0
                if arrival <= MAX_ARRIVAL_S and prefix_tokens < prompt:
                    if prefix_id is not None:
                        first = prefix_lines.setdefault(prefix_id, (number, prefix_tokens))
                        if first[1] != prefix_tokens:
                            m = None  # the slow path names the conflict
                else:
                    m = None
            if m is None:
                if not line.strip():
                    continue
                problem = None
                if len(line) > MAX_LINE_BYTES:
                    problem = f"line {number}: longer than {MAX_LINE_BYTES:,} bytes"
                else:
                    try:
                        obj = files.loads_json(line, where=f"line {number}", line=None)
                        request = _trace_request(obj)
                    except json.JSONDecodeError as exc:
                        request = f"not JSON ({exc.msg})"
                    except InputFileError as exc:  # a number out of range, or too deep
                        request = str(exc).removeprefix(f"line {number}: ")
                    if isinstance(request, str):
                        problem = f"line {number}: {request}"
                    elif request.prefix_id is not None:
                        first = prefix_lines.setdefault(
                            request.prefix_id, (number, request.prefix_tokens)
                        )
                        if first[1] != request.prefix_tokens:
                            problem = (
                                f"line {number}: prefix_id {request.prefix_id!r} has prefix_tokens "
                                f"{request.prefix_tokens} here but {first[1]} on line {first[0]}"
                            )
                if problem is not None:
                    num_bad += 1
                    if len(bad) < MAX_BAD_LINES_KEPT:
                        bad.append(problem)
                    continue
                assert not isinstance(request, str)
                prompt, output, arrival = (
                    request.prompt_tokens,
                    request.output_tokens,
                    request.arrival_s,
                )
                prefix_id, prefix_tokens = request.prefix_id, request.prefix_tokens
            if heap is None:
                if arrival < last:
                    if num_requests is not None:
                        heap = _to_heap(
                            RequestList(
                                prompts, outputs, arrivals, groups, prefix_ids, prefix_tokens_of
                            )
                        )
                        prompts, outputs, arrivals, groups = (
                            array("q"),
                            array("q"),
                            array("d"),
                            array("i"),
                        )
                    in_order = False
                elif len(prompts) == limit:
                    if num_requests is None:
                        raise _too_many(source)
                    continue  # the latest (arrival, line) so far
            if heap is not None:
                request = Request(prompt, output, arrival, prefix_id, prefix_tokens)
                heapq.heappush(heap, (-arrival, -number, request))
                if len(heap) > limit:
                    heapq.heappop(heap)  # the latest arrival so far
                continue
            if len(prompts) == limit:
                raise _too_many(source)
            last = arrival
            prompts.append(prompt)
            outputs.append(output)
            arrivals.append(arrival)
            if prefix_id is None:
                groups.append(-1)
            else:
                g = group_of.get(prefix_id)
                if g is None:
                    g = group_of[prefix_id] = len(prefix_ids)
                    prefix_ids.append(prefix_id)
                    prefix_tokens_of.append(prefix_tokens)
                groups.append(g)
    if bad and not skip_bad_lines:
        shown = "; ".join(bad[:MAX_BAD_LINES_SHOWN])
        more = (
            f" (and {num_bad - MAX_BAD_LINES_SHOWN} more)" if num_bad > MAX_BAD_LINES_SHOWN else ""
        )
        raise WorkloadError(
            f"{source}: {num_bad} bad line(s): {shown}{more}. Fix them, or pass --skip-bad-lines "
            "to leave them out"
        )
    requests: Sequence[Request]
    if heap is not None:
        heap.sort(reverse=True)  # (-arrival, -line) descending = arrival, then line, ascending
        requests = _columns(r for _, _, r in heap)
    else:
        requests = RequestList(
            prompts, outputs, arrivals, groups if prefix_ids else None, prefix_ids, prefix_tokens_of
        )
        if not in_order:  # a stable sort: ties keep file order
            order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
            requests = _columns(requests[i] for i in order)
    if not requests:
        raise WorkloadError(f"{source}: the workload has no requests")
    return Workload(
        name=Path(source).stem,
        source=source,
        requests=requests,
        skipped=tuple(bad),
        num_skipped=num_bad,
    )


# A trace line as kvplan and json.dumps write it, with nothing for the checks of
# _trace_request to reject but arrival_s > MAX_ARRIVAL_S, prefix_tokens >= prompt_tokens and a
# prefix_id seen with other prefix_tokens (checked after the match): whole numbers >= 1 (0 for
# prefix_tokens), a JSON number >= 0 for arrival_s, a prefix id without escapes.
_NUMBER = r"(?:0|[1-9][0-9]{0,30})(?:\.[0-9]{1,40})?(?:[eE][-+]?[0-9]{1,3})?"
_PLAIN_LINE = re.compile(
    r'\{"prompt_tokens": ?([1-9][0-9]{0,15}), ?"output_tokens": ?([1-9][0-9]{0,15})'
    rf'(?:, ?"arrival_s": ?({_NUMBER}))?'
    r'(?:, ?"prefix_id": ?"([^"\\\x00-\x1f]*)", ?"prefix_tokens": ?(0|[1-9][0-9]{0,15}))?'
    r"\}[ \t\r\n]*"
)


# Plain lines without a prefix, each a whole line of a batch joined with newlines.
_PLAIN_LINES = re.compile(
    r'^\{"prompt_tokens": ?([1-9][0-9]{0,15}), ?"output_tokens": ?([1-9][0-9]{0,15})'
    rf'(?:, ?"arrival_s": ?({_NUMBER}))?'
    r"\}[ \t\r]*$",
    re.MULTILINE,
)
BATCH_LINES = 4096  # parse_trace reads plain lines in batches of up to this many


def _plain_batch(
    batch: list[str], last: float, *, in_order: bool = True
) -> tuple[array[int], array[int], array[float]] | None:
    """The prompt, output and arrival columns of ``batch`` when every line is one that
    :func:`parse_trace`'s per-line fast path keeps as it is (a plain line under 256 characters,
    no prefix, arrival at most MAX_ARRIVAL_S) and arrivals do not decrease from ``last`` on
    (``in_order=False``: are none earlier than ``last``); else None. One regex pass and C-level
    conversions over the whole batch instead of a Python loop a line."""
    if max(map(len, batch)) >= 256:
        return None
    found = _PLAIN_LINES.findall("\n".join(batch))
    if len(found) != len(batch):  # a line that is not plain (or blank): line by line
        return None
    prompt_text, output_text, arrival_text = zip(*found, strict=True)
    if "" in arrival_text:  # no arrival_s: 0
        times = array("d", [float(a) if a else 0.0 for a in arrival_text])
    else:
        times = array("d", map(float, arrival_text))
    if max(times) > MAX_ARRIVAL_S:
        return None
    if not in_order:
        return None if min(times) < last else (array("q"), array("q"), times)
    if times[0] < last or not all(map(operator.le, times, itertools.islice(times, 1, None))):
        return None  # out of order: line by line decides
    return array("q", map(int, prompt_text)), array("q", map(int, output_text)), times


def _too_many(source: str) -> WorkloadError:
    return WorkloadError(
        f"{source}: more than {MAX_REQUESTS:,} requests, the most kvplan simulates; "
        "pass --num-requests N to replay the first N"
    )


def _to_heap(kept: RequestList) -> list[tuple[float, int, Request]]:
    """The kept requests, in arrival and file order, as a max-heap on (arrival, line), keys
    negated; a request's position stands in for its line (it keeps their order, and is below
    any later line)."""
    heap = [(-r.arrival_s, -i, r) for i, r in enumerate(kept)]
    heapq.heapify(heap)
    return heap


def _columns(requests: Iterable[Request]) -> RequestList:
    """Requests as a :class:`RequestList`."""
    prompts, outputs, arrivals, groups = array("q"), array("q"), array("d"), array("i")
    group_of: dict[tuple[str, int], int] = {}
    ids: list[str] = []
    tokens: list[int] = []
    for r in requests:
        prompts.append(r.prompt_tokens)
        outputs.append(r.output_tokens)
        arrivals.append(r.arrival_s)
        if r.prefix_id is None:
            groups.append(-1)
        else:
            key = (r.prefix_id, r.prefix_tokens)
            g = group_of.get(key)
            if g is None:
                g = group_of[key] = len(ids)
                ids.append(r.prefix_id)
                tokens.append(r.prefix_tokens)
            groups.append(g)
    return RequestList(prompts, outputs, arrivals, groups if ids else None, ids, tokens)


def load_workload(
    path: str | Path,
    *,
    seed: int | None = None,
    num_requests: int | None = None,
    skip_bad_lines: bool = False,
) -> Workload:
    """A workload from a ``.jsonl`` trace or a ``.yaml`` / ``.yml`` spec.

    A trace is streamed line by line, never read whole; a spec is at most 1 MiB of YAML whose
    aliases may not expand past a million nodes.

    Args:
        path: the file.
        seed: for a spec, overrides its seed.
        num_requests: for a spec, overrides its request count; for a trace, keeps the first N.
        skip_bad_lines: for a trace, skip bad lines instead of failing.

    Returns:
        The :class:`Workload`.
    """
    from planner import files

    p = Path(path)
    source = str(path)
    if "\0" in source:
        raise WorkloadError(f"{source!r}: not a usable file name")
    if p.suffix.lower() in (".yaml", ".yml"):
        data = files.load_yaml(
            p, limit_bytes=MAX_SPEC_BYTES, what="workload spec", error=WorkloadError
        )
        if data is None:
            raise WorkloadError(f"{source}: the workload spec is empty")
        return generate(parse_spec(data, source), seed=seed, num_requests=num_requests)
    if p.suffix.lower() not in (".jsonl", ".json", ".ndjson"):
        raise WorkloadError(
            f"{source}: unknown workload format; use a .jsonl trace or a .yaml spec"
        )
    lines = files.iter_lines(
        p, max_line_bytes=MAX_LINE_BYTES, what="JSONL trace", error=WorkloadError
    )
    return parse_trace(lines, source, skip_bad_lines=skip_bad_lines, num_requests=num_requests)


def trace_lines(workload: Workload) -> list[str]:
    """The workload as JSONL lines (the trace format :func:`parse_trace` reads)."""
    out = []
    for r in workload.requests:
        obj: dict[str, Any] = {
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "arrival_s": r.arrival_s,
        }
        if r.prefix_id is not None:
            obj["prefix_id"] = r.prefix_id
            obj["prefix_tokens"] = r.prefix_tokens
        out.append(json.dumps(obj))
    return out
