"""Every command's ``--json`` output matches tests/golden/ byte for byte.

The golden files were recorded before the Deployment redesign; a change to one is a deliberate
fix, explained in its commit (``python tools/refresh_golden.py NAME`` rewrites it).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.golden_cases import CASES, VERIFY_CASES

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

_ENV = {
    "HF_HUB_OFFLINE": "1",
    "NO_COLOR": "1",
    "COLUMNS": "80",
    "HF_TOKEN": None,
    "KVPLAN_DEBUG": None,
    "CUDA_VISIBLE_DEVICES": "",
}


def run_case(argv: list[str], code: int) -> str:
    """Run ``kvplan argv`` (plus ``--json``) from the repository root; return its stdout, and
    its stderr after a ``// stderr`` line when there is any."""
    from planner.cli import app

    if argv[0] in ("estimate", "simulate", "models", "gpus", "diagnose") and "--json" not in argv:
        argv = [*argv, "--json"]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, argv, env=_ENV)
    finally:
        os.chdir(cwd)
    assert result.exit_code == code, (argv, result.exit_code, result.stderr, result.exception)
    # wall-clock timings are the one field that differs between runs
    out = re.sub(r'("timings_s": \{)[^}]*\}', r"\1 elided }", result.stdout)
    return out + (f"// stderr\n{result.stderr}" if result.stderr else "")


@pytest.mark.parametrize(("stem", "argv", "code"), CASES, ids=[c[0] for c in CASES])
def test_golden(stem: str, argv: list[str], code: int) -> None:
    assert run_case(argv, code) == (GOLDEN / f"{stem}.json").read_text()


@pytest.mark.slow  # the torch probes on a CPU: ~70 s alone
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
@pytest.mark.parametrize(("stem", "argv", "code"), VERIFY_CASES, ids=[c[0] for c in VERIFY_CASES])
def test_golden_verify(stem: str, argv: list[str], code: int) -> None:
    assert run_case(argv, code) == (GOLDEN / f"{stem}.json").read_text()
