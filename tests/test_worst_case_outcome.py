"""What the user's own settings do, in one vocabulary: won't start, starts but queues at worst
case, fits at worst case. Expected values are arithmetic in the tests."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.plan_types import FITS_AT_WORST_CASE, QUEUES_AT_WORST_CASE, WONT_START
from tests.helpers import GUIDE_ARGS, guide_pool_blocks, parse_command, plan_for

runner = CliRunner()
GIB = 1 << 30

# The field guide's example: Qwen2.5-7B-Instruct on a 24 GiB card at gpu_memory_utilization 0.9.
# 28 layers x 16 tokens x 4 KV heads x 128 x 2 (K, V) x 2 B = 917,504 B (896 KiB) per block;
# the pool depends on max_num_seqs through the sampler warm-up and the captured CUDA-graph
# graphs (tests/helpers.guide_pool_blocks): 7,836 blocks at 64, 7,913 at 32, 7,951 at 16,
# 7,971 at 8; one is vLLM's null block.
GUIDE = {"gpu_memory_utilization": 0.9}


@pytest.mark.parametrize(
    ("max_model_len", "max_num_seqs", "outcome", "running"),
    [
        # 4,096 tokens = 256 blocks: 7,835 // 256 = 30 at once, fewer than 64
        (4_096, 64, QUEUES_AT_WORST_CASE, 30),
        # 8,192 tokens = 512 blocks: 7,912 // 512 = 15; 7,835 // 512 = 15
        (8_192, 32, QUEUES_AT_WORST_CASE, 15),
        (8_192, 64, QUEUES_AT_WORST_CASE, 15),
        # 16,384 tokens = 1,024 blocks: 7,950 // 1,024 = 7
        (16_384, 16, QUEUES_AT_WORST_CASE, 7),
        # 8 x 512 = 4,096 <= 7,970: all run
        (8_192, 8, FITS_AT_WORST_CASE, 8),
    ],
)
def test_the_guides_pairs_start_and_say_how_many_run(
    max_model_len: int, max_num_seqs: int, outcome: str, running: int
) -> None:
    p = _guide_plan(max_model_len, max_num_seqs)
    assert p.vllm.num_gpu_blocks == guide_pool_blocks(max_num_seqs)
    assert (p.outcome, p.worst_case_running) == (outcome, running)
    assert p.vllm.fits  # vLLM starts in every case: it queues instead of refusing


def _guide_plan(max_model_len: int, max_num_seqs: int):  # type: ignore[no-untyped-def]
    from planner.gpus import custom_gpu

    return plan_for(
        "qwen2.5-7b-instruct",
        custom_gpu(24 * GIB),
        **GUIDE,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
    )


def test_halving_the_length_doubles_who_runs_at_once() -> None:
    # 16,384 -> 8,192 tokens halves the blocks per request: vLLM's "Maximum concurrency"
    # doubles, 7,836 / 1,024 = 7.65x -> 7,836 / 512 = 15.30x; at once 7,835 // 1,024 = 7 ->
    # // 512 = 15
    long, short = _guide_plan(16_384, 64), _guide_plan(8_192, 64)
    assert short.vllm.max_concurrency == pytest.approx(2 * long.vllm.max_concurrency)
    assert (long.worst_case_running, short.worst_case_running) == (7, 15)


def test_the_grid_holds_the_users_column_and_marks_only_wont_start() -> None:
    # max_num_seqs 11 is not a default column; the user's value is one
    p = _guide_plan(8_192, 11)
    cells = {(c.max_model_len, c.max_num_seqs): c for c in p.grid}
    assert (8_192, 11) in cells
    assert cells[(8_192, 11)].outcome == FITS_AT_WORST_CASE  # 11 x 512 = 5,632 <= 7,970
    cell = cells[(8_192, 32)]  # 7,921 // 512 = 15
    assert (cell.outcome, cell.worst_case_running, cell.fits) == (QUEUES_AT_WORST_CASE, 15, True)


def test_one_request_too_long_wont_start_and_exits_1() -> None:
    # Llama-3.1-8B on an L4: 131,072 tokens need 8,192 blocks of 2 MiB (16 GiB); the L4's
    # budget (22.03 GiB, as vLLM logs it) leaves 4.27 GiB. vLLM refuses; the JSON says why and
    # estimate exits 1.
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "l4", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["outcome"] == WONT_START and data["worst_case_running"] == 0
    assert data["fits"] is False
    assert "estimated maximum model length" in data["outcome_reason"]
    # and says so in one Error line with the change that starts: vLLM's estimate from what
    # the L4's budget leaves (vllm serve on it: 2,048 tokens, 256 sequences; vLLM 0.33):
    #   requested  ceil(23,654,532,383 x 0.92)                         = 21,762,169,793
    #   weights    8.03 B parameters x 2 B                             = 16,060,522,496
    #              + the rotary cache, 131,072 positions x 128 x 2 B   =     33,554,432
    #   activation the forward, 2,048 x 2 x (3 x 14,336 + 4 x 4,096) + 27.1 MB
    #              (over the sampler's 256 x 128,256 x 4 x 1.5 + held)  =    270,369,632
    #   non-torch  0.25 GiB                                            =    268,435,456
    #   graphs     32 layers x (51 + 35) graphs x 209,715 (0.20 MiB)   =    577,135,680
    # = 4,552,152,097 B; less the 2 MiB null block // 2 MiB = 2,169 blocks x 16 = 34,704
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: meta-llama/Llama-3.1-8B won't start with these settings: ")
    left = 21_762_169_793 - 16_060_522_496 - 33_554_432 - 270_369_632 - 268_435_456 - 577_135_680
    assert 2048 * 2 * (3 * 14_336 + 4 * 4096) + 27_100_000 == 270_369_632
    assert data["available_kv_bytes"] == left == 4_552_152_097
    assert (left - 2 * 2**20) // 2**21 * 16 == 34_704
    # the change: 34,704 rounded down to a multiple of 1,024 (33 x 1,024 = 33,792), and -1
    assert line.endswith(
        "the estimated maximum model length is 34704. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine; try --max-model-len 33792 (or -1: vLLM fits 34,704)"
    )
    rec = data["recommended"]
    assert (rec["max_model_len"], rec["auto_fit_max_model_len"]) == (33_792, 34_704)
    assert parse_command(data["commands"]["vllm"])["max-model-len"] == "33792"
    shorter = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "33792", "--json"]
    )
    assert shorter.exit_code == 0  # the printed command starts
    # the auto-fit length starts
    fitted = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "-1", "--json"]
    )
    assert fitted.exit_code == 0 and json.loads(fitted.stdout)["outcome"] != WONT_START


def test_hybrid_with_more_seqs_than_mamba_blocks_wont_start() -> None:
    # Nemotron-H-56B with a 20 GiB pool: 127 blocks (test_budget), one Mamba state block per
    # running sequence: max_num_seqs 128 cannot start, 127 can.
    over = plan_for(
        "nemotron-h-56b-base-8k",
        None,
        kv_cache_memory_bytes=20 * GIB,
        max_model_len=8_192,
        max_num_seqs=128,
    )
    assert over.vllm.num_gpu_blocks == 127
    assert over.outcome == WONT_START
    assert "max_num_seqs 128 exceeds the 127" in (over.outcome_reason or "")
    ok = plan_for(
        "nemotron-h-56b-base-8k",
        None,
        kv_cache_memory_bytes=20 * GIB,
        max_model_len=8_192,
        max_num_seqs=6,
    )
    # 20 blocks per 8,192-token request: 126 usable // 20 = 6 -> all 6 run at once
    assert (ok.outcome, ok.worst_case_running) == (FITS_AT_WORST_CASE, 6)


def test_text_output_opens_the_plan_with_the_verdict() -> None:
    result = runner.invoke(
        app,
        [
            *GUIDE_ARGS,
            "--max-model-len",
            "8192",
            "--max-num-seqs",
            "32",
        ],
        env={"COLUMNS": "80", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    # the verdict opens the output, the command follows within the first screenful lines
    assert lines[1] == (
        "✓ Starts, queues at worst case: 15 of 32 requests of 8,192 tokens run at once"
    )
    assert lines[0].startswith("Qwen/Qwen2.5-7B-Instruct on custom (24.00 GiB), vLLM")
    # 57,344 B = 56.0 KiB per token; 8,192 x 57,344 B = 448 MiB per request; the pool at
    # max_num_seqs 32 is 7,913 blocks (guide_pool_blocks) = 7,913 x 16 = 126,608 tokens
    assert guide_pool_blocks(32) == 7_913
    assert (
        lines[2] == "  KV: 56.0 KiB/token, 448.00 MiB/request; pool 126,608 tokens = 7,913 blocks"
    )
    assert lines[3].startswith("Recommended (no workload given): keep max_model_len 8,192")
    command = next(i for i, line in enumerate(lines) if "vllm serve" in line)
    assert command <= 5
    # the whole default output fits one 80 x 40 screen; lines never pass 80 columns
    assert len(lines) <= 40
    assert max(len(line) for line in lines) <= 80


# vLLM 0.33 `vllm serve` flags the command may carry, with the value each takes (EngineArgs /
# CacheConfig; a None type is a store-true flag). Only these may appear.
VLLM_FLAGS: dict[str, type | None] = {
    "--tensor-parallel-size": int,
    "--pipeline-parallel-size": int,
    "--max-model-len": int,
    "--max-num-seqs": int,
    "--gpu-memory-utilization": float,
    "--kv-cache-memory-bytes": int,
    "--block-size": int,
    "--kv-cache-dtype": str,
    "--max-num-batched-tokens": int,
    "--enforce-eager": None,
    "--no-enable-prefix-caching": None,
}
VLLM_KV_DTYPES = {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}


def parse_vllm(command: str) -> dict[str, object]:
    import shlex

    words = shlex.split(command)
    assert words[:2] == ["vllm", "serve"]
    out: dict[str, object] = {"model": words[2]}
    it = iter(words[3:])
    for flag in it:
        assert flag in VLLM_FLAGS, f"vllm serve has no {flag}"
        kind = VLLM_FLAGS[flag]
        out[flag] = True if kind is None else kind(next(it))
    return out


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # a fixed pool is vLLM's --kv-cache-memory-bytes, in integer bytes: int(6.51 x 2^30)
        (["--kv-cache-memory", "6.51GiB"], {"--kv-cache-memory-bytes": 6_990_059_274}),
        # the 16-bit cache dtypes as vLLM spells them
        (["--kv-cache-dtype", "bf16"], {"--kv-cache-dtype": "bfloat16"}),
        (["--kv-cache-dtype", "fp16"], {"--kv-cache-dtype": "float16"}),
        # settings the plan assumed are not dropped
        (["--enforce-eager"], {"--enforce-eager": True}),
        (["--no-enable-prefix-caching"], {"--no-enable-prefix-caching": True}),
        (["--max-num-batched-tokens", "4096"], {"--max-num-batched-tokens": 4_096}),
        (["--gpu-memory-utilization", "0.85"], {"--gpu-memory-utilization": 0.85}),
    ],
)
def test_the_vllm_command_means_the_plan(flags: list[str], expected: dict[str, object]) -> None:
    args = ["estimate", "qwen3-14b", "--max-model-len", "32768", *flags, "--json"]
    if "--kv-cache-memory" not in flags:
        args += ["--gpu", "h100"]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.stderr
    parsed = parse_vllm(json.loads(result.stdout)["commands"]["vllm"])
    for flag, value in expected.items():
        assert parsed[flag] == value
    assert parsed.get("--kv-cache-dtype", "auto") in VLLM_KV_DTYPES
    # a fixed pool replaces the utilisation: vLLM sizes KV from one or the other
    assert not ("--kv-cache-memory-bytes" in parsed and "--gpu-memory-utilization" in parsed)


@pytest.mark.parametrize(
    ("gpu", "flags", "native"),
    [
        ("a100-80gb", [], False),  # suggested as an alternative; compute capability 8.0
        ("h100", ["--kv-cache-dtype", "fp8"], True),  # chosen; 9.0 computes in fp8
        ("l40s", [], True),  # Ada, 8.9
    ],
)
def test_fp8_kv_always_comes_with_its_caveat(gpu: str, flags: list[str], native: bool) -> None:
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", gpu, *flags, "--json"])
    data = json.loads(result.stdout)
    [caveat] = [n for n in data["plan_notes"] if n.startswith("fp8 KV can cost accuracy")]
    assert "evaluate on your task before production" in caveat
    assert ("has no native fp8" in caveat) is not native


def test_no_fp8_kv_suggestion_nor_caveat_below_compute_capability_8() -> None:
    # a T4 is 7.5: vLLM 0.33 runs fp8 KV from 8.0 (FlashInfer; Triton needs 8.9), so fp8 KV is
    # neither suggested nor caveated there (planner/gpu_support.py cites the source lines)
    flags = ["--max-model-len", "4096", "--tp", "2"]
    result = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "t4", *flags, "--json"])
    data = json.loads(result.stdout)
    assert not [a for a in data["alternatives"] if "kv_cache_dtype" in a["changes"]]
    assert not [n for n in data["plan_notes"] if n.startswith("fp8 KV can cost accuracy")]


def test_a_plan_that_wont_start_still_fits_one_screen() -> None:
    result = runner.invoke(
        app, ["estimate", "llama-3.1-8b", "--gpu", "l4"], env={"COLUMNS": "80", "NO_COLOR": "1"}
    )
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[1] == "✗ Won't start"
    # 131,072 tokens x 128 KiB = 16 GiB for one request
    assert lines[2].startswith("  one 131,072-token request needs 16.00 GiB of KV cache;")
    assert len(lines) <= 40
