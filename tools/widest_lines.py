"""The widest output line of every command at 80 columns, piped, with NO_COLOR.

    python tools/widest_lines.py [--columns N] [--show]

Runs every example of README.md and docs/*.md (as tools/refresh_readme.py reads them) and the
extra cases below (notes, warnings, errors, every --emit kind), each as
``python -m planner.cli ...`` with stdout and stderr piped, and prints per command the widest
stdout line and the widest stderr line, ``Error:`` lines counted apart (an error is one line by
the exit-code contract, docs/exit-codes.md). ``--show`` prints each line over the width.
Files the examples write go to a scratch folder; the repository is not written to.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from refresh_readme import BLOCK, OUTPUT_FLAGS, files  # noqa: E402

SCRATCH = Path(tempfile.mkdtemp(prefix="kvplan-widest-"))
LOG = "tests/fixtures/logs/vllm-v1-llama8b-h100.log"
EXTRA = [
    "estimate meta-llama/Llama-3.1-8B-Instruct --gpu h100",
    "estimate llama-3.1-8b-instruct --gpu h100 --max-model-len 16384",
    "estimate llama-3.1-8b --gpu mi300x",
    "estimate llama-3.1-8b --gpu any --max-model-len 32768 --max-num-seqs 16",
    "estimate llama-3.1-8b --gpu h100 --emit k8s",
    "estimate llama-3.1-8b --gpu h100 --emit kserve",
    "estimate llama-3.1-8b --gpu h100 --emit llm-d",
    "estimate deepseek-v3 --gpu h200 --tp 8 --pp 2 --nodes 2 --gpus-per-node 8 --emit lws",
    "estimate deepseek-v3 --gpu h200 --tp 8 --gpus 8",
    "estimate llama-3.1-70b --gpu l4",
    "estimate llama-3.1-8b --gpu 24gb",
    "estimate acme/not-a-model --gpu h100",
    "estimate llama-3.1-8b --gpu h100 --tp 3",
    "check examples/plans.yaml",
    "check examples/plans.yaml --emit k8s --emit-dir out",
    f"diagnose {LOG} --gpu h100",
    "diagnose examples/vllm.log",
    "diagnose examples/metrics.prom",
    "simulate llama-3.1-8b --gpu a10g --workload examples/workloads/chat.yaml "
    "--block-size 8,16,32 --max-model-len 8192 --num-requests 200",
    "simulate llama-3.1-8b --gpu h100 -w examples/trace.jsonl",
    "models",
    "gpus",
    "schema",
    "verify qwen3-0.6b --device cpu --memory-budget 1048576GiB --max-model-len 256",
    "verify qwen3-0.6b --device cuda:x",
]


def examples() -> list[str]:
    found = []
    for path in files([]):
        for match in BLOCK.finditer(path.read_text(encoding="utf-8")):
            found.append(match.group(1)[len("$ kvplan ") :].replace("\\\n", " "))
    return found


def run(command: str, columns: int) -> tuple[str, str]:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    words = shlex.split(command)
    args = []
    for i, word in enumerate(words):
        written = SCRATCH / Path(word).name
        if i and (words[i - 1] in OUTPUT_FLAGS or word.endswith(".png")):
            word = str(written)
        elif not (ROOT / word).exists() and written.exists():
            word = str(written)
        args.append(word)
    done = subprocess.run(
        [sys.executable, "-m", "planner.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    return done.stdout.replace(f"{SCRATCH}/", ""), done.stderr.replace(f"{SCRATCH}/", "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--columns", type=int, default=80)
    parser.add_argument("--show", action="store_true")
    opts = parser.parse_args()
    widest: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)
    for command in [*examples(), *EXTRA]:
        quick = ("--hf-cache", "cuda:x", "1048576GiB")  # verify runs that probe nothing long
        if command.startswith("verify") and not any(word in command for word in quick):
            continue  # the torch probes take minutes on a CPU
        name = command.split()[0]
        out, err = run(command, opts.columns)
        errors = [x for x in err.splitlines() if x.startswith("Error:")]
        others = [x for x in err.splitlines() if not x.startswith("Error:")]
        for stream, lines in (("stdout", out.splitlines()), ("stderr", others), ("Error", errors)):
            for line in lines:
                if opts.show and len(line) > opts.columns:
                    print(f"{len(line):4} {stream} {command}\n     {line}")
                if len(line) > widest[name].get(stream, (0, ""))[0]:
                    widest[name][stream] = (len(line), command)
    print(f"{'command':10} {'stdout':>6} {'stderr':>6} {'Error:':>6}  (widest line, COLUMNS=80)")
    for name in sorted(widest):
        cells = [str(widest[name].get(s, (0, ""))[0]) for s in ("stdout", "stderr", "Error")]
        print(f"{name:10} {cells[0]:>6} {cells[1]:>6} {cells[2]:>6}")
        for stream, (width, command) in sorted(widest[name].items()):
            if width > opts.columns:
                print(f"  {stream} {width}: kvplan {command}")


if __name__ == "__main__":
    main()
