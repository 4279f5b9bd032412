"""``kvplan simulate --calibrate RESULT.json``: fit the step-time terms to the user's own run.

RESULT.json is what ``vllm bench serve --save-result`` writes (``vllm/benchmarks/serve.py``'s
``result_json``): the client's settings (``num_prompts``, ``request_rate``, ``burstiness``,
``max_concurrency``), totals (``total_input_tokens``, ``total_output_tokens``, ``completed``),
and figures (``output_throughput``, ``mean_/median_ttft_ms``, ``mean_/median_tpot_ms``, ...);
with ``--save-detailed`` also each request's ``input_lens`` and ``output_lens``.

The run is rebuilt as a workload (:func:`workload_of`): each request's lengths when the file
has them, else ``num_prompts`` requests of the average lengths; arrivals all at t = 0 for an
infinite rate, else Poisson / gamma at the rate (seed 0: the real send times are not in the
file); the closed loop of ``max_concurrency``. Then two multipliers are fitted by replaying it
(:func:`fit`):

- ``decode``: scales the terms of a decode step together (the memory time over
  ``memory_efficiency``, ``layer_floor_s``, ``overhead_s``, ``seq_overhead_s``) until the
  replay's median TPOT is the file's;
- ``request_latency_s``: moved by the gap between the replay's median TTFT and the file's
  (TTFT is that latency plus queueing and prefill); when the replay is too slow with no
  latency left, ``prefill`` scales the compute time (over ``compute_efficiency``) instead.

The decode multiplier is a fixed-point iteration ``m <- m x measured / predicted`` (TPOT is
close to proportional to it), alternated with the TTFT fit :data:`ROUNDS` times; efficiencies
stay at most 1.
The fitted terms are a :class:`planner.simulate.clock.Profile`, with the ratios after the fit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import InputFileError
from planner.simulate.clock import PROFILE_KEYS, Profile
from planner.simulate.engine import BenchFigures
from planner.simulate.spec import Arrival, Fixed, WorkloadSpec, generate
from planner.simulate.workload import MAX_REQUESTS, MAX_TOKENS, Request, Workload

MAX_RESULT_BYTES = 64 << 20  # a detailed result of 100k requests is ~30 MB
ROUNDS = 4
STEPS = 3  # fixed-point steps per multiplier per round


@dataclass(frozen=True)
class BenchResult:
    """What kvplan reads from a ``vllm bench serve --save-result`` file."""

    source: str
    model_id: str
    num_prompts: int
    completed: int
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    total_input_tokens: int
    total_output_tokens: int
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    figures: dict[str, float]  # the file's figures by its names (ms, tok/s)


FIGURES = (
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
)


def _count(data: dict[str, Any], key: str, source: str, *, required: bool = True) -> int:
    value = data.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise InputFileError(f"{source}: '{key}' must be a whole number >= 0, got {value!r:.40}")
    return value


def parse_result(text: str, source: str) -> BenchResult:
    """A :class:`BenchResult` from a result file's text; one line naming the key otherwise."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise InputFileError(f"{source}: JSON nested too deeply") from None
    if not isinstance(data, dict) or "completed" not in data or "median_tpot_ms" not in data:
        raise InputFileError(
            f"{source}: not a `vllm bench serve --save-result` file (no completed / median_tpot_ms)"
        )
    completed = _count(data, "completed", source)
    if not completed:
        raise InputFileError(f"{source}: no request completed; nothing to fit")
    num_prompts = _count(data, "num_prompts", source, required=False) or completed
    if num_prompts > MAX_REQUESTS:
        raise InputFileError(f"{source}: {num_prompts:,} prompts; at most {MAX_REQUESTS:,}")
    rate_raw = data.get("request_rate", "inf")
    try:
        rate = float(rate_raw)
    except (TypeError, ValueError):
        raise InputFileError(f"{source}: 'request_rate' must be a number or \"inf\"") from None
    if not rate > 0:
        raise InputFileError(f"{source}: 'request_rate' must be positive, got {rate_raw!r}")
    burst = data.get("burstiness", 1.0)
    if isinstance(burst, bool) or not isinstance(burst, int | float) or not burst > 0:
        raise InputFileError(f"{source}: 'burstiness' must be a positive number")
    mc = data.get("max_concurrency")
    if mc is not None and (isinstance(mc, bool) or not isinstance(mc, int) or mc < 1):
        raise InputFileError(f"{source}: 'max_concurrency' must be a whole number >= 1 or null")
    lens: list[tuple[int, ...]] = []
    for key in ("input_lens", "output_lens"):
        raw = data.get(key) or []
        if not isinstance(raw, list) or len(raw) > MAX_REQUESTS:
            raise InputFileError(f"{source}: '{key}' must be a list of token counts")
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in raw):
            raise InputFileError(f"{source}: '{key}' must hold whole numbers >= 0")
        lens.append(tuple(raw))
    figures: dict[str, float] = {}
    for key in FIGURES:
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            figures[key] = float(value)
    return BenchResult(
        source=source,
        model_id=str(data.get("model_id") or "")[:200],
        num_prompts=num_prompts,
        completed=completed,
        request_rate=rate,
        burstiness=float(burst),
        max_concurrency=mc,
        total_input_tokens=_count(data, "total_input_tokens", source),
        total_output_tokens=_count(data, "total_output_tokens", source),
        input_lens=lens[0],
        output_lens=lens[1],
        figures=figures,
    )


def load_result(path: str | Path) -> BenchResult:
    text = files.read_text_file(Path(path), limit=MAX_RESULT_BYTES, what="benchmark result")
    return parse_result(text, str(path))


def workload_of(result: BenchResult, max_model_len: int | None = None) -> Workload:
    """The run as a workload (module docstring); outputs cut to fit ``max_model_len``."""
    n = result.completed
    if result.input_lens and len(result.input_lens) == len(result.output_lens):
        pairs = [(p, o) for p, o in zip(result.input_lens, result.output_lens, strict=True) if o]
    else:
        prompt = max(1, round(result.total_input_tokens / n))
        output = max(1, round(result.total_output_tokens / n))
        pairs = [(prompt, output)] * n
    if not pairs:
        raise InputFileError(f"{result.source}: no request with output tokens")
    arrival = (
        Arrival()
        if math.isinf(result.request_rate)
        else Arrival(
            process="poisson", rate_per_s=result.request_rate, burstiness=result.burstiness
        )
    )
    times = generate(
        WorkloadSpec(
            name="t",
            num_requests=len(pairs),
            prompt_tokens=Fixed(value=1),
            output_tokens=Fixed(value=1),
            arrival=arrival,
            source="t",
        )
    ).requests
    limit = max_model_len or MAX_TOKENS
    requests = tuple(
        Request(max(1, p), max(1, min(o, limit - p)) if p < limit else o, t.arrival_s)
        for (p, o), t in zip(pairs, times, strict=True)
    )
    return Workload(
        name=f"{Path(result.source).name} ({len(requests):,} requests)",
        source=result.source,
        requests=requests,
        max_concurrency=result.max_concurrency,
    )


Replay = Callable[[dict[str, float]], BenchFigures]


def fit(result: BenchResult, base: dict[str, float], replay: Replay) -> Profile:
    """Fit the decode and prefill multipliers (module docstring) from the default ``base``
    terms; ``replay`` replays the run with given terms and returns its figures."""
    tpot = result.figures.get("median_tpot_ms") or result.figures.get("mean_tpot_ms")
    ttft = result.figures.get("median_ttft_ms") or result.figures.get("mean_ttft_ms")
    if not tpot:
        raise InputFileError(f"{result.source}: no TPOT to fit (median_tpot_ms is 0)")
    decode = prefill = 1.0
    latency = base["request_latency_s"]

    def terms() -> dict[str, float]:
        return {
            **base,
            "memory_efficiency": min(1.0, base["memory_efficiency"] / decode),
            "layer_floor_s": base["layer_floor_s"] * decode,
            "overhead_s": base["overhead_s"] * decode,
            "seq_overhead_s": base["seq_overhead_s"] * decode,
            "compute_efficiency": min(1.0, base["compute_efficiency"] / prefill),
            "request_latency_s": latency,
        }

    figures = replay(terms())
    for _ in range(ROUNDS):
        for _ in range(STEPS):
            if figures.median_tpot_ms <= 0:
                break
            decode = min(100.0, max(0.01, decode * tpot / figures.median_tpot_ms))
            figures = replay(terms())
        if ttft:
            for _ in range(STEPS):
                # TTFT is the API server's latency plus queueing and prefill: too short, add
                # latency; too long with none left, speed the prefill up
                gap = (ttft - figures.median_ttft_ms) / 1000
                if gap >= 0 or latency > 0:
                    latency = max(0.0, latency + gap)
                elif figures.median_ttft_ms > 0:
                    prefill = max(0.01, prefill * ttft / figures.median_ttft_ms)
                figures = replay(terms())
    ratios = {
        "median_tpot_ms": figures.median_tpot_ms / tpot,
        "output_throughput": figures.output_throughput / result.figures["output_throughput"]
        if result.figures.get("output_throughput")
        else 0.0,
    }
    if ttft:
        ratios["median_ttft_ms"] = figures.median_ttft_ms / ttft
    fitted = terms()
    return Profile(
        terms={k: fitted[k] for k in PROFILE_KEYS},
        fitted_on={
            "result": result.source,
            "model_id": result.model_id,
            "completed": result.completed,
            "request_rate": "inf" if math.isinf(result.request_rate) else result.request_rate,
            "max_concurrency": result.max_concurrency,
            "decode_multiplier": decode,
            "prefill_multiplier": prefill,
            "request_latency_s": latency,
        },
        fit=ratios,
    )
