"""The option tables of vLLM, SGLang and trtllm-serve kvplan's commands are checked against, and
the strict parser that checks them (tests/helpers.py: check_command, check_config_file).

The tables in ``tests/data/engine_options/`` were read from vLLM 0.33, SGLang 0.5.23 and
trtllm-serve sources (each names its files).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import (
    ENGINE_OPTIONS,
    CommandError,
    check_command,
    check_config_file,
    option_table,
)

VLLM, SGLANG, TRTLLM = (option_table(e) for e in ("vllm", "sglang", "trtllm"))


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
