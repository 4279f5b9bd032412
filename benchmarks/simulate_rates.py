"""The whole `kvplan simulate --json` process on a million requests, at several arrival rates.

    python benchmarks/simulate_rates.py [--requests 1000000] [--rates 1,20,40,100]
        [--trace DIR] [--root CHECKOUT] [--repeat 1]

For each rate, in a fresh process as a user runs it (interpreter start, imports, the model,
the requests, the replay, the JSON on a pipe)::

    kvplan simulate qwen2.5-7b --gpu h100 --avg-prompt-tokens 735 --avg-output-tokens 200 \
        --request-rate RATE --num-requests 1000000 --json

(lognormal lengths around 735 prompt / 200 output tokens, Poisson arrivals: issue 24's
shape), or with ``--trace DIR`` the same shape written to ``DIR/rate-RATE.jsonl`` first (not
timed) and replayed with ``-w``. Prints per rate the wall seconds, the CPU seconds (user +
system: what the process itself cost, steadier than wall time on a shared machine), the peak
resident memory (``os.wait4``'s ``ru_maxrss`` of that process), the steps simulated, and the
first 12 hex digits of the SHA-256 of the JSON printed, so two checkouts (``--root``) can be
shown to print the same result byte for byte. Issue 24's target: <= 5 s whole process at any
rate from 1 to 100 requests/s.

Measured on the 2-core development machine, shared with other jobs (so wall time swings;
CPU s is the steadier figure), best of 2 runs interleaved before / after, 1M requests, the
--avg flags; before = main at a71f4fe, after = branch i24b at 21a7625 (CPU s, wall s, peak RSS
MiB; the JSON hash is the same before and after at every rate):

    rate    CPU s          wall s          peak RSS MiB   steps         sha256
    1/s     76.6 -> 43.6   143.4 -> 77.8   292 -> 158     108,848,488   b61964bff9be
    20/s    63.1 -> 42.2    80.1 -> 55.7   268 -> 147       3,996,454   88fa1593d1c6
    40/s    23.1 -> 19.5    26.9 -> 24.9   248 -> 146         199,533   06e750706c73
    100/s   21.8 -> 17.3    28.4 -> 22.5   240 -> 146         199,111   b0a1dc81bafa

The 5 s target is not met. Decode stretches were already advanced in one jump (every decoding
request's tokens, blocks and the closed-form sum of the stretch's step times); what is left
is a cost per event, and a replay has at least three per request (its admission step, its
finish, the release of its blocks a step later under async scheduling), each a few float
sums that must stay in the same order for the results to stay byte-identical. CPython
spends 10-40 us a request on them (light load cuts more stretches: at 1/s, 2.4 stretches and
1.25 single steps a request), and drawing the requests' three random numbers each (Python's
Mersenne Twister, as the goldens were drawn) takes ~3 s of the 1M alone. Within 5 s needs
the engine compiled (or vectorized random draws, which change every generated workload).
Results unchanged: the simulate tests and goldens, the per-token reference
(tests/sim_reference.py), and benchmarks/vllm_scheduler_diff.py against vLLM 0.33.0's own
Scheduler and AsyncScheduler at 21a7625 + this note: all 12 traces equal (peak blocks,
preemptions, steps, mean running, every finish step).
With --trace (JSONL, already read into columns before this branch) at 40/s: 109 -> 110 MiB,
15.6 s CPU before on a quiet machine, 18.3 s after under 4x contention (not comparable).

Then the speed branch (issue 24 item 6 again), same command, this 2-core machine shared with
other sessions' jobs (load 1-3: wall time is CPU time plus waiting), before = main at
b353f4b, after = speed at 002fa85, best of 3 (before: of 4-5 runs), CPU s / wall s / peak
RSS MiB; the JSON hash is the same before and after at every rate:

    rate    CPU s          wall s         peak RSS MiB   steps         sha256
    1/s     68.8 -> 52.9   69.1 -> 53.5   177 -> 196     108,848,488   b61964bff9be
    20/s    51.2 -> 43.6   51.5 -> 43.9   155 -> 176       3,996,454   88fa1593d1c6
    100/s   24.3 -> 20.6   24.4 -> 20.9   148 -> 174         199,111   b0a1dc81bafa

(this machine is ~1.5x slower than the one above: 1/s took 43.6 s CPU there at i24b.) Where
the time went before, 1M requests (cProfile and phase timings): the engine's events (~85 %;
at 1/s 2.4 stretches, 1.25 single steps and 2 event passes a request, each stretch 1.2
step_s and 1.3 decode_s calls to find the steps before the next arrival), the lognormal
lengths (2 x 1M draws, ~4 s), the latency percentiles (3 x 1M sorted in runs, ~0.8 s a
column), imports (~0.6 s, most of it typer 0.29 building a pydantic TypeAdapter per option),
JSON 0.2 s. What changed, results byte-identical: the step-time model's ``step_s`` /
``decode_s`` are closures over its terms (``StepModel.timers``: the same float operations in
the same order, ~3x cheaper a call); a one-step stretch (most often the release of a
finished request's blocks under async scheduling) skips the search for the next arrival,
which always says one step; the release is inlined in the event pass; the API server's
latency is set where requests are made (a generator fewer); with numpy installed (optional,
``pip install kvplan[fast]``) the lognormal lengths are drawn from numpy's MT19937 started
from the Random's state (the same numbers, ~2.5x faster) and the latency columns sorted in
place by numpy (~0.1 s a column). Peak RSS grows ~20 MiB: numpy itself.

The 5 s target is still not met, and CPython cannot meet it here: 1M requests at 100/s spend
~17 s in the engine's per-request events (an admission, a prefill's completion, a finish, a
release, the arrival: ~150 Python lines a request at ~0.1 us a line on this machine), and at
1/s every arrival and finish also cuts a decode stretch whose duration is a closed-form float
sum that must be cut at the same step for the floats to stay the same. Within 5 s needs the
event loop compiled (mypyc, Cython or C over the same arithmetic); interpreter start and
imports alone are ~1.2 s CPU here (`--num-requests 100`).

Then the compiled engine (issue 24 item 6, the speed branch: ``python tools/build_fast.py``,
mypyc over planner/simulate/engine.py, clock.py and roofline.py; clock.py and roofline.py
unchanged, engine.py's dataclasses kept plain classes and its event keys made one machine
word, see below). Before = pure Python (``KVPLAN_PURE_PYTHON=1 python
benchmarks/simulate_rates.py``, what every install runs) at 7710974, after = compiled at
331ae2b; one run each on this 2-core machine, quieter this time (load 1.5-2.7: the figures
above were taken under more load, so they are not comparable with these); the JSON hash is
the same at every rate in all three runs (pure at 7710974, compiled there and at 331ae2b):

    rate    CPU s          wall s         peak RSS MiB   steps         sha256
    1/s     25.0 -> 7.0    25.6 -> 7.2    196 -> 205     107,624,647   4b6dcd307a9f
    20/s    13.2 -> 5.1    13.1 -> 5.3    174 -> 175       1,450,823   78f515515a8b
    40/s     8.5 -> 3.9     8.5 -> 4.2    174 -> 174         199,143   d16e6ad3d7fd
    100/s    8.7 -> 3.9     8.6 -> 4.1    174 -> 174         199,101   aa4d981ba1a1

(The steps and hashes differ from those above: main's step-time model changed in between.)
Compiled at 7710974 (the engine's sources as on main) it was 8.7 / 5.4 / 3.9 / 3.8 s CPU; the
rest came from a5a6f8c: an event was ``step << 42 | seq << 2 | kind``, past step 2**20 an
int of several words, boxed at every shift, mask and heap comparison once compiled; now
``step << 32`` with admission numbers below 2**30 (more raise), one word up to step 2**30,
and run() calls its methods directly rather than through bound methods kept in locals.

Within 5 s from 40/s up; not at 20/s (5.1 s) or 1/s (7.0 s). Where the 1/s time goes now (1M,
perf and cProfile): the compiled engine ~5 s, the workload's draws ~1.2 s (the Poisson gaps
are Python's ``expovariate``, the lognormal lengths numpy's MT19937 with ``math``'s log and
exp per value), start-up and imports ~0.4 s, the result ~0.2 s. In the engine the time is
CPython's object machinery more than its own code: the step-time closures called through
Python's call protocol with boxed arguments (~10 calls a request), heapq on boxed ints, the
timeline and latency arrays' appends (array.append parses each float), dict updates
(running, zombies, the decoders' buckets) and the allocator. A further cut needs those data
structures typed for C (a native event heap, native arrays) or the step-time model called
as a native function, changes of the engine's and the clock's code rather than compiling it.

Then the speed2 branch (issue 24 item 6, second round): those changes. Before = main at
1022cc6, after = speed2 at 2c5e188, both compiled (``python tools/build_fast.py`` in each
checkout), one run each on this 2-core machine (load ~1), rates 5 and 10 added (the slowest
now); the JSON hash is the same before and after at every rate, and the same again in pure
Python at 2c5e188 (``KVPLAN_PURE_PYTHON=1``):

    rate    CPU s          wall s         peak RSS MiB   steps         sha256
    1/s     6.98 -> 3.95   6.89 -> 3.96   195 -> 197     107,625,611   aec6275ba09c
    5/s     7.23 -> 4.49   7.13 -> 4.50   194 -> 196      24,595,871   43df66a363f6
    10/s    7.12 -> 3.88   7.02 -> 3.88   179 -> 181       9,479,319   c2f6e29adbaf
    20/s    4.99 -> 3.41   4.89 -> 3.41   174 -> 175       1,450,824   a8ff966a9069
    40/s    4.11 -> 3.10   4.01 -> 3.10   174 -> 175         199,145   fe38b04e6555
    100/s   4.02 -> 3.24   3.92 -> 3.25   174 -> 174         199,110   b2dde97faf93

(The hashes differ from those above: main gained the API server's per-token term since.)
Pure Python, same runs: 1/s 25.29 -> 24.37 s CPU, 20/s 13.46 -> 13.52 s (unchanged within
noise); 5/s 24.99, 10/s 22.58, 40/s 8.24, 100/s 8.12 s at 2c5e188. Within 5 s at every rate.
What changed (profiles of 200k requests, perf on the compiled engine, cProfile on pure; the
engine's run alone, compiled, 1/s 1.00 -> 0.60 s, 20/s 0.67 -> 0.49 s):

- the step times: compiled, ``roofline.LineTimer``'s methods (typed fields, C doubles in and
  out) instead of ``StepModel.timers()``' closures, called through Python's protocol with
  boxed arguments; its products of whole numbers are products of doubles, exact below 2**53
  (above, the ints' way): compiled, ``flops_per_token x tokens`` (a factor past 2**30) went
  through Python's big ints at every call;
- the timeline's points go to lists and into the array columns 16,384 at a time (an array's
  append parses its argument and reallocates every 1/16 of growth): 16 % of the engine at 1/s;
- ``engine.COMPILED`` (its functions are native): a C loop over the decoders' block weights
  where interpreted code slices and ``sum()``s; bound methods no longer made into locals at
  every ``_single_step``; admissions numbered by an int; the inter-token latency bins a native
  ``ItlBin``; ``//`` and ``%`` for ``divmod``'s tuple; ``heappush`` / ``heappop`` imported;
- the workload (1M, 0.60 -> 0.43 s): the bulk lognormal draws take numpy's ``log`` / ``exp``
  where they decide as libm's would (libm's within 1e-12 of an edge: the same numbers), the
  outputs cut to ``max_model_len`` only where they pass it, the Random's final state from the
  last chunk's, not every word drawn again (the Poisson gaps stay Python's ``expovariate``:
  their floats are the arrivals, and numpy's ``log`` is not always libm's);
- the result: the timeline's peaks and the most blocks seen by numpy over the same ints;
- ``simulate`` sets ``OPENBLAS_NUM_THREADS=1`` (unless set): numpy's idle BLAS threads spun
  ~0.1 s of CPU a run, and a replay does no linear algebra.

Where the 1/s time goes now (1M, ~4 s): the compiled engine ~2.9 s (dict look-ups of the
running / zombie requests, heapq on boxed event keys, the free queue's ``[count, chain]``
lists, the latency arrays' appends), the workload ~0.45 s (the Poisson gaps ~0.17 s), start-up
and imports ~0.4 s, the result ~0.1 s, the JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT_MEAN, OUTPUT_MEAN = 735, 200


def write_trace(path: Path, n: int, rate: float) -> None:
    """``n`` requests, lognormal prompt (mean 735, sigma 1.0) / output (mean 200, sigma 0.8)
    as ``--avg-prompt-tokens``'s lognormal dataset draws them, Poisson arrivals at ``rate``."""
    rng = random.Random(0)
    mu_p = math.log(PROMPT_MEAN) - 1.0 / 2
    mu_o = math.log(OUTPUT_MEAN) - 0.8 * 0.8 / 2
    t = 0.0
    with path.open("w") as f:
        for _ in range(n):
            t += rng.expovariate(rate)
            p = min(32767, max(1, round(rng.lognormvariate(mu_p, 1.0))))
            o = min(16384, max(1, round(rng.lognormvariate(mu_o, 0.8))))
            f.write(json.dumps({"prompt_tokens": p, "output_tokens": o, "arrival_s": t}) + "\n")


def run_once(root: Path, argv: list[str]) -> dict[str, float | int | str]:
    """One whole process: wall and CPU seconds, peak RSS, steps, and a hash of its JSON."""
    env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1", NO_COLOR="1")
    cmd = [sys.executable, "-c", "from planner.cli import main; main()", *argv]
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            sys.exit(f"{' '.join(argv)}: exit {proc.returncode}")
        out.seek(0)
        text = out.read()
    report = json.loads(text)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "steps": report["runs"][0]["result"]["steps"],
        "sha": hashlib.sha256(text).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--rates", default="1,20,40,100", help="requests per second, a list")
    parser.add_argument("--trace", help="write JSONL traces here (reused) and replay them (-w)")
    parser.add_argument("--root", default=str(ROOT), help="the kvplan checkout to time")
    parser.add_argument("--repeat", type=int, default=1, help="runs per rate (best is shown)")
    args = parser.parse_args()
    root = Path(args.root).resolve()
    print(f"{root}: {args.requests:,} requests, qwen2.5-7b on an H100")
    print(f"{'rate':>6}  {'wall s':>7}  {'CPU s':>7}  {'RSS MiB':>7}  {'steps':>10}  sha256")
    for rate in (float(r) for r in args.rates.split(",")):
        argv = ["simulate", "qwen2.5-7b", "--gpu", "h100", "--json"]
        if args.trace:
            trace = Path(args.trace) / f"rate-{rate:g}-{args.requests}.jsonl"
            if not trace.exists():
                trace.parent.mkdir(parents=True, exist_ok=True)
                write_trace(trace, args.requests, rate)
            argv += ["-w", str(trace)]
        else:
            argv += [
                "--avg-prompt-tokens",
                str(PROMPT_MEAN),
                "--avg-output-tokens",
                str(OUTPUT_MEAN),
                "--request-rate",
                f"{rate:g}",
                "--num-requests",
                str(args.requests),
            ]
        runs = [run_once(root, argv) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: float(r["cpu_s"]))
        print(
            f"{rate:>5g}/s  {best['wall_s']:>7.2f}  {best['cpu_s']:>7.2f}  "
            f"{best['rss_mib']:>7,.0f}  {best['steps']:>10,}  {best['sha']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
