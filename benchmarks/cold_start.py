"""Cold-start time of `kvplan estimate <local config> --json` vs importing transformers' AutoConfig.

    python benchmarks/cold_start.py [--runs 5] [config.json]

Each run is a fresh process (no warm imports). Prints the median and all runs, in seconds.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "tests/fixtures/configs/meta-llama--Llama-3.1-8B/config.json"


def timed(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    kvplan = shutil.which("kvplan")
    estimate = ([kvplan] if kvplan else [sys.executable, "-m", "planner.cli"]) + [
        "estimate",
        args.config,
        "--json",
    ]
    cases = {
        "kvplan estimate <local config> --json": estimate,
        'python -c "from transformers import AutoConfig"': [
            sys.executable,
            "-c",
            "from transformers import AutoConfig",
        ],
        "kvplan --help": estimate[:-3] + ["--help"],
    }
    for label, cmd in cases.items():
        try:
            times = timed(cmd, args.runs)
        except subprocess.CalledProcessError:
            print(f"{label:50} failed (is it installed?)")
            continue
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(f"{label:50} median {statistics.median(times):.3f} s  ({runs})")


if __name__ == "__main__":
    main()
