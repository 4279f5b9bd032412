"""Rewrite tests/golden/*.json from the current code (``python tools/refresh_golden.py``).

Run it only for a deliberate change of output, and explain the diff in the commit: the golden
files exist so that refactors can show they changed nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    from tests.golden_cases import CASES, VERIFY_CASES
    from tests.test_golden import run_case

    names = sys.argv[1:]
    for stem, argv, code in CASES + VERIFY_CASES:
        if names and stem not in names:
            continue
        out = run_case(argv, code)
        path = ROOT / "tests" / "golden" / f"{stem}.json"
        old = path.read_text() if path.exists() else None
        path.write_text(out)
        print(("unchanged " if old == out else "WROTE     ") + path.name)


if __name__ == "__main__":
    main()
