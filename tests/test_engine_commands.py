"""Every command ``kvplan estimate`` prints parses under its engine's own option table and means
the plan.

The tables in ``tests/data/engine_options/`` were read from vLLM 0.33, SGLang 0.5.23 and
trtllm-serve sources (each names its files). Expected values are arithmetic shown here, the
engines' spellings from those sources, or the plan's own JSON figures the command must repeat.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.commands import TRTLLM_FILE, engine_commands
from planner.engine_budgets import EngineCapacity
from planner.plan_types import Recommended
from tests.helpers import (
    ENGINE_OPTIONS,
    CommandError,
    check_command,
    check_config_file,
    option_table,
)

runner = CliRunner()
GIB = 1 << 30
VLLM, SGLANG, TRTLLM = (option_table(e) for e in ("vllm", "sglang", "trtllm"))

# The engines' spellings of kvplan's --kv-cache-dtype, from their sources: vLLM 0.33
# CacheConfig.cache_dtype; SGLang 0.5.23 --kv-cache-dtype choices (fp8 is e4m3, no float16);
# TRT-LLM kv_cache_config.dtype (auto and fp8 acted on). None: the command leaves it out.
KV: dict[str, dict[str, str | None]] = {
    "auto": {"vllm": None, "sglang": None, "trtllm": None},
    "fp8": {"vllm": "fp8", "sglang": "fp8_e4m3", "trtllm": "fp8"},
    "bf16": {"vllm": "bfloat16", "sglang": "bf16", "trtllm": None},
    "fp16": {"vllm": "float16", "sglang": None, "trtllm": None},
    "fp8_e5m2": {"vllm": "fp8_e5m2", "sglang": "fp8_e5m2", "trtllm": None},
}
# All three are bf16 checkpoints (config.json torch_dtype bfloat16, no KV scales): auto is bf16,
# so an engine that cannot be told bf16 loses nothing, and one that cannot be told fp16 or
# fp8_e5m2 stores bf16 instead, which a plan note must say.
AUTO = "bf16"

# (model, the GPU its defaults fit on)
MODELS = {
    "dense": ("llama-3.1-8b", "h100"),
    "mla": ("deepseek-v2-lite", "h100"),
    "hybrid": ("nvidia-nemotron-3-nano-30b-a3b-bf16", "h200"),
}
VARIANTS: list[list[str]] = [
    [],
    ["--tp", "2"],
    ["--pp", "2"],
    ["--tp", "2", "--pp", "2"],
    ["--kv-cache-dtype", "fp8"],
    ["--kv-cache-dtype", "bf16"],
    ["--kv-cache-dtype", "fp16"],
    ["--kv-cache-dtype", "fp8_e5m2"],
    ["--kv-cache-dtype", "fp8", "--tp", "2", "--max-model-len", "8192"],
    ["--enforce-eager", "--no-enable-prefix-caching", "--max-num-batched-tokens", "4096"],
    ["--max-model-len", "8192"],
    ["--gpu-memory", "96GiB"],  # a custom size instead of the catalog GPU
    ["--kv-cache-memory", "6GiB", "--max-model-len", "32768"],  # a KV pool, no GPU
    # the user's batch limit and fraction are every engine's (issue 21, item 4)
    ["--max-num-seqs", "64", "--gpu-memory-utilization", "0.9"],
    # the full-length worst case, as each engine's own pool holds it, only when asked for
    ["--worst-case", "--max-model-len", "16384"],
]


def _flag(args: list[str], name: str, default: str | None = None) -> str | None:
    return args[args.index(name) + 1] if name in args else default


def _estimate(model: str, gpu: str, variant: list[str]) -> dict[str, Any]:
    args = ["estimate", model, *variant, "--json"]
    if "--gpu-memory" not in variant and "--kv-cache-memory" not in variant:
        args += ["--gpu", gpu]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output  # 1: won't start, still a plan
    data: dict[str, Any] = json.loads(result.stdout)
    return data


CASES = [
    pytest.param(model, gpu, variant, id=f"{kind}-{'_'.join(variant) or 'defaults'}")
    for kind, (model, gpu) in MODELS.items()
    for variant in VARIANTS
]


@pytest.mark.parametrize(("model", "gpu", "variant"), CASES)
def test_every_command_parses_and_means_the_plan(model: str, gpu: str, variant: list[str]) -> None:
    data = _estimate(model, gpu, variant)
    commands, files, notes = data["commands"], data["command_files"], data["plan_notes"]
    assert set(commands) == {"vllm", "sglang", "trtllm"}
    vllm = check_command(commands["vllm"], VLLM)
    sglang = check_command(commands["sglang"], SGLANG)
    trt = check_command(commands["trtllm"], TRTLLM)

    tp, pp = int(_flag(variant, "--tp", "1") or 1), int(_flag(variant, "--pp", "1") or 1)
    dtype = _flag(variant, "--kv-cache-dtype", "auto") or "auto"
    rec = data["recommended"]
    length = rec["max_model_len"] if rec else data["max_model_len"]
    engines = {e["engine"]: e for e in data["engines"]}
    budget = data["vllm"]["max_num_batched_tokens"]  # vLLM's resolved token budget

    # vLLM: the model, the parallel sizes, the recommended length and sequences
    assert vllm["model"] == data["model"]
    assert vllm["--tensor-parallel-size"] == tp
    assert vllm.get("--pipeline-parallel-size", 1) == pp
    assert vllm["--max-model-len"] == length
    if rec:  # without the flag vLLM picks its own default, which the plan kept
        assert vllm.get("--max-num-seqs", data["vllm"]["max_num_seqs"]) == rec["max_num_seqs"]
    assert vllm.get("--kv-cache-dtype") == KV[dtype]["vllm"]
    if "--kv-cache-memory" in variant:
        # integer bytes: 6 x 2^30, and the pool the plan sized
        assert vllm["--kv-cache-memory-bytes"] == 6 * GIB == data["available_kv_bytes"]
        assert "--gpu-memory-utilization" not in vllm
    else:
        assert vllm["--gpu-memory-utilization"] == data["gpu_memory_utilization"]
    assert vllm.get("--enforce-eager", False) is ("--enforce-eager" in variant)
    prefix_off = "--no-enable-prefix-caching" in variant
    assert vllm.get("--enable-prefix-caching", True) is not prefix_off
    assert vllm.get("--max-num-batched-tokens") == (
        int(_flag(variant, "--max-num-batched-tokens") or 0) or None
    )

    # SGLang: exact option names, SGLang's spellings, its own plan's fraction and batch limit
    assert sglang["--model-path"] == data["model"]
    assert sglang["--tp-size"] == tp
    assert sglang.get("--pp-size", 1) == pp
    assert sglang["--context-length"] == length
    assert sglang.get("--kv-cache-dtype") == KV[dtype]["sglang"]
    # every engine admits as vLLM's plan does: the user's max_num_seqs, else the engine's own
    # default; the full-length worst case of that engine's pool only with --worst-case
    users_seqs = _flag(variant, "--max-num-seqs")
    admits = int(users_seqs) if users_seqs else None
    worst_case = "--worst-case" in variant
    if users_seqs and "--gpu-memory-utilization" in variant:
        gmu = float(_flag(variant, "--gpu-memory-utilization") or 0)
        assert engines["sglang"]["fraction"] == gmu == engines["trtllm"]["fraction"]
    if "sglang" in engines:
        own = engines["sglang"]
        assert sglang["--mem-fraction-static"] == own["fraction"]
        fit = own["max_total_tokens"] // length  # requests of full length its pool holds
        expected = fit if worst_case and 0 < fit < own["max_running_requests"] else admits
        assert sglang.get("--max-running-requests") == expected
    else:  # no GPU: nothing derived, SGLang's own defaults stay
        assert "--mem-fraction-static" not in sglang
        assert sglang.get("--max-running-requests") == admits

    # TRT-LLM: the token budget its figures assumed, its own batch limit, the dtype in the file
    assert trt["model"] == data["model"]
    assert trt["--tensor_parallel_size"] == tp
    assert trt.get("--pipeline_parallel_size", 1) == pp
    assert trt["--max_seq_len"] == length
    assert trt["--max_num_tokens"] == budget
    assert trt.get("--enable_chunked_prefill", False) is (budget < length)
    if "trtllm" in engines and worst_case:
        own = engines["trtllm"]
        assert trt.get("--max_batch_size") == (own["max_running_requests"] or None)
    else:  # TRT-LLM's own default stays unless the user gave one
        assert trt.get("--max_batch_size") == admits
    wanted = KV[dtype]["trtllm"]
    if wanted is None:
        assert files == {} and "--config" not in trt
        fraction = trt.get("--free_gpu_memory_fraction")
    else:
        assert trt["--config"] == TRTLLM_FILE and set(files) == {TRTLLM_FILE}
        config = check_config_file(files[TRTLLM_FILE], TRTLLM)["kv_cache_config"]
        assert config["dtype"] == wanted
        # trtllm-serve replaces its kv_cache_config with the file's: the fraction moves there
        assert "--free_gpu_memory_fraction" not in trt
        fraction = config.get("free_gpu_memory_fraction")
    assert fraction == (engines["trtllm"]["fraction"] if "trtllm" in engines else None)

    # a dtype an engine cannot be told is never dropped silently
    for key, engine in (("sglang", "SGLang"), ("trtllm", "TRT-LLM")):
        said = [n for n in notes if n.startswith(engine) and f"not the {dtype}" in n]
        assert bool(said) is (dtype not in ("auto", AUTO) and KV[dtype][key] is None)


def test_fp8_e5m2_note_names_what_trtllm_stores() -> None:
    data = _estimate("llama-3.1-8b", "h100", ["--kv-cache-dtype", "fp8_e5m2"])
    [note] = [n for n in data["plan_notes"] if n.startswith("TRT-LLM")]
    assert "acts on auto and fp8 (e4m3) only" in note
    assert "stores its model's bf16, not the fp8_e5m2" in note


def test_vllm_token_budget_is_the_one_trtllm_gets() -> None:
    # vLLM 0.33 get_batch_defaults: an H100 (79.18 GiB: >= 70 GiB, not an A100) gets 8,192
    # tokens; an A100 takes the small-GPU 2,048.
    h100 = check_command(_estimate("llama-3.1-8b", "h100", [])["commands"]["trtllm"], TRTLLM)
    a100 = check_command(_estimate("llama-3.1-8b", "a100-80gb", [])["commands"]["trtllm"], TRTLLM)
    assert (h100["--max_num_tokens"], a100["--max_num_tokens"]) == (8192, 2048)


def test_the_text_output_writes_the_file_the_command_reads() -> None:
    args = ["estimate", "llama-3.1-8b", "--gpu", "h100", "--kv-cache-dtype", "fp8", "--details"]
    text = runner.invoke(app, args).stdout
    [yaml_text] = _estimate("llama-3.1-8b", "h100", ["--kv-cache-dtype", "fp8"])[
        "command_files"
    ].values()
    # a heredoc to paste as it is printed, then the command that reads the file
    assert f"\ncat > {TRTLLM_FILE} <<'EOF'\n{yaml_text}EOF\n" in text
    assert f"--extra_llm_api_options {TRTLLM_FILE}" in text


# --------------------------------------------------------------------------- int8


# int8 is refused for vLLM and SGLang: tests/test_cli_errors.py


def test_int8_kv_stays_for_trtllm() -> None:
    result = runner.invoke(
        app,
        ["estimate", "llama-3.1-8b", "--engine", "trtllm", "--kv-cache-dtype", "int8", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kv_dtype_bytes"] == 1


def _commands_for(dtype: str, auto: str = "bf16") -> Any:
    """engine_commands for a small hand-made plan: 8,192 tokens, 4 sequences at worst case
    (--worst-case), and pools of 100,000 tokens (SGLang, its default 2,048 requests) and
    3,125 x 32 tokens (TRT-LLM)."""
    rec = Recommended(
        max_model_len=8192,
        max_num_seqs=4,
        gpu_memory_utilization=0.92,
        block_size=16,
        kv_cache_dtype=dtype,
        kv_usage=0.5,
        reason="",
        basis="worst_case",
    )
    sglang = EngineCapacity("sglang", "", 0.83, 0, 100_000, 2048, 12.2, "")
    trtllm = EngineCapacity("trtllm", "", 0.9, 0, 100_000, 12, 12.2, "")
    return engine_commands(
        "org/model",
        rec,
        tp=1,
        pp=1,
        kv_cache_dtype=dtype,
        auto_kv_dtype=auto,
        token_budget=8192,
        sglang=sglang,
        trtllm=trtllm,
    )


def test_int8_is_left_out_with_a_note_not_dropped() -> None:
    out = _commands_for("int8")
    sglang = check_command(out.commands["sglang"], SGLANG)
    trt = check_command(out.commands["trtllm"], TRTLLM)
    vllm = check_command(out.commands["vllm"], VLLM)
    assert "--kv-cache-dtype" not in sglang and "--kv-cache-dtype" not in vllm
    assert out.files == {} and "--config" not in trt
    by_engine = {n.split(" ")[0]: n for n in out.notes}
    assert set(by_engine) == {"vLLM", "SGLang", "TRT-LLM"}
    assert "INT8-KV checkpoint" in by_engine["TRT-LLM"]
    assert "SGLang has no int8 KV cache" in by_engine["SGLang"]
    # --worst-case: 100,000 // 8,192 = 12 requests of full length, fewer than SGLang's
    # default 2,048; TRT-LLM's pool holds 12 too
    assert sglang["--max-running-requests"] == 12
    assert trt["--max_batch_size"] == 12
    # 8,192 tokens a step is the whole context: no chunked prefill needed
    assert "--enable_chunked_prefill" not in trt


def test_fp16_is_no_loss_where_auto_is_fp16() -> None:
    # an fp16 checkpoint: SGLang's and TRT-LLM's auto store fp16 already
    out = _commands_for("fp16", auto="fp16")
    assert out.notes == []
    assert check_command(out.commands["vllm"], VLLM)["--kv-cache-dtype"] == "float16"


def test_a_pool_that_holds_no_full_request_keeps_the_engine_default_and_says_so() -> None:
    rec = Recommended(
        max_model_len=8192,
        max_num_seqs=1,
        gpu_memory_utilization=0.92,
        block_size=16,
        kv_cache_dtype="bf16",
        kv_usage=0.9,
        reason="",
        basis="worst_case",
    )
    tiny = EngineCapacity("sglang", "", 0.83, 0, 4096, 2048, 0.5, "")
    out = engine_commands(
        "org/model", rec, tp=1, pp=1, kv_cache_dtype="auto", sglang=tiny, token_budget=2048
    )
    assert "--max-running-requests" not in check_command(out.commands["sglang"], SGLANG)
    assert out.notes == [
        "SGLang's KV pool (4,096 tokens) holds no request of 8,192 tokens: its command keeps "
        "SGLang's default batch limit"
    ]


# --------------------------------------------------------------------------- the checker


# What kvplan printed for SGLang and TRT-LLM before this change (Llama-3.1-8B on an H100).
BEFORE_SGLANG = (
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp 1 "
    "--context-length 131072 --max-running-requests 2 --mem-fraction-static 0.829"
)


@pytest.mark.parametrize(
    ("command", "table", "error"),
    [
        # argparse expands --tp to --tp-size; kvplan must not lean on that
        (BEFORE_SGLANG, SGLANG, "sglang has no option --tp (exact names only)"),
        # and --pp is ambiguous: --pp-size, --pp-max-micro-batch-size, --pp-async-batch-depth
        ("python -m sglang.launch_server --model-path m --pp 2", SGLANG, "no option --pp "),
        ("vllm serve m --kv-cache-dtype int8", VLLM, "--kv-cache-dtype takes one of"),
        ("python -m sglang.launch_server --kv-cache-dtype float16", SGLANG, "takes one of"),
        ("trtllm-serve m --kv_cache_dtype fp8", TRTLLM, "trtllm has no option --kv_cache_dtype"),
        ("vllm serve m --max-model-len 8192.5", VLLM, "--max-model-len takes an integer"),
        ("vllm serve m --gpu-memory-utilization 1.2", VLLM, "must be at most 1"),
        ("vllm serve m --gpu-memory-utilization 0", VLLM, "must be above 0"),
        ("vllm serve m --max-num-seqs", VLLM, "--max-num-seqs needs a value"),
        ("vllm serve m --enforce-eager true", VLLM, "unexpected argument 'true'"),
        ("vllm serve m --enforce-eager=true", VLLM, "--enforce-eager takes no value"),
        ("vllm serve m -tp 1 --tensor-parallel-size 2", VLLM, "-tp is already given"),
        (
            "vllm serve m --enable-prefix-caching --disable-prefix-caching",
            VLLM,
            "--enable-prefix-caching is already given",
        ),
        ("vllm serve", VLLM, "missing model"),
        ("python -m sglang.launch_server extra", SGLANG, "unexpected argument 'extra'"),
        ("sglang serve --model-path m", SGLANG, "not a sglang command"),
    ],
)
def test_the_checker_refuses(command: str, table: Any, error: str) -> None:
    with pytest.raises(CommandError) as exc:
        check_command(command, table)
    assert error in str(exc.value)


def test_the_checker_reads_values_as_their_types() -> None:
    parsed = check_command(
        "vllm serve org/m -tp 2 --max-model-len 8192 --gpu-memory-utilization 0.9 "
        "--no-enable-prefix-caching --kv-cache-dtype fp8",
        VLLM,
    )
    assert parsed == {
        "model": "org/m",
        "--tensor-parallel-size": 2,
        "--max-model-len": 8192,
        "--gpu-memory-utilization": 0.9,
        "--enable-prefix-caching": False,
        "--kv-cache-dtype": "fp8",
    }


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("kv_cache_config:\n  dtype: int8\n", "takes one of"),
        ("kv_cache_config:\n  dtype: fp8\n  free_gpu_memory_fraction: 1.5\n", "at most 1"),
        ("kv_cache_config:\n  kv_cache_dtype: fp8\n", "no key 'kv_cache_dtype'"),
        ("kv_cache_dtype: fp8\n", "no section 'kv_cache_dtype'"),
    ],
)
def test_the_config_checker_refuses(text: str, error: str) -> None:
    with pytest.raises(CommandError) as exc:
        check_config_file(text, TRTLLM)
    assert error in str(exc.value)


def test_the_tables_name_their_sources() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        head = json.loads((ENGINE_OPTIONS / f"{engine}.json").read_text())
        assert head["engine"] == engine and head["version"] and head["source"]


def test_without_worst_case_or_traffic_every_engine_keeps_its_own_default_limit() -> None:
    # the plan keeps vLLM's default max_num_seqs (basis engine_default): SGLang derives its own
    # max_running_requests and TRT-LLM keeps its max_batch_size, as vllm serve keeps its own
    rec = Recommended(
        max_model_len=8192,
        max_num_seqs=1024,
        gpu_memory_utilization=0.92,
        block_size=16,
        kv_cache_dtype="bf16",
        kv_usage=0.5,
        reason="",
    )
    sglang = EngineCapacity("sglang", "", 0.83, 0, 100_000, 2048, 12.2, "")
    trtllm = EngineCapacity("trtllm", "", 0.9, 0, 100_000, 12, 12.2, "")
    out = engine_commands(
        "org/model", rec, tp=1, pp=1, kv_cache_dtype="auto", sglang=sglang, trtllm=trtllm
    )
    assert "--max-running-requests" not in check_command(out.commands["sglang"], SGLANG)
    assert "--max_batch_size" not in check_command(out.commands["trtllm"], TRTLLM)
    assert "--max-num-seqs" in out.commands["vllm"]  # no default given to compare with


def test_prefix_caching_is_stated_where_the_release_default_differs() -> None:
    # a hybrid before vLLM 0.26 runs without prefix caching unless told (config/model.py
    # 0.25.0:1883-1887): the plan follows that default and the command needs no flag for it;
    # asked for, the plan keeps the extra Mamba pages and the command must ask vLLM too
    model = MODELS["hybrid"][0]
    default = _estimate(model, "h200", ["--vllm-version", "0.19.0"])
    on = _estimate(model, "h200", ["--vllm-version", "0.19.0", "--enable-prefix-caching"])
    off = _estimate(model, "h200", ["--no-enable-prefix-caching"])
    assert "prefix-caching" not in default["commands"]["vllm"]
    assert default["vllm"]["mamba_cache_mode"] == "none"
    assert on["vllm"]["mamba_cache_mode"] == "align"
    assert check_command(on["commands"]["vllm"], VLLM)["--enable-prefix-caching"] is True
    assert "--no-enable-prefix-caching" in off["commands"]["vllm"]
