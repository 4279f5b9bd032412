"""JSONL traces for ``kvplan simulate -w TRACE.jsonl``, read line by line (:func:`parse_trace`),
and :func:`load_workload`, which reads a trace or generates a spec's requests
(:mod:`planner.simulate.spec`)."""

from __future__ import annotations

import heapq
import itertools
import json
import math
import operator
import re
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from planner import files
from planner.errors import InputFileError, WorkloadError
from planner.simulate.spec import MAX_SPEC_BYTES, generate, parse_spec, shown
from planner.simulate.workload import MAX_ARRIVAL_S, MAX_REQUESTS, Request, RequestList, Workload

MAX_BAD_LINES_SHOWN = 5


MAX_BAD_LINES_KEPT = 100  # Workload.skipped keeps this many messages; num_skipped counts all


MAX_LINE_BYTES = 1 << 16  # a trace line is ~100 bytes


def _whole(value: Any, key: str, minimum: int) -> tuple[int | None, str | None]:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"{key} {shown(value)} is not a whole number"
    if value < minimum:
        word = "negative" if value < 0 else f"less than {minimum}"
        return None, f"{key} {value} is {word}"
    if value > files.MAX_INT:  # 1e19 as a float: a count no array (or engine) holds
        return None, f"{key} {shown(value)} is out of range (at most 2^63 - 1)"
    return value, None


def _trace_request(obj: Any) -> Request | str:
    """One trace line as a Request, or what is wrong with it."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {shown(obj)}"
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
            f"arrival_s {shown(arrival)} is not a finite time >= 0 (at most {MAX_ARRIVAL_S:g} s)"
        )
    prefix_id = obj.get("prefix_id")
    prefix_tokens = 0
    if prefix_id is not None or "prefix_tokens" in obj:
        if prefix_id is None or "prefix_tokens" not in obj:
            problems.append("prefix_id and prefix_tokens go together")
        elif isinstance(prefix_id, bool) or not isinstance(prefix_id, (str, int)):
            problems.append(f"prefix_id {shown(prefix_id)} is not a string")
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
