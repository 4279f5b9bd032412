"""Cold-start time of `kvplan estimate <local config> --json`, against vllm-wizard's `plan` and
importing transformers' AutoConfig.

    python benchmarks/cold_start.py [--runs 5] [--wizard PATH] [--kvplan PATH] [config.json]

Each run is a fresh process (no warm imports); one untimed run of each command first writes the
bytecode caches, so every timed run starts from the same disk state. Prints the median and all
runs, in seconds.

kvplan runs from this checkout (``python -m planner.cli``) unless ``--kvplan`` names an installed
``kvplan`` script. ``--wizard`` is the ``vllm-wizard`` executable of a separate virtualenv, only
for this comparison::

    python -m venv /tmp/wizard-venv && /tmp/wizard-venv/bin/pip install vllm-wizard==0.2.0
    python benchmarks/cold_start.py --wizard /tmp/wizard-venv/bin/vllm-wizard

Without it (or when the path does not exist) the comparison is skipped. vllm-wizard 0.2.0
refuses to plan without a GPU (``--gpu`` or nvidia-smi), so its row names one; the matching
kvplan row ``--gpu h100`` does the same work (weights, budget, KV capacity on one GPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "tests/fixtures/configs/meta-llama--Llama-3.1-8B/config.json"


def timed(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    subprocess.run(cmd, check=True, capture_output=True, env=env)  # bytecode caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default=str(DEFAULT_CONFIG))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--wizard", help="path of a vllm-wizard executable (0.2.0)")
    parser.add_argument("--kvplan", help="path of an installed kvplan script [default: checkout]")
    args = parser.parse_args()
    config = Path(args.config).resolve()
    kvplan = [args.kvplan] if args.kvplan else [sys.executable, "-m", "planner.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # pip byte-compiles what it installs; a checkout gets its caches from the untimed first run,
    # which PYTHONDONTWRITEBYTECODE (set on some machines) would forbid: kvplan alone would then
    # compile its sources on every run.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not args.kvplan:  # this checkout's planner, wherever the command is run from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    estimate = [*kvplan, "estimate", str(config), "--json"]
    cases: dict[str, list[str]] = {
        "kvplan estimate <local config> --json": estimate,
        "kvplan estimate <local config> --gpu h100 --json": [*estimate, "--gpu", "h100"],
    }
    if args.wizard and Path(args.wizard).exists():
        # the closest equivalent: a local model directory (vllm-wizard reads its config.json),
        # a GPU (it needs one), JSON out
        model_dir = config.parent if config.name == "config.json" else config
        cases["vllm-wizard plan --model <local dir> --gpu H100 --json"] = [
            args.wizard,
            "plan",
            "--model",
            str(model_dir),
            "--gpu",
            "H100",
            "--json",
        ]
    else:
        why = f"{args.wizard} not found" if args.wizard else "no --wizard PATH given"
        print(f"(vllm-wizard skipped: {why})")
    cases['python -c "from transformers import AutoConfig"'] = [
        sys.executable,
        "-c",
        "from transformers import AutoConfig",
    ]
    cases["kvplan --help"] = [*kvplan, "--help"]
    cases["python -c pass (interpreter start)"] = [sys.executable, "-c", "pass"]
    for label, cmd in cases.items():
        try:
            times = timed(cmd, args.runs, env)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"{label:55} failed ({exc})")
            continue
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(f"{label:55} median {statistics.median(times):.3f} s  ({runs})")


if __name__ == "__main__":
    main()
