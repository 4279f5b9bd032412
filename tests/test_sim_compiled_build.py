"""``python tools/build_fast.py`` builds the optional compiled engine, and the build prints what
pure Python prints: CI has a C compiler and mypyc (the dev extra) but never builds in its
checkout, so tests/test_sim_compiled.py would only skip there. Here the build runs in a copy
of the checkout (it writes its extensions beside their sources), the copy's Python imports the
compiled modules, and tests/test_sim_compiled.py runs in the copy: goldens and the extra
replays, pure against compiled, byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.simulate import fast

ROOT = Path(__file__).resolve().parents[1]
# what the copy needs: the library, the tests with their data and goldens, the build tool, and
# what the tests read beside them (pyproject's pytest settings, the README's and docs' examples)
COPIED = ("planner", "tests", "tools", "examples", "docs", "pyproject.toml", "README.md")


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


@pytest.mark.slow
def test_the_compiled_build_prints_what_pure_python_prints(tmp_path: Path) -> None:
    # the build needs a C compiler, mypyc (the dev extra's mypy) and setuptools (its
    # build_ext; not in every venv from Python 3.12)
    if _compiler() is None or any(
        importlib.util.find_spec(m) is None for m in ("mypyc", "setuptools")
    ):
        pytest.skip("no C compiler, mypyc or setuptools here: nothing to build")
    copy = tmp_path / "kvplan"
    copy.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", fast.STAMP.name)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=skip)
        else:
            shutil.copy2(src, copy / name)
    env = {k: v for k, v in os.environ.items() if k != fast.PURE_ENV}
    env["PYTHONPATH"] = str(copy)

    def run(*argv: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    built = run("tools/build_fast.py", timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    which = run(
        "-c", "import json; from planner.simulate import fast; "
        "print(json.dumps(sorted(fast.compiled_modules())))",
    )  # fmt: skip
    assert which.returncode == 0, which.stderr[-3000:]
    # the copy's Python runs every compiled module, not its source
    assert json.loads(which.stdout) == sorted(fast.COMPILED)
    # the one test that only runs pure Python (a patched constant) is left out
    tested = run(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_sim_compiled.py",
        "-k", "not more_admissions",
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert "passed" in tested.stdout and "skipped" not in tested.stdout, tested.stdout[-3000:]
