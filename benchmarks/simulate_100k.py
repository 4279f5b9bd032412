"""Speed of `kvplan simulate`'s scheduler: 100,000 requests (mean 1,000 prompt / 250 output
tokens, Poisson arrivals) replayed over Llama-3.1-8B's KV pool on one H100.

    python benchmarks/simulate_100k.py [--runs 5] [--requests 100000] [--rate 40] [--no-cli]

Times only :func:`planner.simulate.simulate` (workload generation and model loading are timed
once, separately) and prints the median of the runs, then the same for a quarter and a half of
the requests to show how cost grows with the request count. Then the whole command, as a user
runs it: ``kvplan simulate llama-3.1-8b --gpu h100 -w SPEC.yaml --json`` in a fresh process
(interpreter start, imports, generating the requests from the spec, the replay and the JSON),
median wall time of the runs. Issue 13's targets: <= 1 s in process, <= 2 s for the process.
Measured on the 2-core development machine (quiet, best of 3 medians), before and after the
sim branch: 1.06 -> 0.92 s in process, 1.88 -> 1.68 s for the process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import planner
from planner.simulate import (
    Arrival,
    BlockLayout,
    LogNormal,
    SimConfig,
    WorkloadSpec,
    estimate_params,
    generate,
    pool_for_gpu,
    roofline_for,
    simulate,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=40.0, help="arrivals per second")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--no-cli", action="store_true", help="skip timing the whole command")
    args = parser.parse_args()

    dep = planner.Deployment(
        model=planner.load_model(args.model),
        gpu=planner.get_gpu(args.gpu),
        settings=planner.ServeSettings(max_model_len=16384),
    )
    spec, gpu = dep.spec, dep.gpu
    est = planner.estimate(spec, dep.settings, gpu)
    assert est.vllm is not None
    params = estimate_params(spec)
    blocks, _ = pool_for_gpu(dep, est, planner.weights_per_rank(dep.model, tp=1, pp=1))
    layout, _ = BlockLayout.from_estimate(est)
    config = SimConfig(
        num_gpu_blocks=blocks,
        layout=layout,
        max_num_seqs=est.vllm.max_num_seqs,
        max_num_batched_tokens=est.vllm.max_num_batched_tokens,
        max_model_len=est.max_model_len,
        roofline=roofline_for(spec, est, gpu, params),
    )
    workload_spec = WorkloadSpec(
        name="bench",
        num_requests=args.requests,
        prompt_tokens=LogNormal(low=1, high=12000, mean=1000, sigma=0.8),
        output_tokens=LogNormal(low=1, high=4000, mean=250, sigma=0.8),
        arrival=Arrival(process="poisson", rate_per_s=args.rate),
        seed=0,
    )
    print(
        f"{args.model} on {args.gpu}: {blocks:,} blocks of {layout.block_size} tokens, "
        f"max_num_seqs {config.max_num_seqs}, max_num_batched_tokens "
        f"{config.max_num_batched_tokens}, Poisson {args.rate:g} req/s"
    )
    for n in (args.requests // 4, args.requests // 2, args.requests):
        start = time.perf_counter()
        workload = generate(workload_spec, num_requests=n)
        generated = time.perf_counter() - start
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = simulate(workload, config)
            times.append(time.perf_counter() - start)
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(
            f"{n:>7,} requests: simulate median {statistics.median(times):.3f} s ({runs}); "
            f"generate {generated:.3f} s; {result.steps:,} steps, {result.preemptions:,} "
            f"preemptions, mean prompt {workload.prompt_tokens / n:,.0f} / output "
            f"{workload.output_tokens / n:,.0f} tokens, KV max {result.usage_max:.0%}"
        )
    if not args.no_cli:
        time_cli(args)


SPEC = """name: bench
seed: 0
num_requests: {n}
arrival: {{process: poisson, rate_per_s: {rate}}}
prompt_tokens: {{dist: lognormal, mean: 1000, sigma: 0.8, min: 1, max: 12000}}
output_tokens: {{dist: lognormal, mean: 250, sigma: 0.8, min: 1, max: 4000}}
"""


def time_cli(args: argparse.Namespace) -> None:
    """Median wall time of ``kvplan simulate ... --json`` in a fresh process (what a user waits
    for), over the same traffic as a YAML spec."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1", KVPLAN_JOBS="1")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "bench.yaml"
        spec.write_text(SPEC.format(n=args.requests, rate=args.rate))
        argv = [sys.executable, "-m", "planner.cli", "simulate", args.model, "--gpu", args.gpu]
        argv += ["-w", str(spec), "--max-model-len", "16384", "--json"]
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"kvplan simulate failed: {done.stderr.strip()}")
    runs = ", ".join(f"{t:.3f}" for t in times)
    print(
        f"{args.requests:>7,} requests: `kvplan simulate --json` process median "
        f"{statistics.median(times):.3f} s ({runs})"
    )


if __name__ == "__main__":
    main()
