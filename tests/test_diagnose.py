"""kvplan diagnose on realistic V0 and V1 logs (tests/fixtures/logs, written from the formats vLLM
prints): parsed figures, the term that explains the KV difference, the layout check, and the
troubleshooting rules; plan figures are cross-checked against recommend.plan."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.diagnose import (
    GIB,
    LogFileError,
    NothingRecognisedError,
    diagnose_file,
    parse_log,
)
from planner.gpus import Gpu, get_gpu
from tests.helpers import plan_for

runner = CliRunner()
LOGS = Path(__file__).parent / "fixtures" / "logs"
V1_H100 = LOGS / "vllm-v1-llama8b-h100.log"
V1_3090 = LOGS / "vllm-v1-llama8b-3090-maxlen.log"
V0_A100 = LOGS / "vllm-v0-qwen7b-a100.log"
V1_OOM = LOGS / "vllm-v1-oom-fragmented.log"
MIB2 = 2 * 1024 * 1024  # Llama-3.1-8B block: 32 layers x 16 tokens x 8 heads x 256 x 2 B


def gib(x: float) -> int:
    return round(x * GIB)


def gpu(name: str) -> Gpu:
    return get_gpu(name)


def by_kind(findings: list[planner.diagnose.Finding]) -> dict[str, planner.diagnose.Finding]:
    return {f.kind: f for f in findings}


def v0_plan() -> planner.Plan:
    """The plan for the V0 log's settings on an A100-40GB (V0 took its CUDA graphs after
    sizing the cache, so they cost the KV cache nothing)."""
    return plan_for(
        planner.load_model_spec("qwen2.5-7b"),
        gpu("a100-40gb"),
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        cuda_graph_bytes=0,
        vllm_version="0.6.6",  # the log's release: diagnose plans with its rules
    )


# ------------------------------------------------------------------ parsing


def test_v1_startup_lines_are_read() -> None:
    log = parse_log(V1_H100.read_text())
    assert log.engine == "V1" and log.version == "0.11.0"
    assert log.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert log.weights_bytes == gib(14.99)
    assert log.activation_bytes == gib(4.76)
    assert log.non_torch_bytes == gib(0.13)
    assert log.cuda_graph_bytes == gib(-0.45)  # graph capture can free memory
    assert log.cuda_graph_capture_bytes == gib(-0.45)
    assert log.available_kv_bytes == gib(51.38)
    assert log.kv_cache_tokens == 420_880
    assert (log.concurrency_len, log.max_concurrency) == (16_000, 26.30)
    assert log.total_gpu_bytes == gib(79.18) and log.requested_bytes == gib(71.26)
    assert log.settings["gpu_memory_utilization"] == 0.9
    assert log.settings["max_model_len"] == 16_000
    assert log.settings["enable_prefix_caching"] is True
    assert log.kv_usage_pct == [91.2, 97.5, 99.1, 98.8]
    assert log.max_waiting == 24 and log.preemptions == 0
    assert log.lines["available_kv_bytes"] == 20


def test_v0_startup_lines_are_read() -> None:
    log = parse_log(V0_A100.read_text())
    assert log.engine == "V0" and log.version == "0.6.6.post1"
    assert log.num_gpu_blocks == 22_211
    assert log.total_gpu_bytes == gib(39.38) and log.requested_bytes == gib(35.44)
    assert log.weights_bytes == gib(14.25)  # the breakdown line, after "took 14.2487 GB"
    assert log.available_kv_bytes == gib(18.98)
    assert log.settings["enable_prefix_caching"] is False
    # two warnings, but vLLM's cumulative counter says 51
    assert log.preemptions == 51
    assert log.max_waiting == 23


def test_unknown_lines_and_colour_codes_are_ignored() -> None:
    clean = parse_log(V1_H100.read_text())
    noisy_text = "\n".join(
        f"\x1b[32m{line}\x1b[0m\nsome unrelated line {i} took 3 seconds"
        for i, line in enumerate(V1_H100.read_text().splitlines())
    )
    noisy = parse_log(noisy_text)
    assert noisy.available_kv_bytes == clean.available_kv_bytes
    assert noisy.kv_cache_tokens == clean.kv_cache_tokens
    assert noisy.kv_usage_pct == clean.kv_usage_pct
    assert noisy.recognised == clean.recognised


# ------------------------------------------------------------------ comparison


def test_v1_0_11_log_is_planned_with_its_own_releases_rules() -> None:
    # The log is vLLM 0.11.0, which sizes the KV cache before capturing CUDA graphs: the plan
    # subtracts none (the log's -0.45 GiB capture is not a budget term) and lands on the
    # log's 51.38 GiB: the weights are the checkpoint's 16,060,522,496 B plus vLLM's rotary
    # cache, 131,072 positions x 128 x 2 B = 33,554,432 B (14.99 GiB, as logged).
    dg = diagnose_file(V1_H100, model="llama-3.1-8b", gpu=gpu("h100"))
    p = plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("h100"),
        max_model_len=16_000,
        gpu_memory_utilization=0.9,
        vllm_version="0.11.0",
    )
    assert p.vllm.cuda_graph_bytes == 0
    terms = {t.name: t for t in dg.terms}
    assert terms["available KV"].plan == p.vllm.available_kv_bytes
    assert terms["KV cache tokens"].plan == p.vllm.kv_cache_size_tokens
    assert "not subtracted" in terms["CUDA graphs"].note
    assert terms["weights"].plan == 16_060_522_496 + 131_072 * 128 * 2
    assert abs(terms["weights"].log - terms["weights"].plan) < gib(0.005)  # 2 decimals
    matches = by_kind(dg.findings)["matches"]
    assert matches.data["difference_bytes"] == gib(51.38) - p.vllm.available_kv_bytes
    assert abs(matches.data["difference_bytes"]) < gib(0.005)


def test_v1_layout_reproduces_the_logged_tokens() -> None:
    dg = diagnose_file(V1_H100, model="llama-3.1-8b", gpu=gpu("h100"))
    layout = by_kind(dg.findings)["layout-matches"]
    # 51.38 GiB +- 0.005 -> floor(51.375 x 512) = 26,304 .. floor(51.385 x 512) = 26,309
    # blocks of 2 MiB; 1,000 blocks per 16,000-token request -> tokens = blocks x 16
    assert layout.data["expected_tokens_low"] == 26_304 * 16
    assert layout.data["expected_tokens_high"] == 26_309 * 16
    assert layout.data["log_tokens"] == 420_880
    assert layout.data["plan_bytes_per_token"] == 131_072


def test_a_hybrids_logged_tokens_are_one_groups_share(tmp_path: Path) -> None:
    # kyuz0/amd-r9700-vllm-toolboxes' gpt-oss-20b run on an RTX 3090, vLLM 0.12.0
    # (tests/data/vllm_startups.json, kyuz0-nvidia-3090-gptoss20b-tp1): 7.12 GiB, 155,584
    # tokens. 12 sliding + 12 full layers in 2 KV-cache groups; a block is 12 layers x 16
    # tokens x 8 KV heads x 64 x 2 (K, V) x 2 B = 393,216 B. vLLM logs blocks // 2 groups x 16
    # (kv_cache_utils.py 0.11.0:1076-1087): 7.12 GiB +- 0.005 -> 19,428 .. 19,456 blocks ->
    # 155,424 .. 155,648 tokens. The healthy log is no layout difference.
    log = tmp_path / "gptoss.log"
    log.write_text(
        "INFO 12-09 10:00:00 [api_server.py:1] vLLM API server version 0.12.0\n"
        "INFO 12-09 10:00:00 [utils.py:1] non-default args: {'model': 'openai/gpt-oss-20b', "
        "'max_model_len': 16384, 'max_num_seqs': 32}\n"
        "INFO 12-09 10:00:10 [gpu_model_runner.py:1] Model loading took 13.7194 GiB memory\n"
        "INFO 12-09 10:00:20 [gpu_worker.py:1] Available KV cache memory: 7.12 GiB\n"
        "INFO 12-09 10:00:20 [kv_cache_utils.py:1] GPU KV cache size: 155,584 tokens\n"
    )
    layout = by_kind(diagnose_file(log, gpu=gpu("rtx-3090")).findings)["layout-matches"]
    assert math.floor(gib(7.115) / 393_216) == 19_428
    assert math.floor(gib(7.125) / 393_216) == 19_456
    assert layout.data["expected_tokens_low"] == 19_428 // 2 * 16
    assert layout.data["expected_tokens_high"] == 19_456 // 2 * 16
    # bytes per logged token: a block over its 8 tokens of one group's share
    assert layout.data["plan_bytes_per_token"] == 393_216 * 2 / 16


def test_a_wrong_kv_head_count_shows_as_a_layout_difference(tmp_path: Path) -> None:
    # Same memory, twice the tokens: the server stores half the bytes per token (4 KV heads
    # where the plan has 8).
    text = V1_H100.read_text().replace("420,880 tokens", "841,760 tokens")
    path = tmp_path / "halved.log"
    path.write_text(text)
    layout = by_kind(diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100")).findings)["layout"]
    assert layout.severity == "warning"
    # 51.38 GiB / 841,760 tokens = 65,540 B/token vs 131,072: ratio 0.5
    assert layout.data["ratio"] == 0.5
    assert layout.data["kv_heads_per_rank"] == 8
    assert "num_key_value_heads" in layout.fix[0]


def test_v0_blocks_and_the_activation_term() -> None:
    dg = diagnose_file(V0_A100, gpu=gpu("a100-40gb"))
    assert dg.settings["model"] == "Qwen/Qwen2.5-7B-Instruct"  # named by the log
    assert dg.sources["gpu_memory_utilization"] == "log line 8"
    found = by_kind(dg.findings)
    # V0 profiled 8,192 tokens (no chunked prefill) and logged 2.10 GiB of activations
    assert found["budget"].data["term"] == "activation peak"
    assert found["budget"].data["term_log_bytes"] == gib(2.10)
    # Qwen2.5-7B block: 28 layers x 16 x 4 heads x 256 x 2 B = 917,504 B;
    # 18.98 GiB +- 0.005 -> 22,206 .. 22,217 blocks; the log has 22,211
    layout = found["layout-matches"]
    assert layout.data["expected_tokens_low"] == 22_206 * 16
    assert layout.data["expected_tokens_high"] == 22_217 * 16
    assert math.floor(gib(18.975) / 917_504) == 22_206
    # V0 never took CUDA graphs out of the KV budget: the plan has none
    assert next(t for t in dg.terms if t.name == "CUDA graphs").plan == 0


def test_v0_runtime_rules_pinned_and_prefix_off() -> None:
    dg = diagnose_file(V0_A100, gpu=gpu("a100-40gb"))
    found = by_kind(dg.findings)
    pinned = found["kv-pinned"]
    assert pinned.data == {
        "samples": 4,
        "high_samples": 3,
        "peak_pct": 99.6,
        "preemptions": 51,
        "max_waiting": 23,
    }
    p = v0_plan()
    # 90 % of the usable blocks over 512 blocks per 8,192-token request
    fewer = int(0.9 * (p.vllm.num_gpu_blocks - 1) // 512)
    # the README table's order: more memory, then (with preemptions) fewer sequences
    assert pinned.fix[0].startswith("more KV memory")
    assert pinned.fix[1].startswith(f"fewer sequences: max_num_seqs {fewer} ")
    assert any(fix.startswith("fp8 KV") for fix in pinned.fix)
    assert any("prefix" in fix for fix in pinned.fix)
    assert found["prefix-off"].fix[0] == "--enable-prefix-caching"


def test_startup_error_gives_vllms_and_the_plans_max_len() -> None:
    dg = diagnose_file(V1_3090, model="llama-3.1-8b", gpu=gpu("rtx-3090"))
    error = by_kind(dg.findings)["startup-max-len"]
    # (4.61 GiB - one 2 MiB null block) // 2 MiB = 2,359 blocks x 16 = 37,744 tokens
    assert (gib(4.61) - MIB2) // MIB2 * 16 == 37_744
    assert error.data["estimated_max_model_len"] == 37_744
    assert error.data["max_model_len"] == 131_072
    assert error.data["needed_bytes"] == gib(16.00)
    p = plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("rtx-3090"),
        max_model_len=131_072,
        gpu_memory_utilization=0.9,
        vllm_version="0.11.0",  # the log's release
    )
    assert error.data["plan_estimated_max_model_len"] == p.vllm.estimated_max_model_len
    assert error.fix[0] == "max_model_len 37744 (vLLM's estimate)"
    # the log states no breakdown: the difference is put on the terms it does not state
    budget = by_kind(dg.findings)["budget"]
    assert budget.data["term_log_bytes"] is None
    assert "activation peak" in budget.data["unlogged"]


def test_oom_with_free_memory_is_fragmentation_and_low_usage_lowers_gmu() -> None:
    dg = diagnose_file(V1_OOM)  # no model, no GPU: the OOM message states the total
    found = by_kind(dg.findings)
    oom = found["oom-fragmentation"]
    # 1.25 GiB free + 4.87 GiB reserved-but-unallocated >= the 1.96 GiB it tried to allocate
    assert oom.data == {
        "tried_bytes": gib(1.96),
        "free_bytes": gib(1.25),
        "reserved_unallocated_bytes": gib(4.87),
    }
    assert oom.fix[0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert any("KV-head count" in fix for fix in oom.fix)
    low = found["kv-low"]
    # peak 21.7 % of 52.81 GiB is used; keeping it at 80 % of a smaller cache needs
    # 72.85 - (52.81 - 52.81 x 0.217 / 0.8) = 34.36 GiB of 79.18 -> 0.434 -> 0.44
    assert low.data["peak_pct"] == 21.7 and low.data["suggested_gmu"] == 0.44
    assert found["prefix-low-hit"].data["mean_hit_pct"] == 0.0
    assert "no model" in dg.notes[0]


def test_oom_without_free_memory_is_a_tight_budget(tmp_path: Path) -> None:
    path = tmp_path / "oom.log"
    path.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.58 GiB of which 120.00 MiB is free. Of the allocated memory 22.1 "
        "GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    oom = by_kind(diagnose_file(path).findings)["oom"]
    assert oom.data["free_bytes"] == 120 * 1024 * 1024
    assert oom.data["reserved_unallocated_bytes"] == 300 * 1024 * 1024


def test_no_kv_memory_error(tmp_path: Path) -> None:
    path = tmp_path / "nokv.log"
    path.write_text(
        "ERROR 11-29 [core.py:708] ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.\n"
    )
    assert by_kind(diagnose_file(path).findings)["startup-no-memory"].severity == "error"


# ------------------------------------------------------------------ CLI and bad input


def test_cli_diagnose_as_in_the_issue() -> None:
    result = runner.invoke(
        app, ["diagnose", str(V1_3090), "--model", "llama-3.1-8b", "--gpu", "rtx-3090"]
    )
    assert result.exit_code == 1, result.stderr  # the log shows vLLM refusing to start
    text = " ".join(result.stdout.split())  # prose wraps at the terminal's width, words whole
    assert "vLLM refused max_model_len 131072" in text
    assert "estimated maximum model length is 37744" in text
    assert "→ max_model_len 37744 (vLLM's estimate)" in text


def test_cli_diagnose_json() -> None:
    result = runner.invoke(
        app, ["diagnose", str(V1_H100), "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    kinds = [f["kind"] for f in data["findings"]]
    assert kinds == ["matches", "layout-matches", "kv-pinned"]
    assert data["findings"][0]["text"].startswith("Available KV cache: log 51.38 GiB")
    assert data["log"]["kv_usage_samples"] == 4 and data["log"]["kv_usage_peak_pct"] == 99.1
    terms = {t["name"]: t for t in data["terms"]}
    assert terms["weights"]["log"] == gib(14.99)
    assert terms["weights"]["diff"] == gib(14.99) - terms["weights"]["plan"]


def test_cli_settings_on_the_command_line_win() -> None:
    result = runner.invoke(
        app,
        ["diagnose", str(V1_H100), "--model", "llama-3.1-8b", "--gpu", "h100"]
        + ["--max-model-len", "8192", "--json"],
    )
    data = json.loads(result.stdout)
    assert data["settings"]["max_model_len"] == 8192
    assert data["sources"]["max_model_len"] == "command line"
    assert data["sources"]["tp"] == "log line 8"


def test_nothing_recognisable_says_so() -> None:
    with pytest.raises(NothingRecognisedError):
        diagnose_file(LOGS / "not-a-vllm.log")
    result = runner.invoke(app, ["diagnose", str(LOGS / "not-a-vllm.log")])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {LOGS / 'not-a-vllm.log'}: no vLLM line recognised")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        (b"\x00\x01binary\x00", "binary file (NUL bytes), not a log file"),
    ],
)
def test_unreadable_logs_exit_2(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "server.log"
    if content is not None:
        path.write_bytes(content)
    result = runner.invoke(app, ["diagnose", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {path}: {expected}"


def test_oversized_log_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("planner.diagnose.diagnosis.MAX_LOG_BYTES", 1000)
    path = tmp_path / "big.log"
    path.write_text("x" * 1001)
    with pytest.raises(LogFileError, match="1,001 bytes is larger than the 1,000-byte limit"):
        diagnose_file(path)


def test_unknown_model_on_the_command_line_is_an_error() -> None:
    result = runner.invoke(app, ["diagnose", str(V1_H100), "--model", "llama-3.1-8bb"])
    assert result.exit_code == 1
    assert "unknown model 'llama-3.1-8bb'" in result.stderr


def test_model_named_only_by_the_log_and_not_cached_is_a_note(tmp_path: Path) -> None:
    # a model in neither the catalog nor the (empty) HF cache: a note, and no plan
    path = tmp_path / "unknown.log"
    path.write_text(V1_H100.read_text().replace("meta-llama/Llama-3.1-8B-Instruct", "acme/nope-7b"))
    dg = diagnose_file(path, gpu=gpu("h100"))
    assert any("pass --model" in note for note in dg.notes)
    pinned = by_kind(dg.findings)["kv-pinned"]
    # saturated with 0 preemptions: fewer sequences would only cut throughput (issue 22)
    assert pinned.data["preemptions"] == 0
    assert pinned.fix[0].startswith("more KV memory")
    assert not any("fewer" in fix for fix in pinned.fix)
    # the log's own model, meta-llama/Llama-3.1-8B-Instruct, resolves to the catalog's
    # llama-3.1-8b (same geometry), so that log is planned
    planned = diagnose_file(V1_H100, gpu=gpu("h100"))
    assert not any("pass --model" in note for note in planned.notes)
    assert {t.name: t for t in planned.terms}["available KV"].plan is not None


def test_bad_settings_from_the_command_line_are_errors_from_the_log_notes(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["diagnose", str(V1_H100), "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "3"]
    )
    assert result.exit_code == 2
    assert "--tp 3 does not divide 32 attention heads" in result.stderr
    # the same mistake made by the log itself (TP 3) is reported, not fatal
    path = tmp_path / "tp3.log"
    text = V1_3090.read_text().replace("tensor_parallel_size=1", "tensor_parallel_size=3")
    path.write_text(text + "INFO Free memory on device (23.31/23.58 GiB) on startup.\n")
    dg = diagnose_file(path)  # model, GPU total and TP all from the log
    assert (dg.settings["tp"], dg.sources["gpu"]) == (3, "log")
    assert any(
        note.startswith("cannot plan with the settings the log states: ") and "--tp 3" in note
        for note in dg.notes
    ), dg.notes


@pytest.mark.parametrize(
    "line",
    [
        "Available KV cache memory: 1.2.3 GiB",
        "Model loading took . GiB and 3.1 seconds",
        "GPU KV cache usage: 9.9.9%, Prefix cache hit rate: 1%",
        f"Available KV cache memory: {'9' * 400} GiB",
        f"Available KV cache memory: {'9' * 300} GiB",  # finite, but not once in bytes
        "Desired GPU memory utilization is (0.9.1, 20.00 GiB)",
        "CUDA out of memory. Tried to allocate 1.1.1 GiB",
        # one bad figure spoils the line: nothing of it is half-set
        "Actual usage is 14.99 GiB for weight, 1.2.3 GiB for peak activation, 0.13 GiB for "
        "non-torch memory, and 0.51 GiB for CUDAGraph memory",
    ],
)
def test_numbers_that_are_not_numbers_leave_the_line_unrecognised(line: str) -> None:
    log = parse_log(f"INFO 11-29 10:00:00 [gpu_worker.py:1] {line}\n")
    assert log.recognised == 0
    assert log.weights_bytes is None and log.available_kv_bytes is None
    assert log.kv_usage_pct == [] and log.settings == {}


def test_a_bad_optional_oom_figure_keeps_the_rest_of_the_line() -> None:
    log = parse_log(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.5.1 GiB of which 1.50 GiB is free."
    )
    assert log.recognised == 1
    assert (log.oom_tried_bytes, log.oom_free_bytes) == (gib(2.0), gib(1.5))
    assert log.total_gpu_bytes is None


def nondefault_log(tmp_path: Path, args: str, extra: str = "") -> Path:
    path = tmp_path / "vllm.log"
    path.write_text(
        "INFO Requested memory: 0.90 (util), 20.00 GiB\n"
        f"INFO non-default args: {{'model': 'meta-llama/Llama-3.1-8B', {args}}}\n"
        "INFO Available KV cache memory: 5.00 GiB\nINFO GPU KV cache size: 40,960 tokens\n" + extra
    )
    return path


@pytest.mark.parametrize(
    ("args", "note"),
    [
        (
            "'gpu_memory_utilization': 'abc'",
            "ignored gpu_memory_utilization 'abc'",
        ),  # was: ValueError
        (
            "'gpu_memory_utilization': 0",
            "ignored gpu_memory_utilization 0",
        ),  # was: ZeroDivisionError
        ("'gpu_memory_utilization': 7", "ignored gpu_memory_utilization 7"),
        ("'tensor_parallel_size': -1", "ignored tp -1"),
        ("'kv_cache_dtype': 'fp7'", "ignored kv_cache_dtype 'fp7'"),
        ("'max_model_len': 1" + "0" * 30, "ignored max_model_len"),
        ("'max_model_len': '²'", "ignored max_model_len '²'"),  # was: ValueError
        # was: OverflowError
        ("'gpu_memory_utilization': 1" + "0" * 400, "ignored gpu_memory_utilization 1000"),
    ],
)
def test_a_logs_impossible_setting_is_ignored_with_a_note(
    tmp_path: Path, args: str, note: str
) -> None:
    for flags in ([], ["--gpu", "h100"]):
        result = runner.invoke(app, ["diagnose", str(nondefault_log(tmp_path, args)), *flags])
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert result.exit_code == 0, result.stderr
        assert note in " ".join(result.stdout.split())


def test_a_logs_tp_the_model_cannot_take_is_a_note_even_with_flags(tmp_path: Path) -> None:
    # was: "Error: --tp 5 does not divide ..." (exit 2) when any flag was given, blaming a flag
    # the user never passed
    log = nondefault_log(tmp_path, "'tensor_parallel_size': 5")
    dg = diagnose_file(log, gpu=gpu("h100"))
    assert "tp" not in dg.settings
    assert any("--tp 5 does not divide" in n and "defaults for tp" in n for n in dg.notes), dg.notes
    result = runner.invoke(app, ["diagnose", str(log), "--gpu", "h100", "--tp", "3"])
    assert result.exit_code == 2 and "--tp 3 does not divide" in result.stderr  # the user's own


# ------------------------------------------------------------------ settings, layered


def test_the_logs_settings_are_layered_as_serve_settings() -> None:
    # planner.diagnose.settings' worked example: everything from the V0 log, nothing given
    from planner.deployment import ServeSettings
    from planner.diagnose.settings import layer_settings

    log = parse_log(V0_A100.read_text())
    layered = layer_settings(log, {})
    assert layered.serve == ServeSettings(
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        enable_prefix_caching=False,
        vllm_version="0.6.6.post1",  # the log's release picks the rules
    )
    assert layered.model == "Qwen/Qwen2.5-7B-Instruct"
    assert layered.sources["max_model_len"] == "log line 3"
    assert layered.sources["gpu_memory_utilization"] == "log line 8"
    assert layered.from_log() == [
        "tp",
        "pp",
        "max_model_len",
        "kv_cache_dtype",
        "enforce_eager",
        "enable_prefix_caching",
    ]
    # the command line over the log; V0's own default fraction when no line states one
    without_budget = parse_log(
        "\n".join(line for line in V0_A100.read_text().splitlines() if "x gpu_memory" not in line)
    )
    flagged = layer_settings(without_budget, {"max_model_len": 4096, "enforce_eager": True})
    assert flagged.serve.max_model_len == 4096 and flagged.serve.cuda_graph_bytes == 0
    assert flagged.stated["max_model_len"] == 4096
    assert flagged.sources["max_model_len"] == flagged.sources["enforce_eager"] == "command line"
    assert flagged.serve.gmu == flagged.stated["gpu_memory_utilization"] == 0.9
    assert flagged.sources["gpu_memory_utilization"] == "vLLM 0.6.6.post1 default"


def test_a_logs_max_model_len_of_minus_one_is_vllms_auto_fit(tmp_path: Path) -> None:
    # `vllm serve --max-model-len -1` fits the longest context the pool holds; the plan does too
    log = nondefault_log(tmp_path, "'max_model_len': -1")
    dg = diagnose_file(log, model="llama-3.1-8b", gpu=gpu("l4"))
    assert (dg.settings["max_model_len"], dg.sources["max_model_len"]) == (-1, "log line 2")
    assert not any("ignored" in note for note in dg.notes)
    p = plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("l4"),
        auto_fit_max_model_len=True,
        gpu_memory_utilization=0.9,
    )
    tokens = next(t for t in dg.terms if t.name == "KV cache tokens")
    assert tokens.plan == p.vllm.kv_cache_size_tokens


def test_a_flag_vllm_would_refuse_is_an_error_even_with_nothing_to_plan() -> None:
    # was: shown as "tp 0 (command line)" when there was no model to plan, and planned as
    # TP 1 when there was
    for flags in (["--tp", "0"], ["--tp", "0", "--model", "llama-3.1-8b", "--gpu", "h100"]):
        result = runner.invoke(app, ["diagnose", str(V1_OOM), *flags])
        assert result.exit_code == 2
        assert result.stderr.strip() == "Error: --tp must be a positive integer, got 0"


# ------------------------------------------------------------------ the verdict (issue 11)


def test_the_verdict_is_the_plans_worst_case_in_estimates_words() -> None:
    dg = diagnose_file(V0_A100, gpu=gpu("a100-40gb"))
    p = v0_plan()
    # 8,192 tokens / 16 per block = 512 blocks a request; the pool less its null block holds
    # (blocks - 1) // 512 of them, fewer than max_num_seqs: the rest queue
    running = (p.vllm.num_gpu_blocks - 1) // 512
    assert running < p.vllm.max_num_seqs
    assert (dg.outcome, dg.worst_case_running) == ("queues_at_worst_case", running)
    assert (dg.max_num_seqs, dg.max_model_len) == (p.vllm.max_num_seqs, 8192)
    assert (dg.outcome_reason, dg.outcome_source) == (None, "plan")
    result = runner.invoke(app, ["diagnose", str(V0_A100), "--gpu", "a100-40gb"])
    assert (
        f"✓ Verdict (the plan for these settings): starts, queues at worst case: {running} of "
        f"{p.vllm.max_num_seqs} requests of 8,192 tokens run at once" in result.stdout
    )


def test_a_refusal_in_the_log_is_the_verdict_unless_the_flags_change_the_settings() -> None:
    result = runner.invoke(
        app, ["diagnose", str(V1_3090), "--model", "llama-3.1-8b", "--gpu", "rtx-3090", "--json"]
    )
    data = json.loads(result.stdout)
    assert (data["outcome"], data["worst_case_running"], data["outcome_source"]) == (
        "wont_start",
        0,
        "log",
    )
    # the log's own figures: 131,072 tokens x 128 KiB = 16 GiB needed, 4.61 GiB available
    assert 131_072 * 128 * 1024 == gib(16.00)
    assert data["outcome_reason"] == (
        "one 131,072-token request needs 16.00 GiB of KV cache, 4.61 GiB available (log line 11)"
    )
    # with --max-model-len 8192 the log ran other settings: the plan's verdict, 512 blocks a
    # request
    dg = diagnose_file(V1_3090, model="llama-3.1-8b", gpu=gpu("rtx-3090"), max_model_len=8192)
    p = plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("rtx-3090"),
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        vllm_version="0.11.0",  # the log's release
    )
    running = min(p.vllm.max_num_seqs, (p.vllm.num_gpu_blocks - 1) // 512)
    assert (dg.outcome_source, dg.worst_case_running) == ("plan", running)


def test_max_model_len_minus_one_is_the_auto_fit_here_too() -> None:
    result = runner.invoke(
        app,
        ["diagnose", str(V1_3090), "--model", "llama-3.1-8b", "--gpu", "rtx-3090"]
        + ["--max-model-len", "-1", "--json"],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    p = plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("rtx-3090"),
        max_model_len=-1,
        gpu_memory_utilization=0.9,
        vllm_version="0.11.0",  # the log's release
    )
    # the auto-fit length is shorter than the model's 131,072 and starts
    assert data["max_model_len"] == p.vllm.max_model_len < 131_072
    assert data["outcome"] != "wont_start" and data["settings"]["max_model_len"] == -1


def test_a_plan_that_contradicts_a_log_that_started_gives_no_verdict() -> None:
    # the V0 log ran a 7B; planning a 70B on the same card says its weights do not fit
    dg = diagnose_file(V0_A100, model="llama-3.1-70b", gpu=gpu("a100-40gb"))
    assert dg.outcome is None
    assert any(n.startswith("the plan says vLLM won't start") for n in dg.notes)


@pytest.mark.parametrize(
    ("log", "card", "kind", "native"),
    [
        (V1_3090, "rtx-3090", "startup-max-len", False),  # Ampere, compute capability 8.6
        (V1_H100, "h100", "kv-pinned", True),  # Hopper, 9.0
    ],
)
def test_a_fix_that_suggests_fp8_kv_carries_its_caveat(
    log: Path, card: str, kind: str, native: bool
) -> None:
    dg = diagnose_file(log, model="llama-3.1-8b", gpu=gpu(card))
    finding = by_kind(dg.findings)[kind]
    assert any("fp8" in fix for fix in finding.fix)
    [caveat] = finding.caveats
    assert caveat.startswith("fp8 KV can cost accuracy without calibrated k/v scales")
    assert ("has no native fp8" in caveat) is not native
    # findings that suggest no fp8 carry none
    assert all(not f.caveats for f in dg.findings if not any("fp8" in x for x in f.fix))


# ------------------------------------------------------------------ the sampler line
# topk_topp_sampler.py's start-up lines, as public logs print them: dennislee22's 0.10.1.1 A100
# run (github.com/dennislee22/vLLM-benchmarking, log/vllm-7B-1gpuA10080GB-0.5GRAM.log at
# 608c86e) "Using FlashInfer for top-p & top-k sampling."; abinavChandar's 0.11.0 L4 run
# (github.com/abinavChandar/demo_env_l4, vllm.log at a741241) "FlashInfer is not available.
# Falling back to the PyTorch-native implementation of top-p & top-k sampling. ..."; 0.19.0's
# DEBUG line when it is off (topk_topp_sampler.py 0.19.0:57-60).
FLASHINFER_LINE = (
    "(EngineCore_DP0 pid=1) INFO 09-01 10:00:00 [topk_topp_sampler.py:50] "
    "Using FlashInfer for top-p & top-k sampling."
)
NATIVE_LINES = (
    "(EngineCore_DP0 pid=1) WARNING 10-14 03:48:52 [topk_topp_sampler.py:66] FlashInfer is not "
    "available. Falling back to the PyTorch-native implementation of top-p & top-k sampling. "
    "For the best performance, please install FlashInfer.",
    "(EngineCore pid=1) DEBUG 04-18 20:23:30 [topk_topp_sampler.py:57] FlashInfer top-p/top-k "
    "sampling is available but disabled by default. Set VLLM_USE_FLASHINFER_SAMPLER=1 to opt in "
    "after verifying accuracy for your workloads.",
)


@pytest.mark.parametrize(
    ("line", "sampler"), [(FLASHINFER_LINE, "flashinfer"), *((n, "native") for n in NATIVE_LINES)]
)
def test_the_sampler_line_is_read(line: str, sampler: str) -> None:
    log = parse_log(f"INFO x [core.py:1] started\n{line}\n")
    assert (log.sampler, log.lines["sampler"]) == (sampler, 2)


def test_diagnose_replans_with_the_sampler_the_log_names(tmp_path: Path) -> None:
    # The 0.11.0 H100 log with FlashInfer's sampler line: through 0.11.0 vLLM runs FlashInfer's
    # sampler when it imports (vllm_rules), so the plan's activation peak is the one for
    # --sampler flashinfer, not the release's default sort; without the line it stays the sort.
    text = V1_H100.read_text(encoding="utf-8")
    with_line = tmp_path / "flashinfer.log"
    with_line.write_text(f"{FLASHINFER_LINE}\n{text}", encoding="utf-8")
    settings = {"max_model_len": 16_000, "gpu_memory_utilization": 0.9, "vllm_version": "0.11.0"}
    spec = planner.load_model_spec("llama-3.1-8b")
    flash = plan_for(spec, gpu("h100"), sampler="flashinfer", **settings).vllm
    sort = plan_for(spec, gpu("h100"), **settings).vllm
    assert flash.activation_peak_bytes < sort.activation_peak_bytes

    dg = diagnose_file(with_line, model="llama-3.1-8b", gpu=gpu("h100"))
    assert (dg.settings["sampler"], dg.sources["sampler"]) == ("flashinfer", "log line 1")
    terms = {t.name: t for t in dg.terms}
    assert terms["activation peak"].plan == flash.activation_peak_bytes
    assert terms["available KV"].plan == flash.available_kv_bytes

    plain = diagnose_file(V1_H100, model="llama-3.1-8b", gpu=gpu("h100"))
    assert "sampler" not in plain.settings
    assert {t.name: t for t in plain.terms}["activation peak"].plan == sort.activation_peak_bytes


# ------------------------------------------------------------------ the MXFP4 MoE kernel line
# quantization/mxfp4.py's choice of kernel for gpt-oss's experts: "[mxfp4.py:165] Using Triton
# backend" as vllm-project/vllm#33155 (0.14.1, one H100) prints it; "Using Marlin backend" is
# the same logger.info_once at mxfp4.py 0.11.0:98 (0.18.1:166, or :105 with the
# "[get_mxfp4_backend_with_lora] " prefix). ROCm's attention line names no MoE kernel.
MXFP4_LINES = (
    ("(EngineCore_DP0 pid=1) INFO 01-27 00:31:44 [mxfp4.py:165] Using Triton backend", "triton"),
    ("(EngineCore_DP0 pid=1) INFO 10-31 15:07:20 [mxfp4.py:98] Using Marlin backend", "marlin"),
    (
        "(EngineCore_DP0 pid=1) INFO 04-01 10:00:00 [mxfp4.py:105] "
        "[get_mxfp4_backend_with_lora] Using Marlin backend",
        "marlin",
    ),
    (
        "(EngineCore_DP0 pid=1) INFO 12-09 18:49:18 [rocm.py:320] "
        "Using Triton Attention backend on V1 engine.",
        None,
    ),
)


@pytest.mark.parametrize(("line", "backend"), MXFP4_LINES)
def test_the_mxfp4_backend_line_is_read(line: str, backend: str | None) -> None:
    log = parse_log(f"INFO x [core.py:1] started\n{line}\n")
    assert log.mxfp4_backend == backend
    assert log.lines.get("mxfp4_backend") == (2 if backend else None)


def test_diagnose_replans_with_the_mxfp4_backend_the_log_names(tmp_path: Path) -> None:
    # The line is a stated setting with its source, as the sampler's is.
    text = V1_H100.read_text(encoding="utf-8")
    with_line = tmp_path / "marlin.log"
    with_line.write_text(f"{MXFP4_LINES[1][0]}\n{text}", encoding="utf-8")
    dg = diagnose_file(with_line, model="llama-3.1-8b", gpu=gpu("h100"))
    assert (dg.settings["mxfp4_backend"], dg.sources["mxfp4_backend"]) == ("marlin", "log line 1")
    plain = diagnose_file(V1_H100, model="llama-3.1-8b", gpu=gpu("h100"))
    assert "mxfp4_backend" not in plain.settings


# ------------------------------------------------------------------ vLLM >= 0.27's budget line
# From 0.27 the start-up summary reads "Actual usage is X GiB for consumed memory (weights +
# non-torch), Y GiB for peak activation, and Z GiB for CUDAGraph memory" (gpu_worker.py
# 0.31.0:930-955): Y is the transient peak plus the graph estimate the budget subtracted
# (peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate_applied,
# 0.27.1:527-529, 0.31.0:668-670) and Z the graphs captured after sizing. The estimate itself
# is "Estimated CUDA graph memory: E GiB total" (gpu_model_runner.py 0.31.0:6747-6750), and
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off with a warning (gpu_worker.py
# 0.31.0:724-733). The log below is the 0.11 fixture's start-up re-dated to 0.31.0 with those
# lines: 71.26 requested - 15.26 consumed - 1.44 peak (0.94 + the 0.50 estimate) = 54.56 GiB.
ESTIMATE_LINE = (
    "(EngineCore pid=4187) INFO 10-06 17:00:31 [gpu_model_runner.py:6748] "
    "Estimated CUDA graph memory: 0.50 GiB total"
)
DISABLED_LINE = (
    "(EngineCore pid=4187) WARNING 10-06 17:00:31 [gpu_worker.py:725] CUDA graph memory "
    "profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph "
    "memory is not accounted for during KV cache allocation, which may require lowering "
    "--gpu-memory-utilization to avoid OOM."
)
CONSUMED_LINE = (
    "(EngineCore pid=4187) INFO 10-06 17:00:41 [gpu_worker.py:955] Free memory on device "
    "(78.69/79.18 GiB) on startup. Desired GPU memory utilization is (0.9, 71.26 GiB). Actual "
    "usage is 15.26 GiB for consumed memory (weights + non-torch), 1.44 GiB for peak "
    "activation, and 0.23 GiB for CUDAGraph memory. Replace gpu_memory_utilization config "
    "with `--kv-cache-memory=58416203776` (54.40 GiB) to fit into requested memory."
)


def v031_log(tmp_path: Path, *extra: str) -> Path:
    kept = [
        line.replace("0.11.0", "0.31.0")
        for line in V1_H100.read_text(encoding="utf-8").splitlines()
        if "DEBUG" not in line and "for weight, " not in line and "Graph capturing" not in line
    ]
    # 54.56 GiB of 2 MiB blocks: 27,934 blocks, 446,944 tokens, 27.93 of 16,000 tokens
    for old, new in (
        ("Available KV cache memory: 51.38", "Available KV cache memory: 54.56"),
        ("GPU KV cache size: 420,880", "GPU KV cache size: 446,944"),
        ("per request: 26.30x", "per request: 27.93x"),
    ):
        kept = [line.replace(old, new) for line in kept]
    path = tmp_path / "v031.log"
    path.write_text("\n".join([*kept, *extra, CONSUMED_LINE]) + "\n", encoding="utf-8")
    return path


def v031_plan(**settings: object) -> planner.Plan:
    """The plan for the log's settings: Llama-3.1-8B on an H100, 16,000 tokens, gmu 0.9."""
    return plan_for(
        planner.load_model_spec("llama-3.1-8b"),
        gpu("h100"),
        max_model_len=16_000,
        gpu_memory_utilization=0.9,
        vllm_version="0.31.0",
        **settings,
    )


def test_a_027_peak_activation_is_read_less_the_graph_estimate(tmp_path: Path) -> None:
    log = parse_log(v031_log(tmp_path, ESTIMATE_LINE).read_text(encoding="utf-8"))
    assert (log.consumed_bytes, log.activation_bytes) == (gib(15.26), gib(1.44))
    assert log.cuda_graph_capture_bytes == gib(0.23) and log.cuda_graph_bytes is None
    assert log.activation_includes_graph_estimate
    assert log.budget_activation == (gib(1.44) - gib(0.50), False)  # 0.94 GiB of peak
    assert log.budget_graphs == gib(0.50)

    dg = diagnose_file(v031_log(tmp_path, ESTIMATE_LINE), model="llama-3.1-8b", gpu=gpu("h100"))
    terms = {t.name: t for t in dg.terms}
    assert terms["activation peak"].log == gib(1.44) - gib(0.50)
    assert terms["CUDA graphs"].log == gib(0.50) and "estimate" in terms["CUDA graphs"].note
    p = v031_plan()
    assert terms["activation peak"].plan == p.vllm.activation_peak_bytes
    assert terms["CUDA graphs"].plan == p.vllm.cuda_graph_bytes > 0  # 0.31 subtracts them


def test_a_027_peak_without_the_estimate_line_is_set_against_activation_and_graphs(
    tmp_path: Path,
) -> None:
    dg = diagnose_file(v031_log(tmp_path), model="llama-3.1-8b", gpu=gpu("h100"))
    terms = {t.name: t for t in dg.terms}
    cap = v031_plan().vllm
    both = terms["activation peak + graph estimate"]
    assert (both.log, both.plan) == (gib(1.44), cap.activation_peak_bytes + cap.cuda_graph_bytes)
    assert "activation peak" not in terms
    graphs = terms["CUDA graphs"]
    assert graphs.log == gib(0.23) and "captured after sizing" in graphs.note
    budget = by_kind(dg.findings)["budget"]
    # the shares: requested (71.26 logged against the plan's), weights + non-torch (15.26
    # against 14.99 + 0.25) and one for activation + graphs (1.44 against the plan's two
    # terms), no graph share apart; the last is the largest here
    assert budget.data["term"] == "activation peak + graph estimate"
    assert budget.data["term_plan_bytes"] == cap.activation_peak_bytes + cap.cuda_graph_bytes


def test_a_disabled_graph_estimate_plans_no_graph_term(tmp_path: Path) -> None:
    dg = diagnose_file(
        v031_log(tmp_path, ESTIMATE_LINE, DISABLED_LINE), model="llama-3.1-8b", gpu=gpu("h100")
    )
    log = parse_log(v031_log(tmp_path, ESTIMATE_LINE, DISABLED_LINE).read_text("utf-8"))
    assert log.graph_estimate_disabled
    assert log.budget_activation == (gib(1.44), False) and log.budget_graphs == 0
    assert {t.name: t for t in dg.terms}["CUDA graphs"].plan == 0
    assert {t.name: t for t in dg.terms}["activation peak"].log == gib(1.44)


# vLLM >= 0.21 logs the graphs it will capture per mode before it estimates them, and after the
# capture what they took beside the estimate (gpu_model_runner.py 0.30.0:6683-6697,
# gpu_worker.py 0.30.0:818-833). The line formats are vLLM's; the figures here are the v031
# log's own (an estimate of 0.50 GiB, a capture of 0.23).
MODES_LINE = (
    "(EngineCore pid=4187) INFO 10-06 17:00:30 [gpu_model_runner.py:6681] Profiling CUDA graph "
    "memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
)


def pool_line(actual: str, estimated: str) -> str:
    return (
        "(EngineCore pid=4187) INFO 10-06 17:00:40 [gpu_worker.py:826] CUDA graph pool memory: "
        f"{actual} GiB (actual), {estimated} GiB (estimated), difference: 0.27 GiB (117.4%)."
    )


def pool_log(tmp_path: Path, actual: str, estimated: str, *extra: str) -> Path:
    """The v031 log with the pool line and its summary's CUDAGraph figure (the same capture,
    gpu_worker.py 0.30.0:853-882) at ``actual``."""
    path = v031_log(tmp_path, *extra, pool_line(actual, estimated))
    text = path.read_text("utf-8").replace("0.23 GiB for CUDAGraph", f"{actual} GiB for CUDAGraph")
    path.write_text(text, encoding="utf-8")
    return path


def test_the_graph_modes_and_the_pool_line_are_read(tmp_path: Path) -> None:
    log = parse_log(
        pool_log(tmp_path, "0.23", "0.50", MODES_LINE, ESTIMATE_LINE).read_text("utf-8")
    )
    assert log.cuda_graph_modes == {"PIECEWISE": (51, 512), "FULL": (35, 256)}
    assert (log.cuda_graph_estimate_bytes, log.cuda_graph_capture_bytes) == (gib(0.50), gib(0.23))
    encoder = parse_log(
        "Profiling CUDA graph memory: PIECEWISE=3 (largest=4), ENCODER=2 (largest=16384)\n"
    )
    assert encoder.cuda_graph_modes == {"PIECEWISE": (3, 4), "ENCODER": (2, 16384)}


def test_the_logged_graph_counts_are_set_against_the_plans(tmp_path: Path) -> None:
    # Llama-3.1-8B at 256 sequences, vLLM 0.31 (above 512 batched tokens): 1, 2, 4, 8 ... 248,
    # 256 ... 512 = 3 + 31 + 17 = 51 PIECEWISE sizes, and the 35 of them up to 256 as FULL
    # decode graphs
    path = v031_log(tmp_path, MODES_LINE)
    dg = diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100"), max_num_seqs=256)
    terms = {t.name: t for t in dg.terms}
    assert (terms["CUDA graphs (PIECEWISE)"].log, terms["CUDA graphs (FULL)"].log) == (51, 35)
    planned = (terms["CUDA graphs (PIECEWISE)"].plan, terms["CUDA graphs (FULL)"].plan)
    assert planned == (51, 35) and terms["CUDA graphs (FULL)"].note == ""
    # at vLLM's H100 default of 1,024 sequences every size is a decode size: 51 FULL graphs
    wide = diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100"), max_num_seqs=1024)
    full = {t.name: t for t in wide.terms}["CUDA graphs (FULL)"]
    assert (full.log, full.plan) == (35, 51)
    assert full.note == "largest 256 tokens logged, 512 planned"


def test_an_estimate_above_the_capture_is_kv_memory_the_gpu_had(tmp_path: Path) -> None:
    path = pool_log(tmp_path, "0.23", "0.50", ESTIMATE_LINE)
    f = by_kind(diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100")).findings)
    over = f["graph-estimate"]
    assert over.severity == "warning"
    assert over.data["gap_bytes"] == gib(0.50) - gib(0.23)
    # 0.27 GiB of the log's 446,944 tokens in 54.56 GiB: 2,212 tokens
    assert over.data["gap_tokens"] == round((gib(0.50) - gib(0.23)) * 446_944 / gib(54.56))
    # the pool the budget held: 54.56 + 0.50 - 0.23 GiB less vLLM's 150 MiB margin
    kv = gib(54.56) + gib(0.50) - gib(0.23) - 150 * 2**20
    assert over.data["kv_cache_memory_bytes"] == kv
    assert over.fix[0].startswith(f"--kv-cache-memory-bytes {kv} (54.68 GiB")
    assert "0.27 GiB (2,212 tokens) smaller than the GPU allows" in over.text()


def test_a_capture_above_the_estimate_runs_past_the_budget(tmp_path: Path) -> None:
    # vllm#57936's B200 figures (57.45 GiB estimated and applied, 63.99 captured) in the v031
    # log's lines: the capture took 6.54 GiB more than the budget held; on 79.18 GiB at gmu 0.9,
    # 0.9 - 6.54 / 79.18 = 0.817 -> 0.81 keeps it inside
    path = pool_log(tmp_path, "63.99", "57.45")
    under = by_kind(diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100")).findings)
    g = under["graph-estimate"]
    assert g.data["gap_bytes"] == gib(57.45) - gib(63.99) < 0
    assert g.data["fitting_gpu_memory_utilization"] == 0.81
    assert g.fix == [
        "gpu_memory_utilization 0.81 keeps the capture inside the budget",
        "--enforce-eager (no graphs)",
    ]
    assert "runs 6.54 GiB past gpu_memory_utilization's budget" in g.text()


@pytest.mark.parametrize(
    "extra",
    [
        # within 0.2 GiB: vllm#50576 logs "2.51 GiB (actual), 2.44 GiB (estimated)"
        ("2.51", "2.44"),
        # the estimate was not applied: wtdcode/vllm-backport#34 logs "0.1 GiB (actual), 0.58
        # GiB (estimated)" beside VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0's warning
        ("0.1", "0.58", DISABLED_LINE),
        # a free-memory reading that went backwards (vllm#44740: -20.50 GiB estimated on GB10)
        ("0.73", "-20.50"),
    ],
)
def test_no_graph_estimate_finding_when_it_says_nothing(tmp_path: Path, extra: tuple[str]) -> None:
    path = pool_log(tmp_path, *extra)
    kinds = by_kind(diagnose_file(path, model="llama-3.1-8b", gpu=gpu("h100")).findings)
    assert "graph-estimate" not in kinds


# "Current kv cache memory in use is X GiB" ends the same summary line and is the available KV
# itself (available_kv_cache_memory_bytes, gpu_worker.py 0.20.0:659-660, 0.27.1:785-786,
# 0.31.0:951-952). kubesimplify's post on Qwen3-235B-A22B-FP8 over four RTX PRO 6000 at TP 4
# (vLLM 0.27.1, the record kubesimplify-4xrtxpro6000-qwen3-235b-fp8-tp4-len32k in
# tests/data/vllm_startups.json) quotes that line and not the "Available KV cache memory" one.
KUBESIMPLIFY_TP4 = """\
(APIServer pid=1) INFO 08-21 18:17:00 [api_server.py:1839] vLLM API server version 0.27.1
(Worker_TP0 pid=770) INFO 08-21 18:18:05 [gpu_model_runner.py:5405] Model loading took 55.19 GiB \
memory and 48.502592 seconds
(EngineCore pid=558) INFO 08-21 18:21:55 [kv_cache_utils.py:2235] GPU KV cache size: 621,392 \
tokens
(EngineCore pid=558) INFO 08-21 18:21:55 [kv_cache_utils.py:2236] Maximum concurrency for \
32,768 tokens per request: 18.96x
(Worker_TP1 pid=771) INFO 08-21 18:22:06 [gpu_worker.py:789] Free memory on device \
(94.05/95.01 GiB) on startup. Desired GPU memory utilization is (0.9, 85.51 GiB). Actual usage \
is 56.89 GiB for consumed memory (weights + non-torch), 0.76 GiB for peak activation, and 0.32 \
GiB for CUDAGraph memory. Replace gpu_memory_utilization config with \
`--kv-cache-memory=29407858586` (27.39 GiB) to fit into requested memory, or \
`--kv-cache-memory=38581581312` (35.93 GiB) to fully utilize gpu memory. Current kv cache memory \
in use is 27.85 GiB.
"""


def test_the_kv_memory_in_use_stands_for_the_available_kv(tmp_path: Path) -> None:
    path = tmp_path / "tp4.log"
    path.write_text(KUBESIMPLIFY_TP4, encoding="utf-8")
    log = parse_log(KUBESIMPLIFY_TP4)
    assert log.kv_in_use_bytes == log.available_kv_bytes == gib(27.85)
    assert log.available_from_in_use and log.lines["available_kv_bytes"] == 5
    dg = diagnose_file(
        path,
        model="qwen3-235b-a22b-fp8",
        gpu=gpu("rtx-pro-6000"),
        tp=4,
        max_model_len=32_768,
        max_num_seqs=32,
    )
    terms = {t.name: t for t in dg.terms}
    assert terms["available KV"].log == gib(27.85) and "in use" in terms["available KV"].note
    budget = by_kind(dg.findings)["budget"]
    # 56.89 GiB of weights + non-torch logged against the plan's weights + 0.39 non-torch a
    # rank (0.25 + 0.14 over PCIe) is the largest share; the 0.76 peak holds the estimate
    assert budget.data["term"] == "weights + non-torch"
    assert budget.data["term_log_bytes"] == gib(56.89)
    # an "Available KV cache memory" line, where there is one, is the figure read
    both = parse_log(
        KUBESIMPLIFY_TP4 + "(Worker_TP0 pid=770) INFO 08-21 18:22:06 "
        "[gpu_worker.py:692] Available KV cache memory: 27.86 GiB\n"
    )
    assert both.available_kv_bytes == gib(27.86) and not both.available_from_in_use
