"""Bounded memory and time on huge inputs: traces stream line by line, `--num-requests` keeps
only what it replays, and every other file has a size limit (the catalogue in
test_bad_inputs.py checks the refusals: an endless device, alias bombs, over-long lines)."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.simulate.trace import MAX_LINE_BYTES, load_workload, parse_trace
from planner.simulate.workload import MAX_REQUESTS

PAD = "x" * 1000  # an ignored field: the file grows, the requests do not


def write_trace(path: Path, lines: int, pad: str = PAD) -> int:
    """``lines`` requests (arrival times out of order), each line padded; returns the file size."""
    with path.open("w") as f:
        for i in range(lines):
            arrival = (i * 7919) % lines / 10  # a permutation: the file is not sorted
            f.write(
                json.dumps(
                    {
                        "prompt_tokens": 100 + i % 900,
                        "output_tokens": 1 + i % 200,
                        "arrival_s": arrival,
                        "note": pad,
                    }
                )
                + "\n"
            )
    return path.stat().st_size


def peak_bytes(load: object) -> int:
    tracemalloc.start()
    try:
        assert callable(load)
        load()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_trace_is_streamed_not_read_whole(tmp_path: Path) -> None:
    # 8,000 lines of ~1 KiB: reading the file whole (and splitting it) needs twice its size.
    trace = tmp_path / "big.jsonl"
    size = write_trace(trace, 8_000)
    assert size > 8_000_000
    peak = peak_bytes(lambda: load_workload(trace))
    assert peak < size / 4, (peak, size)


def test_num_requests_keeps_only_the_earliest_n(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    size = write_trace(trace, 8_000)
    peak = peak_bytes(lambda: load_workload(trace, num_requests=50))
    assert peak < 200_000, (peak, size)  # 50 requests and one line at a time
    kept = load_workload(trace, num_requests=50).requests
    everything = load_workload(trace).requests
    assert kept == everything[:50]  # the earliest arrivals, ties in file order
    assert [r.arrival_s for r in kept] == sorted(r.arrival_s for r in kept)


def test_too_many_requests_are_refused_with_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("planner.simulate.trace.MAX_REQUESTS", 3)  # where parse_trace reads it
    lines = ['{"prompt_tokens": 5, "output_tokens": 5}'] * 4
    with pytest.raises(Exception, match="more than 3 requests, the most kvplan simulates; pass "):
        parse_trace(lines, "t.jsonl")
    assert len(parse_trace(lines, "t.jsonl", num_requests=2).requests) == 2
    assert MAX_REQUESTS >= 1_500_000  # a 100 MB trace of ~70-byte lines fits


def test_many_bad_lines_keep_a_bounded_list(tmp_path: Path) -> None:
    lines = ['{"prompt_tokens": 5, "output_tokens": 5}'] + ["not json"] * 50_000
    workload = parse_trace(lines, "t.jsonl", skip_bad_lines=True)
    assert workload.num_skipped == 50_000 and len(workload.skipped) == 100
    assert len(workload.requests) == 1


def test_a_line_longer_than_the_limit_is_skipped_unread(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    trace.write_text(
        '{"prompt_tokens": 5, "output_tokens": 5}\n'
        + '{"prompt_tokens": 5, "output_tokens": 5, "note": "'
        + "y" * (4 * MAX_LINE_BYTES)
        + '"}\n{"prompt_tokens": 7, "output_tokens": 5}\n'
    )
    workload = load_workload(trace, skip_bad_lines=True)
    assert [r.prompt_tokens for r in workload.requests] == [5, 7]
    assert workload.skipped == (f"line 2: longer than {MAX_LINE_BYTES:,} bytes",)


def test_the_cli_replays_a_slice_of_a_big_trace_quickly(tmp_path: Path) -> None:
    trace = tmp_path / "big.jsonl"
    write_trace(trace, 8_000)
    start = time.perf_counter()
    args = ["simulate", "llama-3.2-1b", "-w", str(trace), "--gpu", "h100", "--json"]
    result = CliRunner().invoke(app, [*args, "--num-requests", "20"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["requests"] == 20
    assert time.perf_counter() - start < 20


@pytest.mark.slow
def test_a_100_mb_trace_streams(tmp_path: Path) -> None:
    # ~1.4 million requests of ~70 bytes: loaded whole, then only the first 1,000 of them.
    trace = tmp_path / "huge.jsonl"
    size = write_trace(trace, 1_400_000, pad="")
    assert size > 100_000_000
    peak = peak_bytes(lambda: load_workload(trace, num_requests=1_000))
    assert peak < 2_000_000, peak
    start = time.perf_counter()
    peak_all = peak_bytes(lambda: load_workload(trace))
    elapsed = time.perf_counter() - start
    assert peak_all < 2.5 * size, (peak_all, size)  # the requests, not the text as well
    print(f"100 MB trace: {size:,} B, peak {peak_all:,} B loading all, {elapsed:.1f} s")
