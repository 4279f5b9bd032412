"""The request lengths a running server observed, from vLLM's prompt and generation token
histograms (:func:`histogram_rows`), as a workload spec for kvplan simulate -w and estimate -w
(:func:`workload_spec`, :func:`workload_yaml`, diagnose --metrics --save-workload)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from planner.errors import KvplanError

if TYPE_CHECKING:
    pass
from planner.diagnose.metrics import MetricsDiagnosis


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
