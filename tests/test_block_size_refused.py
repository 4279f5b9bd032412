"""``simulate --block-size 8,16,32`` never stars a block size vLLM's attention
backends refuse. Each backend declares its kernel block sizes and accepts a multiple of one
(vLLM 0.33.0 ``vllm/v1/attention/backend.py:122-137`` ``supports_block_size``); the smallest
any GPU backend declares is 16 (``backends/flash_attn.py:357-367`` and ``triton_attn.py:
339-340``: ``[MultipleOf(16)]``; FlashInfer ``[16, 32, 64]``; ROCm ``[16, 32]``). A refused
run is still shown, as won't start, and never ranked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.kv_layout import refused_block_size
from planner.model.specs import Engine

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "80", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}


SIZES = [(8, True), (24, True), (16, False), (32, False), (48, False), (None, False)]


@pytest.mark.parametrize(("block_size", "refused"), SIZES)
def test_a_block_size_is_refused_unless_a_multiple_of_16(
    block_size: int | None, refused: bool
) -> None:
    # 8 % 16 = 8 and 24 % 16 = 8: no backend; 16, 32, 48 are multiples; None is vLLM's default
    assert (refused_block_size(Engine.VLLM, block_size) is not None) is refused
    assert refused_block_size(Engine.SGLANG, 8) is None  # SGLang's page size is its own


def simulate(*sizes: str) -> dict[str, Any]:
    # short chat requests: the three block sizes time alike (a tie), as in the issue
    args = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--block-size", ",".join(sizes)]
    args += ["--num-requests", "40", "--avg-prompt-tokens", "300", "--avg-output-tokens", "100"]
    result = runner.invoke(app, [*args, "--json"], env=ENV)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_the_refused_block_size_is_shown_and_never_starred() -> None:
    data = simulate("8", "16", "32")
    eight, sixteen, thirty_two = data["runs"]
    assert eight["refused"] == "vLLM's FlashAttention backend needs a multiple of 16"
    assert (eight["outcome"], eight["worst_case_running"]) == ("wont_start", 0)
    assert "refused" not in sixteen and "refused" not in thirty_two
    assert sixteen["outcome"] != "wont_start"
    assert data["best_label"] in ("block-size=16", "block-size=32")
    assert "not ranked: block-size=8: vLLM won't start" in data["best_reason"]
    assert "block-size=8 and" not in data["best_reason"]  # not among the tied either


def test_the_only_block_size_that_starts_is_best() -> None:
    data = simulate("8", "16")
    assert data["best"] == 1 and data["best_label"] == "block-size=16"
    assert data["best_reason"].startswith("block-size=16, the only one that starts")


def test_none_starts_none_is_best() -> None:
    data = simulate("8", "24")
    assert data["best"] is None and data["best_label"] is None
    assert data["best_reason"].startswith("no setting starts")


def test_the_table_marks_the_refused_column() -> None:
    args = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--block-size", "8,16,32"]
    args += ["--num-requests", "40", "--avg-prompt-tokens", "300", "--avg-output-tokens", "100"]
    out = runner.invoke(app, args, env=ENV).stdout
    header = next(line for line in out.splitlines() if "block-size" in line and "┃" in line)
    cells = [c.strip() for c in header.split("┃")[2:5]]
    assert cells[0] == "8 ✗" and "★" not in cells[0]
    assert any(c.endswith("★") for c in cells[1:])
    worst = next(line for line in out.splitlines() if "worst case" in line)
    assert worst.split("│")[2].strip() == "won't start"


def test_estimates_trade_off_table_says_which_size_is_refused() -> None:
    args = ["estimate", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192", "--details"]
    lines = runner.invoke(app, args, env=ENV).stdout.splitlines()
    rows = {line.split(":")[0].strip(): line for line in lines if line.startswith("  block ")}
    assert rows["block 8"].endswith("(refused: not a multiple of 16)")
    assert "refused" not in rows["block 16"] and "refused" not in rows["block 32"]
