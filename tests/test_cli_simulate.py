"""`kvplan simulate` on the command line: output, comparisons, files written, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "examples" / "workloads"
SHARED = str(WORKLOADS / "shared-system-prompt.yaml")


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def one_request(tmp_path: Path) -> Path:
    """A trace of one short request: 100 prompt tokens, 10 output."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt_tokens": 100, "output_tokens": 10}\n')
    return trace


def test_seed_scenario_shows_the_prefix_saving() -> None:
    # 100 requests at once, each an 800-token system prompt + 200 own tokens and 200 output
    # tokens; Llama-3.1-8B, 16-token blocks. Off: each peaks at cdiv(1,199, 16) = 75 blocks,
    # 100 x 75 = 7,500. On: the prompt's 50 full blocks once, at most 50 + 100 x 25 = 2,550
    # — the 99 x 50 = 4,950 blocks the other 99 requests reuse. At most: the API server
    # streams each request's 200 tokens (200 x 77.8 us = 15.6 ms, clock.API_TOKEN_S) before
    # it hands over the next, so with prefix caching (prefills of 200 tokens, not 1,000) the
    # first requests finish before the last reach their peak.
    code, out, err = run(
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "-w",
        SHARED,
        "--compare",
        "prefix-caching=on,off",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    on, off = (r["result"] for r in data["runs"])
    assert [r["label"] for r in data["runs"]] == ["prefix-caching=on", "prefix-caching=off"]
    assert off["peak_blocks"] == 7_500 and 50 + 25 < on["peak_blocks"] <= 2_550
    assert on["prefix_blocks_saved"] == 4_950
    assert on["completed"] == off["completed"] == 100
    assert data["best_label"] == "prefix-caching=on"
    assert "finish_steps" not in on
    assert data["pool"].startswith("h100: vLLM's budget")


def test_block_size_comparison_table() -> None:
    code, out, err = run(
        "qwen2.5-7b",
        "--num-gpu-blocks",
        "600",
        "-w",
        str(WORKLOADS / "chat.yaml"),
        "--num-requests",
        "200",
        "--block-size",
        "8,16,32",
        "--max-model-len",
        "4096",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.split("┃")[1:2] == [" block-size       "] for line in lines)
    for name in ("KV usage p90", "preemptions", "output tok/s", "TTFT p50 / p90", "fragmentation"):
        assert any(name in line for line in lines), name
    # the block sizes give the same throughput within 1 % or one is best: either is named
    assert "best for throughput: block-size=" in out
    assert "no --gpu: step times use the H100 step-time model" in out
    # 600 blocks of the first setting (block 8) = 4,800 tokens of KV: block 16 gets half the
    # blocks, block 32 a quarter
    blocks = next(line for line in lines if "KV blocks" in line)
    assert [c.strip() for c in blocks.split("│")[2:5]] == ["600", "300", "150"]
    assert "counted in blocks of the first setting" in out


def test_single_run_text(tmp_path: Path) -> None:
    code, out, err = run(
        "llama-3.1-8b",
        "--kv-cache-memory",
        "4GiB",
        "--max-model-len",
        "16384",
        "-w",
        str(WORKLOADS / "rag.yaml"),
        "--num-requests",
        "100",
    )
    assert code == 0, err
    for start in (
        "KV cache      2,048 blocks × 16 tokens (2.00 MiB each)",
        "KV usage      p50",
        "requests      100 completed",
        "TTFT ",
        "TPOT ",
        "prefix cache  ",
    ):
        assert any(line.startswith(start) for line in out.splitlines()), start
    assert "Times are a step-time model (defaults), not a measurement" in out


def test_output_and_trace_files(tmp_path: Path) -> None:
    report, trace = tmp_path / "report.json", tmp_path / "trace.jsonl"
    code, out, err = run(
        "qwen3-8b",
        "--gpu",
        "l40s",
        "-w",
        SHARED,
        "-o",
        str(report),
        "--save-trace",
        str(trace),
        "--json",
    )
    assert code == 0, err
    assert json.loads(report.read_text()) == json.loads(out)
    # replaying the saved trace gives the same results
    code2, out2, _ = run("qwen3-8b", "--gpu", "l40s", "-w", str(trace), "--json")
    assert code2 == 0
    first, second = json.loads(out), json.loads(out2)
    assert first["runs"][0]["result"] == second["runs"][0]["result"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "trace.jsonl"]


def test_plot_is_written_whole(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "usage.png"
    code, _, err = run(
        "qwen3-8b",
        "--gpu",
        "h100",
        "-w",
        SHARED,
        "--compare",
        "prefix-caching=on,off",
        "--plot",
        str(png),
    )
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["usage.png"]  # no temporary file left


def test_skipped_lines_are_reported(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt_tokens": 100, "output_tokens": 10}\n{"prompt_tokens": -1}\n')
    code, out, err = run(
        "llama-3.1-8b",
        "--num-gpu-blocks",
        "200",
        "--max-model-len",
        "2048",
        "-w",
        str(trace),
        "--skip-bad-lines",
    )
    assert code == 0
    assert (
        "Warning: 1 bad trace line(s) skipped: line 2: prompt_tokens -1 is negative; "
        "output_tokens missing" in err
    )


def test_too_long_requests_are_counted_and_warned(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"prompt_tokens": 100, "output_tokens": 10}\n'
        '{"prompt_tokens": 3000, "output_tokens": 10}\n'
    )
    code, out, err = run(
        "llama-3.1-8b",
        "--num-gpu-blocks",
        "200",
        "--max-model-len",
        "2048",
        "-w",
        str(trace),
        "--json",
    )
    assert code == 0
    assert json.loads(out)["runs"][0]["result"]["rejected_too_long"] == 1
    assert "1 request(s) longer than max_model_len" in err


def test_default_max_model_len_is_shortened_with_a_warning() -> None:
    code, out, err = run("llama-3.1-8b", "--num-gpu-blocks", "1000", "-w", SHARED, "--json")
    assert code == 0
    # 999 usable blocks x 16 tokens = 15,984 tokens, far below the model's 131,072
    assert json.loads(out)["runs"][0]["max_model_len"] == 15_984
    assert "vLLM won't start with max_model_len 131,072 and this KV pool" in err
    # the run's outcome is for the length simulated: 999 // 999 blocks = 1 request of 15,984
    # tokens at once, of vLLM's default 256 with no GPU named
    run0 = json.loads(out)["runs"][0]
    assert (run0["outcome"], run0["worst_case_running"]) == ("queues_at_worst_case", 1)


@pytest.mark.parametrize(
    ("max_num_seqs", "outcome", "running"),
    [
        # 8,192 tokens = 512 blocks of 16; 999 usable // 512 = 1 at once
        ("256", "queues_at_worst_case", 1),
        ("1", "fits_at_worst_case", 1),
    ],
)
def test_each_run_carries_the_worst_case_of_its_settings(
    tmp_path: Path, max_num_seqs: str, outcome: str, running: int
) -> None:
    trace = one_request(tmp_path)
    args = ["llama-3.1-8b", "--num-gpu-blocks", "1000", "--max-model-len", "8192", "-w", str(trace)]
    code, out, err = run(*args, "--max-num-seqs", max_num_seqs, "--json")
    assert code == 0, err
    run0 = json.loads(out)["runs"][0]
    assert (run0["outcome"], run0["worst_case_running"]) == (outcome, running)
    code, out, err = run(*args, "--max-num-seqs", max_num_seqs)
    words = {
        "queues_at_worst_case": f"starts, queues at worst case: {running} of {max_num_seqs} "
        "requests of 8,192 tokens run at once",
        "fits_at_worst_case": "fits at worst case: all 1 requests of 8,192 tokens run at once",
    }
    assert f"worst case    {words[outcome]}" in out


def test_the_comparison_table_has_a_worst_case_row(tmp_path: Path) -> None:
    trace = one_request(tmp_path)
    code, out, err = run(
        "llama-3.1-8b",
        "--num-gpu-blocks",
        "2049",
        "--max-model-len",
        "8192",
        "-w",
        str(trace),
        "--max-num-seqs",
        "4,8",
    )
    assert code == 0, err
    # 2,048 usable // 512 blocks = 4 at once: 4 all fit, 8 queue with 4 running
    [row] = [line for line in out.splitlines() if line.startswith("│ worst case")]
    assert "fits 4/4" in row and "queues 4/8" in row


def test_a_hybrid_with_more_seqs_than_blocks_wont_start(tmp_path: Path) -> None:
    # Qwen3-Next keeps one Mamba state block per running sequence: 128 sequences cannot start
    # in 100 blocks (vLLM refuses); the replay still runs, with a warning
    trace = one_request(tmp_path)
    args = ["qwen3-next-80b-a3b-thinking", "--num-gpu-blocks", "100", "--max-model-len", "4096"]
    code, out, err = run(*args, "-w", str(trace), "--max-num-seqs", "128", "--json")
    assert code == 0, err
    run0 = json.loads(out)["runs"][0]
    assert (run0["outcome"], run0["worst_case_running"]) == ("wont_start", 0)
    assert "vLLM won't start with max_num_seqs 128 and this KV pool" in err
    assert "use --max-num-seqs 100" in err
    code, out, err = run(*args, "-w", str(trace), "--max-num-seqs", "100", "--json")
    assert json.loads(out)["runs"][0]["outcome"] != "wont_start" and "Mamba" not in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--num-gpu-blocks", "1"],
            1,
            "holds 1 block(s) of 2,097,152 B (one is vLLM's null block): zero KV capacity",
        ),
        (["--kv-cache-memory", "1MiB"], 1, "zero KV capacity"),
        (["--gpu", "t4"], 1, "leave no KV cache on t4"),
        (["--num-gpu-blocks", "9", "--kv-cache-memory", "1GiB"], 2, "not both"),
        ([], 2, "size the KV pool: --gpu NAME, --kv-cache-memory 20GiB or --num-gpu-blocks N"),
        (["--gpu", "h1000"], 2, "unknown GPU 'h1000'"),
        (["--gpu", "h100", "--compare", "prefix-caching"], 2, "--compare takes KEY=V1,V2"),
        (["--gpu", "h100", "--compare", "tp=1,2"], 2, "cannot compare 'tp'"),
        (["--gpu", "h100", "--block-size", "16", "--compare", "block-size=8,16"], 2, "given twice"),
        (["--gpu", "h100", "--block-size", "16,x"], 2, "--block-size takes whole numbers"),
        (["--gpu", "h100", "--kv-cache-dtype", "fp4"], 2, "unknown KV cache dtype 'fp4'"),
        (["--gpu", "h100", "--goal", "speed"], 2, "unknown --goal 'speed'"),
        (
            ["--gpu", "h100", "--max-num-seqs", "4096", "--max-num-batched-tokens", "2048"],
            2,
            "must be greater than or equal to max_num_seqs",
        ),
        (["--gpu", "h100", "--max-model-len", "500000"], 1, "vLLM won't start: one 500,000"),
        (["--gpu", "h100", "--max-model-len", "500000"], 1, "Largest that fits"),
        (["--gpu", "h100", "--gpu-memory-utilization", "1.5"], 2, "must be in (0, 1]"),
        (
            ["--num-gpu-blocks", "100", "--max-model-len", "1024", "--plot", "/nonexistent/x.png"],
            2,
            "--plot /nonexistent/x.png: cannot write there",
        ),
    ],
)
def test_bad_input(args: list[str], code: int, message: str) -> None:
    if "--plot" in args:
        pytest.importorskip("matplotlib")
    exit_code, out, err = run("llama-3.1-8b", "-w", SHARED, *args)
    assert exit_code == code, err
    assert err.startswith("Error: ") and message in err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        (
            "prompt_tokens: {dist: gaussian, mean: 5}\noutput_tokens: 5\n",
            "w.yaml",
            'unknown distribution "gaussian"',
        ),
        (
            '{"prompt_tokens": 5, "output_tokens": -2}\n',
            "w.jsonl",
            "line 1: output_tokens -2 is negative",
        ),
        ("", "w.jsonl", "has no requests"),
    ],
)
def test_bad_workloads(tmp_path: Path, text: str, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run("llama-3.1-8b", "--gpu", "h100", "-w", str(path))
    assert code == 2  # an invalid file, as every command says it (tests/test_exit_codes.py)
    assert err.startswith("Error: ") and message in err and out == ""


def test_help_has_an_example() -> None:
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    assert "Example: kvplan simulate" in result.stdout


def test_plot_without_matplotlib_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    png = tmp_path / "usage.png"
    code, out, err = run("llama-3.1-8b", "--gpu", "h100", "-w", SHARED, "--plot", str(png))
    assert code == 2
    assert err == "Error: --plot needs matplotlib: pip install 'kvplan[plot]'\n"
    assert not png.exists()


def tier_trace(tmp_path: Path) -> Path:
    """A 64-token prefix (4 blocks of 16) used at t = 0 and t = 100, and between them a
    1,600-token request that takes the whole 100-block pool, evicting it from the GPU."""
    trace = tmp_path / "tier.jsonl"
    shared = '"output_tokens": 1, "prefix_id": "sys", "prefix_tokens": 64'
    trace.write_text(
        f'{{"prompt_tokens": 100, "arrival_s": 0, {shared}}}\n'
        '{"prompt_tokens": 1599, "output_tokens": 1, "arrival_s": 1}\n'
        f'{{"prompt_tokens": 100, "arrival_s": 100, {shared}}}\n'
    )
    return trace


def test_kv_offloading_size_adds_a_cpu_tier(tmp_path: Path) -> None:
    # Llama-3.1-8B: 16 tokens x 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 2 MiB a block;
    # 1 GiB of native tier at TP 1 = 512 blocks. The third request misses its 4 prefix blocks
    # on the GPU and loads them from the tier: 64 of 100 + 1,599 + 100 = 1,799 tokens.
    args = ("llama-3.1-8b", "--num-gpu-blocks", "101", "--max-model-len", "1600")
    trace = str(tier_trace(tmp_path))
    code, out, err = run(*args, "-w", trace, "--kv-offloading-size", "1", "--json")
    assert code == 0, err
    r = json.loads(out)["runs"][0]["result"]
    assert (r["cpu_blocks"], r["cpu_hit_tokens"], r["prefix_hit_tokens"]) == (512, 64, 64)
    assert (r["gpu_hit_rate"], r["cpu_hit_rate"]) == (0.0, 64 / 1_799)
    code, out, err = run(*args, "-w", trace, "--kv-offloading-size", "1")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("CPU KV tier"))
    assert line == "CPU KV tier   512 blocks · hits GPU 0.0% · CPU 3.6% (64 tokens loaded)"
    code, out, err = run(*args, "-w", trace, "--json")  # no tier: no tier keys, no hit
    r = json.loads(out)["runs"][0]["result"]
    assert "cpu_blocks" not in r and "cpu_hit_rate" not in r and r["prefix_hit_tokens"] == 0


def test_lmcache_tier_is_not_simulated(tmp_path: Path) -> None:
    args = ("llama-3.1-8b", "--num-gpu-blocks", "101", "--max-model-len", "1600")
    code, out, err = run(
        *args,
        "-w",
        str(tier_trace(tmp_path)),
        "--kv-offloading-size",
        "1",
        "--kv-offloading-backend",
        "lmcache",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert "cpu_blocks" not in data["runs"][0]["result"]
    assert any("lmcache" in w for w in data["warnings"])
