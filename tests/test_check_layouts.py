"""Every ``kvplan check`` entry gets the layout rules ``kvplan estimate`` applies
(:func:`planner.recommend.physical_refusal`): a TP wider than the GPU's node, heads or layers
that do not split, DCP and EP rules, a ``kv_cache_memory`` pool above the GPU. Such an entry
is *won't start* with the reason and the change that starts, in every format. Expected values
come from arithmetic in the tests (head, layer and GPU counts, byte sums) or cited vLLM lines."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.check import check_file
from planner.cli import app
from planner.gpus import get_gpu
from planner.units import GIB, MIB

runner = CliRunner()
ENV = {"NO_COLOR": "1", "COLUMNS": "80", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}

# (entry keys beyond model llama-3.1-8b on an h100 at 8,192 tokens, the rule, the fix).
# Llama-3.1-8B: 32 layers, 32 attention heads, 8 KV heads, no experts; an H100 node holds 8.
REFUSED = [
    # 16 = 8 x 2: TP inside the node, PP across two
    ("tp: 16", "node", "tp: 8, pp: 2"),
    # 3 divides neither 32 nor 8; the largest TP below it that divides both is 2
    ("tp: 3", "divisibility", "tp: 2"),
    # 64 stages for 32 layers
    ("pp: 64", "divisibility", "pp: 32"),
    # vLLM: "Number of experts in the model must be greater than 0 when expert parallelism
    # is enabled"
    ("enable_expert_parallel: true", "divisibility", "enable_expert_parallel: false"),
    # vLLM 0.33 vllm/config/model.py:1580: DCP on GQA needs tp (2) above the KV heads (8);
    # tp 8 x 2 = 16 would, but that is wider than the node, so only dcp 1 is offered
    ("{tp: 2, dcp: 2}", "divisibility", "dcp: 1"),
]


def plans(tmp_path: Path, *entries: str, engine: str = "vllm") -> Path:
    lines = ["deployments:"]
    for i, keys in enumerate(entries):
        extra = keys.strip("{}").split(", ")
        lines += [f"  - name: d{i}", "    model: llama-3.1-8b", "    gpu: h100"]
        lines += [f"    engine: {engine}", "    max_model_len: 8192"]
        lines += [f"    {k}" for k in extra]
    path = tmp_path / "plans.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def estimate_json(*args: str) -> dict[str, Any]:
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "h100", *args, "--json"], env=ENV
    )
    assert result.exit_code == 1, result.stdout
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(("keys", "rule", "fix"), REFUSED)
def test_a_layout_no_machine_starts_is_wont_start_in_check(
    tmp_path: Path, keys: str, rule: str, fix: str
) -> None:
    (r,) = check_file(plans(tmp_path, keys)).results
    assert (r.status, r.outcome, r.worst_case_running) == ("fail", "wont_start", 0)
    assert r.limiting == rule and r.fix == fix
    (check,) = r.checks
    assert (check.unit, check.passed) == ("rule", False)
    assert r.figures is None  # nothing is planned for a layout that cannot start


@pytest.mark.parametrize(("keys", "rule", "fix"), REFUSED)
def test_check_and_estimate_refuse_with_the_same_words(
    tmp_path: Path, keys: str, rule: str, fix: str
) -> None:
    # one shared rule set: the reason check gives is the one estimate gives
    flags: list[str] = []
    for pair in keys.strip("{}").split(", "):
        key, value = pair.split(": ")
        flag = {"tp": "--tp", "pp": "--pp", "dcp": "--dcp"}.get(key)
        flags += [flag, value] if flag else ["--enable-expert-parallel"]
    data = estimate_json(*flags, "--max-model-len", "8192")
    (r,) = check_file(plans(tmp_path, keys)).results
    assert data["wont_start_check"] == rule
    assert r.outcome_reason == data["outcome_reason"]


def test_other_engines_get_the_layout_rules_too(tmp_path: Path) -> None:
    (r,) = check_file(plans(tmp_path, "tp: 16", engine="sglang")).results
    assert (r.outcome, r.limiting, r.fix) == ("wont_start", "node", "tp: 8, pp: 2")


def test_kv_cache_memory_above_the_gpu_wont_start_in_check(tmp_path: Path) -> None:
    (r,) = check_file(plans(tmp_path, "kv_cache_memory: 100GiB")).results
    assert (r.status, r.outcome, r.limiting) == ("fail", "wont_start", "kv_cache_memory")
    (check,) = r.checks
    total = get_gpu("h100").memory_bytes  # 79.18 GiB
    # the pool as given, 100 GiB, alone is more than the GPU; weights and non-torch add to it
    assert check.required == total and check.actual > 100 * GIB > total
    assert check.margin == pytest.approx(total / check.actual - 1)
    assert r.fix is not None and r.fix.startswith("kv_cache_memory: ") and r.fix.endswith("MiB")
    fit = int(r.fix.removeprefix("kv_cache_memory: ").removesuffix("MiB")) * MIB
    # the fix: the pool vLLM's own profile leaves, which starts
    (again,) = check_file(plans(tmp_path, f"kv_cache_memory: {fit // MIB}MiB")).results
    assert again.outcome != "wont_start"
    assert again.figures is not None and again.figures.available_kv_bytes == fit


def test_wont_start_entries_in_every_format(tmp_path: Path) -> None:
    path = plans(tmp_path, "tp: 16", "max_num_seqs: 8")
    reason = "TP 16 is wider than a h100 node (8 GPUs)"
    out = runner.invoke(app, ["check", str(path)], env=ENV)
    assert out.exit_code == 1
    assert "won't start" in out.stdout and "fix: tp: 8, pp: 2" in out.stdout
    assert reason in " ".join(out.stdout.split())
    data = json.loads(runner.invoke(app, ["check", str(path), "-f", "json"], env=ENV).stdout)
    first, second = data["deployments"]
    assert (first["outcome"], first["status"], first["fix"]) == (
        "wont_start",
        "fail",
        "tp: 8, pp: 2",
    )
    assert first["outcome_reason"].startswith(reason)
    assert first["checks"] == [
        {"name": "node", "resource": "a layout the engine starts", "unit": "rule",
         "required": 1, "actual": 0, "passed": False, "margin": -1.0}
    ]  # fmt: skip
    assert second["outcome"] != "wont_start"
    assert data["counts"]["wont_start"] == 1
    md = runner.invoke(app, ["check", str(path), "-f", "markdown"], env=ENV).stdout
    row = next(line for line in md.splitlines() if "`d0`" in line)
    assert "won't start" in row and reason in row
    assert "- **d0** — fix: tp: 8, pp: 2" in md
    junit = ET.fromstring(runner.invoke(app, ["check", str(path), "-f", "junit"], env=ENV).stdout)
    failure = junit.find(".//testcase[@name='d0']/failure")
    assert failure is not None and reason in failure.get("message", "")
    assert failure.text is not None and failure.text.count(reason) == 1  # said once
    assert junit.find(".//testcase[@name='d1']/failure") is None
