"""Throughput of `kvplan check` (plans per second, one process) and `kvplan diagnose` log parsing.

    python benchmarks/check_throughput.py [--plans 10000] [--log-lines 500000]

The plans file mixes 6 catalog models, 6 GPUs, 4 context lengths and the three engines, with
requirements on every entry, so each deployment runs the full planner (vLLM rows: the same
``recommend.plan`` as ``kvplan estimate --gpu``). The log repeats the V1 fixture's runtime lines.
Prints wall-clock figures and the process's peak RSS; nothing here is asserted.

Issue 26: 10,000 deployments, 22.87 CPU-s (437 plans/s), 123 MiB before; 3.91 CPU-s (2,555
plans/s), 95 MiB after (docs/hardening.md has the runs).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner import check_file, parse_log  # noqa: E402

MODELS = ("llama-3.1-8b", "qwen3-8b", "qwen2.5-7b", "gemma-2-9b", "gpt-oss-20b", "qwen3-14b")
GPUS = ("h100", "l40s", "a100-80gb", "rtx-4090", "h200", "l4")
LENGTHS = (4096, 8192, 16384, 32768)
ENGINES = ("vllm", "vllm", "sglang", "trtllm")


def plans_yaml(count: int) -> str:
    """``count`` deployments cycling through the combinations, the requirements written once
    on the first and merged into the rest by a YAML anchor (as a plans file of thousands of
    entries would write them: 10,000 rows fit the 1 MiB limit of a plans file)."""
    combos = itertools.cycle(itertools.product(MODELS, GPUS, LENGTHS, ENGINES))
    rows = []
    for i, (model, gpu, length, engine) in zip(range(count), combos, strict=False):
        shared = (
            "&r {max_num_seqs: 16, min_concurrency: 2, min_kv_tokens: 50000, max_kv_usage: 0.9, "
            if i == 0
            else "{<<: *r, "
        )
        rows.append(
            f"  - {shared}name: d{i}, model: {model}, engine: {engine}, gpu: {gpu}, "
            f"max_model_len: {length}}}"
        )
    return "deployments:\n" + "\n".join(rows) + "\n"


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--log-lines", type=int, default=500_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plans.yaml"
        path.write_text(plans_yaml(args.plans))
        start, cpu = time.perf_counter(), time.process_time()
        report = check_file(path)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    counts = report.counts
    print(
        f"kvplan check: {len(report.results):,} deployments in {elapsed:.2f} s = "
        f"{len(report.results) / elapsed:,.0f} plans/s, CPU {cpu:.2f} s = "
        f"{len(report.results) / cpu:,.0f} plans/s "
        f"({counts['passed']} pass, {counts['failed']} fail, {counts['errors']} error); "
        f"peak RSS {_peak_rss_mib():,.0f} MiB"
    )
    fixture = ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log"
    lines = fixture.read_text().splitlines()
    runtime = [line for line in lines if "KV cache usage" in line or "POST" in line]
    body = lines + runtime * (args.log_lines // len(runtime))
    text = "\n".join(body)
    start = time.perf_counter()
    log = parse_log(text)
    elapsed = time.perf_counter() - start
    size = len(text.encode()) / (1 << 20)
    print(
        f"kvplan diagnose: parsed {len(body):,} lines ({size:.1f} MiB) in {elapsed:.2f} s = "
        f"{len(body) / elapsed:,.0f} lines/s; {len(log.kv_usage_pct):,} usage samples"
    )


if __name__ == "__main__":
    main()
