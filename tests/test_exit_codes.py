"""One exit-code table, honoured by every command (planner.cli.app.EXIT_CODES): 0 ok; 1 won't
start, a check failed, the model cannot be read; 2 a bad flag or an invalid file, -w included;
3 verify measured less (tests/test_cli_verify.py); 141 (SIGPIPE) or a quiet 0 when stdout is
closed early, as in `kvplan ... | head`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.cli.app import EXIT_CODES

ROOT = Path(__file__).resolve().parents[1]
LOG = str(ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log")
PLANS = str(ROOT / "examples/plans.yaml")
CHAT = str(ROOT / "examples/workloads/chat.yaml")
ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "80", "NO_COLOR": "1"}

# each command with arguments that succeed and print more than a line
COMMANDS = {
    "estimate": ["estimate", "llama-3.1-8b", "--gpu", "h100"],
    "estimate --json": ["estimate", "llama-3.1-8b", "--gpu", "h100", "--json"],
    "models": ["models"],
    "gpus": ["gpus", "--json"],
    "check": ["check", PLANS],
    "diagnose": ["diagnose", LOG],
    "simulate": ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", CHAT, "--num-requests", "20"],
    "verify": ["verify", "--help"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_closed_pipe_ends_quietly(name: str) -> None:
    """stdout closed before the command writes: no traceback, no `Error:`, and not exit 1
    (which would read as "won't start")."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner.cli", *COMMANDS[name]],
        cwd=ROOT,
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone, as `| head` is after its lines
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=300)
    assert code in (0, -signal.SIGPIPE) or (name == "check" and code == 1), (code, err)
    assert "Traceback" not in err and "BrokenPipe" not in err and "Error:" not in err


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["estimate", "llama-3.1-8b", "--gpu", "h100"], 0),
        (["estimate", "llama-3.1-70b", "--gpu", "l4"], 1),  # won't start
        (["estimate", "no-such-model-anywhere", "--offline"], 1),  # model unreadable
        (["estimate", "llama-3.1-8b", "--no-such-flag"], 2),
        (["estimate", "llama-3.1-8b", "--gpu", "h100", "-w", "missing.jsonl"], 2),
        (["estimate", "llama-3.1-8b", "--gpu", "h100", "-w", PLANS], 2),  # not a workload
        (["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", "missing.yaml"], 2),
        (["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", PLANS], 2),
        (["check", PLANS], 1),  # examples/plans.yaml has a failing deployment
        (["check", "missing.yaml"], 2),
        (["diagnose", LOG], 0),
        (["diagnose", "missing.log"], 2),
        (["models", "--no-such-flag"], 2),
        (["gpus"], 0),
        (["verify", "--plan", "missing.json"], 2),
    ],
)
def test_the_table(args: list[str], code: int) -> None:
    result = CliRunner().invoke(app, args, env=ENV)
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert code in EXIT_CODES
    if code:
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.stderr
