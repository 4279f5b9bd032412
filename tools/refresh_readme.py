"""Re-run the examples of README.md and docs/*.md and paste their current output.

    python tools/refresh_readme.py [--check] [FILE ...]

A fenced block whose first line is ``$ kvplan ...`` is an example. Each runs as
``python -m planner.cli ...`` from the repository root (COLUMNS=100, NO_COLOR=1,
HF_HUB_OFFLINE=1; files it writes, after ``-o``, ``--output``, ``--emit-dir``, ``--plot``,
``--save-trace``, ``--save-workload`` or ``--save-profile``, go to one scratch folder per run,
and a later example naming such a file by that name reads it from there: the repository is
never written to).

- A whole block (no ``...`` line) is replaced by the command's output.
- A curated block (with ``...`` lines eliding parts) is left as written, and checked: its
  other lines must appear in the output, in order.

Timings are masked: in ``kvplan verify`` output, measured durations (``12.3 ms``, ``1.02 s``)
compare as ``<time>``, so a faster machine does not make the docs out of date.

``kvplan verify`` examples run the torch probes (minutes on a CPU): they are run only with
``--slow``, and kept as written otherwise.

``--check`` writes nothing and exits 1 when any file is out of date or a curated block no longer
matches, naming each.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a command may go on over lines ending in a backslash, as a shell reads it
BLOCK = re.compile(r"```\n(\$ kvplan (?:[^\n]*\\\n)*[^\n]*)\n(.*?)```", re.S)
OUTPUT_FLAGS = (
    "-o",
    "--output",
    "--emit-dir",
    "--plot",
    "--save-trace",
    "--save-workload",
    "--save-profile",
)
SCRATCH = Path(tempfile.mkdtemp(prefix="kvplan-readme-"))
TIME = re.compile(r"\b\d[\d,]*(?:\.\d+)?\s?(?:ms|µs|s)\b")


def files(args: list[str]) -> list[Path]:
    named = [ROOT / a for a in args if not a.startswith("--")]
    return named or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def run(command: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    words = shlex.split(command[2:].replace("\\\n", " "))
    args = []
    for i, word in enumerate(words[1:]):
        previous = words[i]  # the word before this one
        written = SCRATCH / Path(word).name
        if previous in OUTPUT_FLAGS or word.endswith(".png"):
            word = str(written)
        elif not (ROOT / word).exists() and written.exists():
            word = str(written)  # a file an earlier example wrote
        args.append(word)
    proc = subprocess.run(
        [sys.executable, "-m", "planner.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    # the scratch folder is this tool's, not the example's: show the name as typed
    return (proc.stderr + proc.stdout).replace(f"{SCRATCH}/", "").rstrip() + "\n"


def masked(command: str, text: str) -> str:
    return TIME.sub("<time>", text) if command.startswith("$ kvplan verify") else text


def curated_mismatch(shown: list[str], actual: list[str]) -> str | None:
    """The first shown line (``...`` skipped) that is not found after the previous one in
    the output, or None when they all are, in order."""
    at = 0
    actual = [a.rstrip() for a in actual]
    for line in shown:
        if line.strip() == "...":
            continue
        try:
            at = actual.index(line.rstrip(), at) + 1
        except ValueError:
            return line
    return None


def refresh(path: Path, problems: list[str]) -> str:
    text = path.read_text()

    def one(match: re.Match[str]) -> str:
        command, body = match.group(1), match.group(2)
        if command.startswith("$ kvplan verify") and not SLOW:
            return match.group(0)
        actual = run(command)
        if any(line.strip() == "..." for line in body.splitlines()):
            bad = curated_mismatch(body.splitlines(), masked(command, actual).splitlines())
            if bad is not None:
                where = path.relative_to(ROOT)
                problems.append(f"{where}: `{command[2:]}` no longer prints: {bad}")
            return match.group(0)
        if masked(command, actual) == masked(command, body):
            return match.group(0)
        return f"```\n{command}\n{actual}```"

    return BLOCK.sub(one, text)


SLOW = "--slow" in sys.argv


def main(argv: list[str]) -> int:
    check = "--check" in argv
    problems: list[str] = []
    for path in files(argv):
        new = refresh(path, problems)
        if new != path.read_text():
            if check:
                problems.append(f"{path.relative_to(ROOT)}: out of date (tools/refresh_readme.py)")
            else:
                path.write_text(new)
    for problem in problems:
        print(problem, file=sys.stderr)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    return int(bool(problems))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
