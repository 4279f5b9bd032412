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

This module holds what both become (:class:`Request`, :class:`RequestList`, :class:`Workload`);
specs are read and generated in :mod:`planner.simulate.spec`, traces read (and
:func:`planner.simulate.trace.load_workload`, either) in :mod:`planner.simulate.trace`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

MAX_TOKENS = 1 << 40  # the planner's MAX_COUNT: a request longer than this is never served
MAX_REQUESTS = 2_000_000  # a 100 MB trace holds about 1.5 million
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


@dataclass(frozen=True, kw_only=True)
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
