"""Workload specs for ``kvplan simulate -w SPEC.yaml``: length distributions, an arrival process
and shared-prefix groups, generated with a seed (:func:`generate`), and ``vllm bench serve``'s
dataset shapes (:func:`bench_workload`)."""

from __future__ import annotations

import json
import math
import operator
import random
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner.errors import UsageError, WorkloadError
from planner.simulate.fast import numpy_module
from planner.simulate.workload import (
    MAX_ARRIVAL_S,
    MAX_REQUESTS,
    MAX_TOKENS,
    RequestList,
    Workload,
)

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal", "empirical")
# LogNormal.sample draws this many or more with numpy, when it is installed (_Uniforms): the
# same numbers, ~7x faster; below it numpy's import costs more. (Arrival.times' one log a
# draw is as fast in Python's loop as over arrays.)
BULK_DRAWS = 1 << 15
BULK_CHUNK = 1 << 16  # and this many at a time (the floats math's log and exp take are few)
NV_MAGICCONST = 4 * math.exp(-0.5) / math.sqrt(2.0)  # random.NV_MAGICCONST, as random.py has it


class _Uniforms:
    """``rng.random()``'s next values in bulk: numpy's MT19937 is CPython's generator (the
    reference MT19937, one 32-bit word per draw), so started from ``rng``'s state it yields the
    same words, and ``(a >> 5) * 2**26 + (b >> 6)``, times 2**-53, is how CPython's
    ``random()`` makes a float of two (``Modules/_randommodule.c``): exact in float64. The
    arithmetic is done in numpy; numpy's ``log`` and ``exp`` (SIMD ones, which may differ
    from libm's in the last bit) only where they decide what libm's would (:func:`_accepted`,
    :func:`_exp_rounding`), ``math``'s elsewhere."""

    def __init__(self, np: Any, rng: random.Random) -> None:
        version, internal, self.gauss = rng.getstate()
        assert version == 3 and len(internal) == 625
        self.np, self.rng = np, rng
        self.start = {
            "bit_generator": "MT19937",
            "state": {"key": np.array(internal[:-1], dtype=np.uint32), "pos": internal[-1]},
        }
        self.bits = np.random.MT19937()
        self.bits.state = self.start
        # (words drawn before each take, the generator's state then): done() starts from the
        # last one before the words used instead of drawing them all again
        self.marks: list[tuple[int, Any]] = []
        self.words = 0

    def take(self, m: int) -> Any:
        """The next ``m`` values of ``rng.random()``, as a float64 array."""
        np = self.np
        self.marks.append((self.words, self.bits.state))
        self.words += 2 * m
        raw = self.bits.random_raw(2 * m)
        a = (raw[0::2] >> 5).astype(np.float64)
        b = (raw[1::2] >> 6).astype(np.float64)
        return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)

    def done(self, used: int) -> None:
        """Leave ``rng`` as ``used`` calls of ``rng.random()`` would have."""
        bits = self.np.random.MT19937()
        words, state = max(
            (mark for mark in self.marks if mark[0] <= 2 * used),
            key=lambda mark: mark[0],
            default=(0, self.start),
        )
        bits.state = state
        bits.random_raw(2 * used - words)
        state = bits.state["state"]
        internal = (*(int(w) for w in state["key"]), int(state["pos"]))
        self.rng.setstate((3, internal, self.gauss))


def _numpy(rng: random.Random, n: int) -> Any:
    """numpy, where ``n`` draws from ``rng`` (a plain ``random.Random``) are worth it."""
    if n < BULK_DRAWS or type(rng) is not random.Random:
        return None
    return numpy_module()  # not a dependency: the draws are the same without it, only slower


def _math_all(np: Any, fn: Callable[[float], float], values: Any) -> Any:
    """``fn`` (``math.log``, ``math.exp``: libm's, to the last bit) of every value, as a
    float64 array."""
    return np.array(list(map(fn, values.tolist())), dtype=np.float64)


ARRIVALS = ("poisson", "burst", "all-at-once")


MAX_SPEC_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Fixed(Distribution):
    value: int = 1

    def draw(self, rng: random.Random) -> float:
        return self.value


@dataclass(frozen=True, kw_only=True)
class Uniform(Distribution):
    """Whole numbers from ``min`` to ``max``, both included."""

    def draw(self, rng: random.Random) -> float:
        assert self.high is not None
        return rng.randint(self.low, self.high)


@dataclass(frozen=True, kw_only=True)
class Normal(Distribution):
    mean: float = 1.0
    std: float = 0.0

    def draw(self, rng: random.Random) -> float:
        return rng.gauss(self.mean, self.std)


@dataclass(frozen=True, kw_only=True)
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
        np = _numpy(rng, n)
        if np is not None:
            return _lognormal_bulk(np, rng, n, mu, sigma, low, high)
        uniform, exp, log, isnan = rng.random, math.exp, math.log, math.isnan
        magic = NV_MAGICCONST
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


# numpy's log and exp are within a few units in the last place of libm's (a relative error
# near 1e-16), far inside this: where a decision is farther than it from its edge, numpy's value
# decides it as libm's would
NEAR = 1e-12


def _accepted(np: Any, lhs: Any, u2: Any) -> Any:
    """``lhs <= -math.log(u2)`` for each pair, as the loop decides it: numpy's log where
    ``lhs`` is clearly on one side (it is exact at 1.0), ``math.log`` where the two are within
    :data:`NEAR` of each other (a few pairs in a million)."""
    rough = -np.log(u2)
    ok = lhs <= rough
    close = np.flatnonzero(np.abs(lhs - rough) <= NEAR * rough + NEAR)
    if len(close):
        ok[close] = lhs[close] <= -_math_all(np, math.log, u2[close])
    return ok


def _exp_rounding(np: Any, x: Any) -> Any:
    """``math.exp`` of each value where it matters: what the caller does with it is clip it
    to whole bounds and round it to the nearest whole number, which only a value within
    :data:`NEAR` of a half (k + 0.5) could round otherwise; those are ``math.exp``'s, the others
    numpy's (the same whole number after rounding, not always the same float)."""
    rough = np.exp(x)
    frac = rough - np.floor(rough)
    close = np.flatnonzero(~(np.abs(frac - 0.5) > NEAR * rough + NEAR))  # NaN: close too
    if len(close):
        rough[close] = _math_all(np, math.exp, x[close])
    return rough


def _lognormal_bulk(
    np: Any, rng: random.Random, n: int, mu: float, sigma: float, low: int, high: int
) -> list[int]:
    """:meth:`LogNormal.sample`'s loop over arrays: each draw takes pairs of uniforms (u1,
    1 - u2) until one is accepted, so the accepted pairs, in order, are the draws; every
    operation is the loop's, on the same floats (``round`` is half to even, as ``rint``),
    but for ``log`` and ``exp``: numpy's where they give the loop's decision and whole number
    (all but a few in a million; before, ``math``'s for every value took ~70 % of the time).
    :data:`BULK_CHUNK` draws at a time, so the Python floats ``math`` needs stay few."""
    out: list[int] = []
    used = 0  # uniforms consumed
    draws = _Uniforms(np, rng)
    carry = np.empty(0, dtype=np.float64)  # uniforms taken past the last draw, for the next
    while len(out) < n:
        want = min(n - len(out), BULK_CHUNK)
        pairs = want * 3 // 2 + 64  # about 73 % of pairs are accepted
        u = np.concatenate((carry, draws.take(max(0, 2 * pairs - len(carry)))))
        u1, u2 = u[0::2], 1.0 - u[1::2]
        z = NV_MAGICCONST * (u1 - 0.5) / u2
        accepted = np.flatnonzero(_accepted(np, z * z / 4.0, u2))
        if len(accepted) >= want:
            accepted = accepted[:want]
            last = 2 * (int(accepted[-1]) + 1)
        else:
            last = len(u)
        used += last
        carry = u[last:]
        x = _exp_rounding(np, np.minimum(mu + z[accepted] * sigma, 709.0))
        x = np.where(np.isnan(x), low, np.rint(np.clip(x, low, high)))
        out += x.astype(np.int64).tolist()
    draws.done(used)
    return out


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class PrefixGroup:
    """``fraction`` of requests start with the same ``tokens``-token prefix (a system prompt)."""

    id: str
    tokens: int
    fraction: float


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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
            raise WorkloadError(f"{where}: expected a mapping, got {shown(data)}")
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
            raise WorkloadError(f"{self.where}: '{key}' must be a number, got {shown(value)}")
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
            raise WorkloadError(f"{self.where}: '{key}' must be a whole number, got {shown(value)}")
        if value < minimum:
            raise WorkloadError(f"{self.where}: '{key}' must be at least {minimum}, got {value}")
        return value

    def unknown(self, allowed: Iterable[str]) -> None:
        extra = sorted(set(self.data) - set(allowed))
        if extra:
            names = ", ".join(sorted(allowed))
            raise WorkloadError(f"{self.where}: unknown key(s) {', '.join(extra)}; use {names}")


def shown(value: Any) -> str:
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
            f"{where}: unknown distribution {shown(s.data.get('dist'))}; "
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
                f"{where}: histogram row {i + 1} {shown(row)} is not [lo, hi, weight] with "
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
            process=process,
            rate_per_s=s.number("rate_per_s"),
            burstiness=s.number("burstiness", 1.0),
        )
    if process == "burst":
        s.unknown({"process", "size", "interval_s"})
        return Arrival(process=process, size=s.integer("size"), interval_s=s.number("interval_s"))
    if process == "all-at-once":
        s.unknown({"process"})
        return Arrival(process=process)
    raise WorkloadError(
        f"{where}: unknown arrival process {shown(s.data.get('process'))}; "
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
            PrefixGroup(
                id=str(p.data.get("id", f"prefix-{i}")),
                tokens=p.integer("tokens"),
                fraction=fraction,
            )
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
            f"{spec.source}: {shown(n)} requests is more than the {MAX_REQUESTS:,} kvplan "
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
        prompts = LogNormal(low=1, high=max(1, limit - 1), mean=prompt_tokens, sigma=1.0)
        outputs = LogNormal(low=1, high=max(1, limit // 2), mean=output_tokens, sigma=0.8)
    arrival = (
        Arrival()
        if math.isinf(request_rate)
        else Arrival(process="poisson", rate_per_s=request_rate, burstiness=burstiness)
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
        prefixes=(PrefixGroup(id="shared", tokens=shared_prefix, fraction=1.0),)
        if shared_prefix
        else (),
        seed=seed,
        source="--avg-prompt-tokens/--avg-output-tokens",
        max_concurrency=max_concurrency,
    )
    w = generate(spec)
    reqs = w.requests
    assert isinstance(reqs, RequestList)
    if max(map(operator.add, reqs.prompt, reqs.output)) > limit:
        # outputs cut so that prompt + output fit max_model_len (only those too long change:
        # found by numpy where it is installed, a few in a million requests here)
        np = numpy_module() if len(reqs) >= BULK_DRAWS else None
        if np is None:
            pairs = zip(reqs.prompt, reqs.output, strict=True)
            out = array("q", (o if p + o <= limit else max(1, limit - p) for p, o in pairs))
        else:
            prompt = np.frombuffer(reqs.prompt, dtype=np.int64)
            output = np.frombuffer(reqs.output, dtype=np.int64)
            out = array("q", reqs.output)
            for i in np.flatnonzero(prompt + output > limit).tolist():
                out[i] = max(1, limit - reqs.prompt[i])
        w = replace(
            w,
            requests=RequestList(
                reqs.prompt, out, reqs.arrival, reqs.prefix, reqs.prefix_ids, reqs.prefix_tokens
            ),
        )
    return w
