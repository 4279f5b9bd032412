"""kvplan check with a workload: the plans file names a trace or spec, and the requirements
max_preemptions, max_kv_usage_p90, max_ttft_p90_s and min_output_tokens_per_s are checked by
replaying it on the entry's deployment. Expected figures are reasoned in the tests from the
pool's blocks (read from the planner) and the workload's lengths."""

# ruff: noqa: E501  (expected messages stay on one line each, as the user reads them)

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.check import check_file
from planner.cli import app
from planner.gpus import resolve_gpu
from tests.helpers import plan_for

runner = CliRunner()
GIB = 1 << 30
BLOCK = 16  # vLLM's default block size, tokens
MODEL = "qwen3-0.6b"
OUTPUT = 160  # output tokens per request: 10 blocks
# an L4's roofline, a 4 GiB total: a pool of a few hundred blocks; gmu 0.8 so that the
# request leaves vLLM's CUDA context room (at 0.92, 4 GiB less the context is under it)
SMALL = "gpu: l4, gpu_memory: 4GiB, gpu_memory_utilization: 0.8"


def usable_blocks(gpu: str, memory: int | None = None) -> int:
    """The blocks vLLM hands out on that GPU (the pool less its null block), from the planner."""
    extra = {"gpu_memory_utilization": 0.8} if memory else {}
    p = plan_for(MODEL, resolve_gpu(gpu, memory), max_model_len=2048, **extra)
    return p.vllm.num_gpu_blocks - 1


def two_requests(tmp_path: Path, prompt_blocks: int, name: str = "two.jsonl") -> Path:
    """Two requests arriving together, each ``prompt_blocks`` whole blocks of prompt and
    OUTPUT tokens of output."""
    line = json.dumps({"prompt_tokens": prompt_blocks * BLOCK, "output_tokens": OUTPUT})
    path = tmp_path / name
    path.write_text(f"{line}\n{line}\n")
    return path


def write(tmp_path: Path, text: str, name: str = "plans.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_pool_too_small_must_preempt_and_one_that_holds_both_cannot(tmp_path: Path) -> None:
    small = usable_blocks("l4", 4 * GIB)
    big = usable_blocks("h100")
    # Prompts of p = small // 2 - 1 blocks: both prompts (2p <= small - 2 blocks) fit the small
    # pool together, so vLLM admits both; at full length each holds p + 10 blocks, and
    # 2p + 20 >= small - 3 + 20 > small, so they run out of blocks while decoding and one is
    # preempted. One alone (p + 10 <= small) fits, so none is rejected.
    p = small // 2 - 1
    assert 2 * p <= small < 2 * (p + 10) and p + 10 <= small
    # The H100's pool holds both at full length at once: no request ever waits for a block.
    assert 2 * (p + 10) <= big
    two_requests(tmp_path, p)
    length = (p + 10) * BLOCK  # max_model_len: exactly one full request
    text = (
        "deployments:\n"
        f"  - {{name: small, model: {MODEL}, {SMALL}, max_model_len: {length}, workload: two.jsonl, max_preemptions: 0}}\n"
        f"  - {{name: big, model: {MODEL}, gpu: h100, max_model_len: {length}, workload: two.jsonl, max_preemptions: 0}}\n"
    )
    result = runner.invoke(app, ["check", str(write(tmp_path, text)), "-f", "json"])
    assert result.exit_code == 1, result.stderr
    rows = {d["name"]: d for d in json.loads(result.stdout)["deployments"]}
    tight, roomy = rows["small"], rows["big"]
    # the replay's pool is the check's own
    assert tight["figures"]["num_gpu_blocks"] - 1 == small
    assert roomy["figures"]["num_gpu_blocks"] - 1 == big
    for row in (tight, roomy):
        sim = row["simulated"]
        assert sim["workload"] == str(tmp_path / "two.jsonl")
        assert (sim["requests"], sim["completed"], sim["rejected_too_long"]) == (2, 2, 0)
        assert sim["max_running"] == 2  # both were admitted together
        # 2 x 160 output tokens over the replay
        assert sim["output_tokens_per_s"] * sim["duration_s"] == pytest.approx(2 * OUTPUT, rel=1e-3)
    assert tight["simulated"]["preemptions"] >= 1
    assert (tight["status"], tight["limiting"]) == ("fail", "max_preemptions")
    assert roomy["simulated"]["preemptions"] == 0 and roomy["status"] == "pass"
    # the peak is at most both requests at full length over the pool (the figure has 4
    # decimals)
    assert roomy["simulated"]["usage_max"] <= round(2 * (p + 10) / big, 4) + 0.00005
    # the failing entry's fix names the replay to compare settings with
    assert "kvplan simulate Qwen/Qwen3-0.6B --gpu l4 -w " in tight["fix"]


def test_a_workload_requirement_is_met_or_not_by_the_replays_figure(tmp_path: Path) -> None:
    # Whatever the replay measures, a bound above it passes and one below fails.
    two_requests(tmp_path, 8)  # 128-token prompts
    base = f"model: {MODEL}, gpu: h100, max_model_len: 2048, workload: two.jsonl"
    first = check_file(write(tmp_path, f"deployments:\n  - {{name: a, {base}}}\n")).results[0]
    sim = first.simulated
    assert sim is not None and first.checks[-1].name == "max_model_len"  # no workload check
    cases = {
        "max_ttft_p90_s": sim.ttft_p90_s,
        "max_kv_usage_p90": sim.usage_p90,
        "min_output_tokens_per_s": sim.output_tokens_per_s,
    }
    for key, measured in cases.items():
        looser, tighter = (measured * 2, measured / 2)
        if key.startswith("min_"):
            looser, tighter = tighter, looser
        for bound, passes in ((looser, True), (tighter, False)):
            text = f"deployments:\n  - {{name: a, {base}, {key}: {bound!r}}}\n"
            row = check_file(write(tmp_path, text)).results[0]
            [check] = [c for c in row.checks if c.name == key]
            assert (check.passed, row.status) == (passes, "pass" if passes else "fail"), key
            assert check.actual == measured


def test_a_spec_works_like_a_trace_and_the_top_level_workload_serves_every_entry(
    tmp_path: Path,
) -> None:
    (tmp_path / "burst.yaml").write_text(
        "name: burst\nseed: 1\nnum_requests: 4\narrival: all-at-once\n"
        "prompt_tokens: {dist: fixed, value: 100}\noutput_tokens: {dist: fixed, value: 20}\n"
    )
    text = (
        "workload: burst.yaml\n"
        "deployments:\n"
        f"  - {{name: a, model: {MODEL}, gpu: h100, max_model_len: 2048, max_preemptions: 0}}\n"
        f"  - {{name: b, model: {MODEL}, gpu: l40s, max_model_len: 2048}}\n"
    )
    report = check_file(write(tmp_path, text))
    assert report.exit_code == 0, report.problems
    for row in report.results:
        # 4 requests of 100 + 20 tokens (8 blocks each) in pools of thousands of blocks
        assert row.simulated is not None and row.simulated.requests == 4
        assert row.simulated.preemptions == 0
        assert row.simulated.completed == 4


def test_the_workload_path_starts_at_the_plans_file(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    (deploy / "traces").mkdir(parents=True)
    two_requests(deploy / "traces", 8)
    text = f"deployments:\n  - {{name: a, model: {MODEL}, gpu: h100, max_model_len: 2048, workload: traces/two.jsonl}}\n"
    row = check_file(write(deploy, text)).results[0]
    assert row.simulated is not None
    assert row.simulated.workload == str(deploy / "traces" / "two.jsonl")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # a workload requirement with no workload anywhere
        (
            f"{{name: a, model: {MODEL}, gpu: h100, max_preemptions: 0}}",
            "deployments[0] (a).max_preemptions: needs a workload: add `workload: <trace.jsonl or spec.yaml>` to this deployment or the top level (max_preemptions come from replaying it)",
        ),
        # the replay is vLLM's scheduler
        (
            f"{{name: a, model: {MODEL}, engine: sglang, gpu: h100, workload: two.jsonl}}",
            "deployments[0] (a).workload: needs engine vllm: the workload is replayed on vLLM's scheduler",
        ),
        # ... on one pipeline stage
        (
            f"{{name: a, model: {MODEL}, gpu: h100, pp: 2, workload: two.jsonl, max_ttft_p90_s: 1}}",
            "deployments[0] (a).workload: needs pp 1: the replay has one pipeline stage (got pp 2)",
        ),
        # ... timed with a catalog GPU's bandwidth and FLOPS
        (
            f"{{name: a, model: {MODEL}, gpu_memory: 24GiB, max_kv_usage_p90: 0.9, workload: two.jsonl}}",
            "deployments[0] (a).workload: needs a catalog `gpu:` (with gpu_memory if you like): the replay times its steps with the GPU's bandwidth and FLOPS",
        ),
        # a file that is not there
        (
            f"{{name: a, model: {MODEL}, gpu: h100, workload: missing.jsonl}}",
            "deployments[0] (a).workload: {dir}/missing.jsonl: no such file",
        ),
        # a negative count
        (
            f"{{name: a, model: {MODEL}, gpu: h100, workload: two.jsonl, max_preemptions: -1}}",
            "deployments[0] (a).max_preemptions: must not be negative (got -1)",
        ),
    ],
)
def test_workload_problems_are_one_line_and_exit_2(
    tmp_path: Path, entry: str, expected: str
) -> None:
    two_requests(tmp_path, 8)
    path = write(
        tmp_path, f"deployments:\n  - {entry}\n  - {{name: ok, model: {MODEL}, gpu: h100}}\n"
    )
    result = runner.invoke(app, ["check", str(path), "-f", "json"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"Error: {path}:2: " + expected.replace("{dir}", str(tmp_path))
    ]
    # the other entry is still checked
    assert [d["name"] for d in json.loads(result.stdout)["deployments"]] == ["ok"]


def test_an_unreadable_top_level_workload_makes_the_file_invalid(tmp_path: Path) -> None:
    text = f"workload: nowhere.yaml\ndeployments:\n  - {{name: a, model: {MODEL}, gpu: h100}}\n"
    path = write(tmp_path, text)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: {path}:1: workload: {tmp_path}/nowhere.yaml: no such file"
    ]


def test_the_table_says_what_the_replay_measured(tmp_path: Path) -> None:
    two_requests(tmp_path, 8)
    text = f"deployments:\n  - {{name: a, model: {MODEL}, gpu: h100, max_model_len: 2048, workload: two.jsonl, max_preemptions: 0}}\n"
    result = runner.invoke(app, ["check", str(write(tmp_path, text))])
    assert result.exit_code == 0, result.stderr
    # 2 requests of 128 + 160 tokens in an H100's pool: none preempted
    text_out = " ".join(result.stdout.split())  # prose wraps at 80 columns, words whole
    assert f"replayed {tmp_path}/two.jsonl (2 requests): 0 preemptions, KV usage p90" in text_out
    # a failed workload requirement is said in words: a first token needs a step that reads
    # the 1.2 GB of weights at 3.35 TB/s (0.36 ms), far above 0.000001 s
    slow = text.replace("max_preemptions: 0", "max_ttft_p90_s: 0.000001")
    result = runner.invoke(app, ["check", str(write(tmp_path, slow))])
    assert result.exit_code == 1
    text_out = " ".join(result.stdout.split())
    assert "s replaying the workload > 1e-06 s" in text_out and "✗ TTFT p90 " in text_out
