"""kvplan verify without torch: every flag is checked first, then one line says how to get it.

These run whether or not torch is installed: ``sys.modules["torch"] = None`` makes
``import torch`` fail as if it were not (tests/test_probe_verify.py runs the probes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.errors import KvplanError, ProbeUnavailableError

ROOT = Path(__file__).resolve().parents[1]
NO_TORCH = "Error: kvplan verify needs torch: pip install 'kvplan[probe]'\n"
runner = CliRunner()


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import fails as if not installed


def test_the_error_is_a_usage_level_kvplan_error() -> None:
    assert issubclass(ProbeUnavailableError, KvplanError)
    assert ProbeUnavailableError.exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["qwen3-0.6b", "--memory-budget", "3GiB"],
        ["qwen3-0.6b", "--gpu"],
        ["qwen3-0.6b", "--device", "cuda:1", "--max-model-len", "4096", "--json"],
        ["qwen3-0.6b", "--hf-cache"],
        ["qwen3-0.6b", "--memory-budget", "3GiB", "--step-times", "steps.csv"],
        # the model is loaded after the torch check: no Hub lookup for a run that cannot happen
        ["acme/not-a-model", "--memory-budget", "3GiB"],
    ],
)
def test_without_torch_one_line_and_exit_2(no_torch: None, args: list[str]) -> None:
    result = runner.invoke(app, ["verify", *args])
    assert result.exit_code == 2
    assert result.stderr == NO_TORCH and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give MODEL or --plan FILE"),
        (["--hf-cache"], "--hf-cache needs MODEL"),
        (["qwen3-0.6b"], "--device cpu needs --memory-budget"),
        (["qwen3-0.6b", "--memory-budget", "6G"], "is ambiguous"),
        (["qwen3-0.6b", "--memory-budget", "3GiB", "--max-memory", "0"], "--max-memory must be"),
        (["qwen3-0.6b", "--gpu", "--weights-bytes", "lots"], "--weights-bytes 'lots' is not a"),
        (["qwen3-0.6b", "--memory-budget", "3GiB", "--tolerance", "150"], "[0, 100)"),
        (["qwen3-0.6b", "--gpu", "--gpu-memory-utilization", "1.5"], "(0, 1]"),
        (["qwen3-0.6b", "--memory-budget", "3GiB", "--decode-steps", "0"], "--decode-steps"),
        (["qwen3-0.6b", "--memory-budget", "3GiB", "--kv-cache-dtype", "fp7"], "fp7"),
        (["qwen3-0.6b", "--device", "tpu", "--memory-budget", "3GiB"], "--device 'tpu'"),
        (["qwen3-0.6b", "--device", "cuda:x"], "--device 'cuda:x': use cpu or cuda"),
        (["--plan", "/nonexistent/plan.json", "--memory-budget", "3GiB"], "no such file"),
        (
            ["qwen3-0.6b", "--memory-budget", "3GiB", "--step-times", "/nonexistent/s.csv"],
            "--step-times /nonexistent/s.csv: cannot write there: no such folder",
        ),
        (["qwen3-0.6b", "--memory-budget", "3GiB", "--step-contexts", "512"], "--step-times OUT"),
        (["qwen3-0.6b", "--hf-cache", "--step-times", "s.csv"], "two probes"),
    ],
)
def test_a_bad_flag_gives_its_own_error_not_the_torch_one(
    no_torch: None, args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["verify", *args])
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert "torch" not in result.stderr and result.stderr.count("\n") == 1


def test_a_bad_plan_file_gives_its_own_error(no_torch: None, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("{not json")
    result = runner.invoke(app, ["verify", "--plan", str(plan), "--memory-budget", "1GiB"])
    assert result.exit_code == 1
    assert "is not JSON (line 1, column 2" in result.stderr and "torch" not in result.stderr


def test_the_console_script_prints_no_traceback(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None; "
        "sys.argv = ['kvplan', 'verify', 'qwen3-0.6b', '--memory-budget', '3GiB']; "
        "from planner.cli import main; main()"
    )
    env = {k: v for k, v in os.environ.items() if k != "KVPLAN_DEBUG"}
    path = [str(ROOT), env.get("PYTHONPATH", "")]  # this checkout's planner, from any cwd
    env.update(PYTHONPATH=os.pathsep.join(filter(None, path)), HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", NO_TORCH)
