"""Re-run the README's complete example commands and paste their current output.

    python tools/refresh_readme.py [--check]

A fenced block whose first line is ``$ kvplan ...`` and that has no ``...`` elision line is
regenerated (COLUMNS=100, NO_COLOR=1). Curated blocks with ``...`` are left alone.
``--check`` exits 1 when the README is out of date instead of writing it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```\n(\$ kvplan [^\n]*)\n(.*?)```", re.S)


def run(command: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    args = shlex.split(command[2:])
    with tempfile.TemporaryDirectory() as tmp:
        # output files (--plot, -o) land in a scratch dir; relative inputs stay in the repo
        args = [str(Path(tmp) / a) if a.endswith(".png") else a for a in args]
        proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    return (proc.stderr + proc.stdout).rstrip() + "\n"


def main() -> int:
    readme = ROOT / "README.md"
    text = readme.read_text()

    def refresh(match: re.Match[str]) -> str:
        command, body = match.group(1), match.group(2)
        if any(line.strip() == "..." for line in body.splitlines()):
            return match.group(0)
        return f"```\n{command}\n{run(command)}```"

    new = BLOCK.sub(refresh, text)
    if "--check" in sys.argv:
        return int(new != text)
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
