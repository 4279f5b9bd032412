"""The catalogue of bad inputs: every command, each input named, with the exact message fragment
and exit code it must end in (exit 1: the input's content; 2: a flag or a file the user can fix;
3 is `verify`'s failed gate and never a bad input). Whatever the input, the output is one
`Error:` line on stderr, nothing on stdout and no traceback.

Rows marked `# was:` crashed, hung or ran out of memory before the hardening; the note
says how.
"""

# ruff: noqa: E501  (expected messages stay on one line each, as the user reads them)

from __future__ import annotations

import json
import os
import signal
import struct
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from planner.cli import app
from tests.conftest import fixture_config

ROOT = Path(__file__).resolve().parents[1]
CHAT = str(ROOT / "examples" / "workloads" / "chat.yaml")
PLANS = (ROOT / "examples" / "plans.yaml").read_text()
LLAMA = json.loads(fixture_config("meta-llama--Llama-3.1-8B").read_text())
QWEN3_MOE = json.loads(fixture_config("Qwen--Qwen3-30B-A3B").read_text())
BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
    for i in range(8)
)  # nine levels of ten: 10^9 strings once expanded, 0.5 KiB on disk
NESTED_BOMB = ", ".join(
    ["&a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"&{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
)  # the same bomb inside one flow list, as a value kvplan reads
Builder = Callable[[Path], list[str]]


def model_dir(tmp: Path, config: dict[str, Any], header: bytes | None = None) -> str:
    """``<tmp>/m/config.json`` (and ``model.safetensors`` starting with ``header``)."""
    folder = tmp / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if header is not None:
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return str(folder)


def file(tmp: Path, name: str, text: str | bytes) -> str:
    path = tmp / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def device(tmp: Path, name: str, target: str = "/dev/zero") -> str:
    """``name`` in tmp, a link to an endless device (the name's suffix picks the reader)."""
    link = tmp / name
    os.symlink(target, link)
    return str(link)


def simulate(t: Path, name: str, text: str) -> list[str]:
    """``kvplan simulate`` of a small model on an H100 with the workload ``text`` as ``name``."""
    return ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", file(t, name, text)]


def saved_plan(**changes: Any) -> str:
    plan = json.loads(
        CliRunner()
        .invoke(app, ["estimate", "qwen3-0.6b", "--max-model-len", "256", "--json"])
        .stdout
    )
    plan.update(changes)
    return json.dumps(plan)


def row(id: str, code: int, fragment: str, args: list[str] | Builder) -> Any:
    builder = args if callable(args) else (lambda _tmp, a=args: list(a))
    return pytest.param(builder, code, fragment, id=id)


CATALOGUE = [
    # ------------------------------------------------------------------ estimate: the model
    row(
        "estimate-empty-model",
        1,
        "no model given; pass a catalog name, hub id or path",
        ["estimate", ""],
    ),
    row(
        "estimate-model-name-5000-chars",  # was: OSError File name too long, traceback
        1,
        "unknown model 'aaaaaaaaaa",
        ["estimate", "a" * 5000],
    ),
    row(
        "estimate-unknown-home-dir",  # was: RuntimeError Could not determine home directory
        1,
        "no such file or directory: ~nosuchuser-kvplan/config.json",
        ["estimate", "~nosuchuser-kvplan/config.json"],
    ),
    row(
        "estimate-config-list-not-object",
        1,
        "config.json must hold a JSON object, not list",
        lambda t: ["estimate", file(t, "config.json", "[1]")],
    ),
    row(
        "estimate-config-hidden-size-401-digits",  # was: OverflowError int too large to convert to float
        1,
        "config.json:1: hidden_size: an integer of 401 digits is out of range; kvplan reads numbers below 2^63",  # the reader refuses it (issue 26)
        lambda t: ["estimate", model_dir(t, {**LLAMA, "hidden_size": 10**400}), "--gpu", "h100"],
    ),
    row(
        "estimate-config-moe-size-as-string",  # was: TypeError, and "1536" * n built a huge string
        1,
        "moe_intermediate_size must be a whole number from 0 to 1,099,511,627,776, got '768'",
        lambda t: [
            "estimate",
            model_dir(t, {**QWEN3_MOE, "moe_intermediate_size": "768"}),
            "--gpu",
            "h100",
        ],
    ),
    row(
        "estimate-config-quant-bits-word",  # was: ValueError invalid literal for int()
        1,
        "quantization_config: bits must be a whole number from 0 to 1,099,511,627,776, got 'four'",
        lambda t: [
            "estimate",
            model_dir(t, {**LLAMA, "quantization_config": {"quant_method": "awq", "bits": "four"}}),
            "--gpu",
            "h100",
        ],
    ),
    row(
        "estimate-safetensors-header-nested-deep",  # was: RecursionError
        1,
        "model.safetensors (header):1: nested more than 100 levels deep",
        lambda t: ["estimate", model_dir(t, LLAMA, b"[" * 100_000), "--gpu", "h100"],
    ),
    row(
        "estimate-safetensors-entry-not-object",  # was: AttributeError 'int' object has no attribute 'get'
        1,
        "tensor 'model.layers.0.mlp.weight' is not a JSON object",
        lambda t: [
            "estimate",
            model_dir(t, LLAMA, json.dumps({"model.layers.0.mlp.weight": 5}).encode()),
            "--gpu",
            "h100",
        ],
    ),
    row(
        "estimate-safetensors-dimension-word",  # was: ValueError invalid literal for int()
        1,
        "a dimension of 'lm_head.weight' must be a whole number",
        lambda t: [
            "estimate",
            model_dir(t, LLAMA, json.dumps({"lm_head.weight": {"shape": ["x"]}}).encode()),
            "--gpu",
            "h100",
        ],
    ),
    # ------------------------------------------------------------------ estimate: flags
    row(
        "estimate-batch-401-digits",  # was: OverflowError integer division result too large for a float
        2,
        "--batch must be at most 1,099,511,627,776 (2^40), got a 401-digit number",
        ["estimate", "llama-3.1-8b", "--batch", "1" + "0" * 400],
    ),
    row(
        "estimate-max-num-batched-tokens-301-digits",  # was: OverflowError in the memory bar
        2,
        "--max-num-batched-tokens must be at most 1,099,511,627,776 (2^40), got a 301-digit number",
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--max-num-batched-tokens", "1" + "0" * 300],
    ),
    row(
        "estimate-headroom-10^25-bytes",  # was: MemoryError drawing a bar 10^16 characters long
        2,
        "--headroom '10000000000000000000000000' is too large (at most 1 EiB",
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--headroom", "1" + "0" * 25],
    ),
    row(
        "estimate-cuda-graph-memory-10^25-bytes",  # was: MemoryError, as --headroom
        2,
        "--cuda-graph-memory '10000000000000000000000000' is too large",
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--cuda-graph-memory", "1" + "0" * 25],
    ),
    row(
        "estimate-gpu-memory-ambiguous-unit",
        2,
        "--gpu-memory '80G' is ambiguous: say 80GiB (2^30-style) or 80GB (10^9-style)",
        ["estimate", "llama-3.1-8b", "--gpu-memory", "80G"],
    ),
    row(
        "estimate-gmu-nan",
        2,
        "--gpu-memory-utilization must be in (0, 1], got nan",
        ["estimate", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization", "nan"],
    ),
    row(
        "estimate-tp-word",
        2,
        "Invalid value for '--tp'",
        ["estimate", "llama-3.1-8b", "--tp", "two"],
    ),
    # ------------------------------------------------------------------ models, gpus
    row(  # one filter is the argument; a second is extra
        "models-extra-argument",
        2,
        "Got unexpected extra argument(s) (qwen)",
        ["models", "llama", "qwen"],
    ),
    row("gpus-unknown-flag", 2, "No such option: --nope", ["gpus", "--nope"]),
    # ------------------------------------------------------------------ check
    row(
        "check-nul-in-path",  # was: ValueError embedded null byte
        2,
        "'plans\\x00.yaml': not a usable file name",
        ["check", "plans\0.yaml"],
    ),
    row(
        "check-control-character",  # was: yaml ReaderError traceback
        2,
        "plans.yaml:1: invalid YAML: control character U+001B in column 1; YAML allows printable text only",
        lambda t: ["check", file(t, "plans.yaml", "\x1b[31mdeployments: []\n")],
    ),
    row(
        "check-endless-device",
        2,
        "larger than the 1,048,576-byte limit for a plans file",
        lambda t: ["check", device(t, "plans.yaml")],
    ),
    row(
        "check-alias-bomb",
        2,
        "refused: more than 1,000,000 YAML nodes once aliases are expanded",
        lambda t: ["check", file(t, "plans.yaml", BOMB + PLANS)],
    ),
    row(
        "check-size-beyond-1-EiB",
        2,
        "gpu_memory: is too large (at most 1 EiB)",
        lambda t: [
            "check",
            file(
                t,
                "plans.yaml",
                "deployments:\n  - {name: a, model: llama-3.1-8b, gpu_memory: 1000000000000000000000000000000}\n",
            ),
        ],
    ),
    row(
        "check-output-nul-in-name",  # was: ValueError embedded null byte
        2,
        "-o 'report\\x00.xml': cannot write there: not a file name",
        lambda t: ["check", file(t, "plans.yaml", PLANS), "-f", "junit", "-o", "report\0.xml"],
    ),
    row(
        "check-output-empty-name",  # was: the misleading "-o : cannot write: Device or resource busy"
        2,
        "-o: cannot write there: not a file name",
        lambda t: ["check", file(t, "plans.yaml", PLANS), "-o", ""],
    ),
    row(
        "check-unknown-format",
        2,
        "--format 'html': use one of table, json, markdown, junit",
        ["check", "x.yaml", "-f", "html"],
    ),
    # ------------------------------------------------------------------ diagnose
    row(
        "diagnose-nul-in-path",  # was: ValueError embedded null byte
        2,
        "'vllm\\x00.log': not a usable file name",
        ["diagnose", "vllm\0.log"],
    ),
    row(
        "diagnose-number-with-two-dots",  # was: ValueError could not convert string to float
        1,
        "no vLLM line recognised",
        lambda t: ["diagnose", file(t, "vllm.log", "INFO Available KV cache memory: 1.2.3 GiB\n")],
    ),
    row(
        "diagnose-number-of-400-digits",  # was: OverflowError cannot convert float infinity to integer
        1,
        "no vLLM line recognised",
        lambda t: ["diagnose", file(t, "vllm.log", f"INFO Model loading took {'9' * 400} GiB\n")],
    ),
    row(
        "diagnose-binary-log",
        2,
        "binary file (NUL bytes), not a log file",
        lambda t: ["diagnose", file(t, "vllm.log", b"GPU KV cache size: 5 tokens\0\0")],
    ),
    row(
        "diagnose-endless-device",
        2,
        "larger than the 52,428,800-byte limit for a log file",
        lambda t: ["diagnose", device(t, "vllm.log")],
    ),
    row(
        "diagnose-unknown-gpu",
        2,
        "unknown GPU 'h1000'",
        ["diagnose", str(ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log"), "--gpu", "h1000"],
    ),
    # ------------------------------------------------------------------ simulate
    row(
        "simulate-endless-trace",  # was: MemoryError reading /dev/zero whole
        2,
        "binary file (NUL bytes on line 1), not a JSONL trace",
        lambda t: ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", device(t, "w.jsonl")],
    ),
    row(
        "simulate-nul-in-workload-path",  # was: ValueError embedded null byte
        2,
        "'w\\x00.jsonl': not a usable file name",
        ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", "w\0.jsonl"],
    ),
    row(
        "simulate-10^20-requests",  # was: hung generating 10^20 requests
        2,
        "100000000000000000000 requests is more than the 2,000,000 kvplan simulates",
        ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", CHAT, "--num-requests", "1" + "0" * 20],
    ),
    row(
        "simulate-trace-line-nested-deep",  # was: RecursionError; an invalid file: exit 2
        2,
        "line 1: nested more than 100 levels deep",
        lambda t: simulate(t, "w.jsonl", "[" * 50_000),
    ),
    row(
        "simulate-trace-line-of-1-MiB",
        2,
        "line 2: longer than 65,536 bytes",
        lambda t: simulate(
            t, "w.jsonl", '{"prompt_tokens": 5, "output_tokens": 5}\n"' + "x" * (1 << 20) + '"\n'
        ),
    ),
    row(
        "simulate-spec-alias-bomb",  # was: out of memory: str() of the name expanded the bomb
        2,
        "refused: more than 1,000,000 YAML nodes once aliases are expanded",
        lambda t: simulate(
            t, "w.yaml", f"name: [{NESTED_BOMB}]\nprompt_tokens: 5\noutput_tokens: 5\n"
        ),
    ),
    row(
        "simulate-spec-infinite-mean",  # was: OverflowError cannot convert float infinity to integer
        2,
        "prompt_tokens: 'mean' must be a number, got Infinity",
        lambda t: simulate(
            t, "w.yaml", "prompt_tokens: {dist: normal, mean: .inf, std: 1}\noutput_tokens: 5\n"
        ),
    ),
    row(
        "simulate-spec-arrivals-past-1e9-s",  # was: OverflowError, an infinite arrival time
        2,
        "arrivals reach inf s, past the 1e+09 s kvplan simulates",
        lambda t: simulate(
            t,
            "w.yaml",
            "num_requests: 9\narrival: {process: burst, size: 1, interval_s: 1.0e+308}\n"
            "prompt_tokens: 5\noutput_tokens: 5\n",
        ),
    ),
    row(
        "simulate-trace-arrival-1e300-s",  # was: simulated, with every latency 0.0 s
        2,
        "arrival_s 1e+300 is not a finite time >= 0 (at most 1e+09 s)",
        lambda t: simulate(
            t, "w.jsonl", '{"prompt_tokens": 5, "output_tokens": 5, "arrival_s": 1e300}\n'
        ),
    ),
    row(
        "simulate-output-nul-in-name",  # was: ValueError embedded null byte
        2,
        "-o 'out\\x00.json': cannot write there: not a file name",
        [
            "simulate",
            "llama-3.2-1b",
            "--gpu",
            "h100",
            "-w",
            CHAT,
            "--num-requests",
            "3",
            "-o",
            "out\0.json",
        ],
    ),
    row(
        "simulate-compare-unknown-axis",
        2,
        "cannot compare 'tp'; use one of: block-size",
        ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", CHAT, "--compare", "tp=1,2"],
    ),
    # ------------------------------------------------------------------ verify (fails before allocating)
    row(
        "verify-plan-endless-device",  # was: MemoryError reading /dev/zero whole
        2,
        "larger than the 1,048,576-byte limit for a kvplan estimate --json plan",
        lambda t: ["verify", "--plan", device(t, "plan.json")],
    ),
    row(
        "verify-plan-nul-in-path",  # was: ValueError embedded null byte
        2,
        "--plan 'plan\\x00.json': not a usable file name",
        ["verify", "--plan", "plan\0.json"],
    ),
    row(
        "verify-plan-nested-deep",  # was: RecursionError
        1,
        "plan.json:1: nested more than 100 levels deep",
        lambda t: ["verify", "--plan", file(t, "plan.json", "[" * 100_000)],
    ),
    row(
        "verify-plan-vllm-is-a-list",  # was: AttributeError 'list' object has no attribute 'get'
        2,
        "--device cpu needs --memory-budget SIZE",
        lambda t: ["verify", "--plan", file(t, "plan.json", saved_plan(vllm=[1]))],
    ),
    row(
        "verify-tolerance-nan",
        2,
        "--tolerance must be a percentage in [0, 100), got nan",
        ["verify", "qwen3-0.6b", "--memory-budget", "1GiB", "--tolerance", "nan"],
    ),
    row(
        "verify-decode-steps-10^9",  # was: ran a billion decode steps (a hang)
        2,
        "--decode-steps must be from 1 to 1,024",
        ["verify", "llama-3.2-1b", "--memory-budget", "4GiB", "--max-model-len", "256"]
        + ["--max-num-batched-tokens", "64", "--max-num-seqs", "8", "--decode-steps", "1000000000"],
    ),
    row("verify-hf-cache-without-model", 2, "--hf-cache needs MODEL", ["verify", "--hf-cache"]),
    row(
        "verify-memory-budget-ambiguous",
        2,
        "--memory-budget '6G' is ambiguous",
        ["verify", "qwen3-0.6b", "--memory-budget", "6G"],
    ),
]


# ---------------------------------------------------------------------- round two (issue 26)
# Rows marked `# was:` crashed or hung before issue 26. Hostile files are made here, in the
# test's folder (FIFOs with os.mkfifo, links to /dev/zero), never committed.
DIGITS = "9" * 5000  # past Python's 4,300-digit limit for int("...")
DEEP = "[" * 50_000 + "]" * 50_000  # JSON nested 50,000 deep
LIMIT = "kvplan reads numbers below 2^63"


def with_literal(obj: dict[str, Any], key: str, literal: str) -> str:
    """``obj`` as JSON with ``key`` set to the raw ``literal`` (json.dumps cannot write a
    5,000-digit integer: Python refuses to convert it to text)."""
    return json.dumps({**obj, key: "@LITERAL@"}).replace('"@LITERAL@"', literal)


def raw_model_dir(tmp: Path, config_text: str, header: bytes | None = None) -> str:
    folder = tmp / "m"
    folder.mkdir()
    (folder / "config.json").write_text(config_text)
    if header is not None:
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return str(folder)


def fifo(tmp: Path, name: str) -> str:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return str(path)


def model_with_fifo_weights(tmp: Path) -> str:
    folder = model_dir(tmp, LLAMA)
    fifo(tmp, "m/model.safetensors")
    return folder


def hub_snapshot(tmp: Path, repo: str, make: Callable[[Path], None]) -> None:
    """An HF-cache snapshot of ``repo`` (refs/main -> snapshots/<sha>) whose config.json is
    made by ``make`` (a FIFO, a link to /dev/zero)."""
    root = tmp / "hf_home" / "hub" / f"models--{repo.replace('/', '--')}"
    sha = "0" * 40
    (root / "snapshots" / sha).mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(sha)
    make(root / "snapshots" / sha / "config.json")


def adapter_to_zero(tmp: Path) -> str:
    folder = tmp / "adapter"
    folder.mkdir()
    os.symlink("/dev/zero", folder / "adapter_config.json")
    return str(folder)


def header_with(literal: str) -> bytes:
    tensor = '{"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [0, ' + literal + "]}"
    return ('{"model.embed_tokens.weight": ' + tensor + "}").encode()


def plans_with(text: str) -> Callable[[Path], list[str]]:
    return lambda t: ["check", file(t, "plans.yaml", "deployments:\n" + text)]


ROUND_TWO = [
    # reads that never end: a FIFO or a device kvplan finds by itself is refused at once
    row(
        "estimate-fifo-model-safetensors",  # was: hung reading the FIFO
        1,
        "model.safetensors: a FIFO (named pipe), not a regular file",
        lambda t: ["estimate", model_with_fifo_weights(t), "--gpu", "h100"],
    ),
    row(
        "estimate-hf-cache-config-fifo",  # was: hung reading the FIFO
        1,
        "config.json: a FIFO (named pipe), not a regular file",
        lambda t: (
            hub_snapshot(t, "acme/fifo", os.mkfifo)  # type: ignore[func-returns-value]
            or ["estimate", "acme/fifo", "--offline"]
        ),
    ),
    row(
        "estimate-hf-cache-config-dev-zero",  # was: read /dev/zero without limit
        1,
        "config.json: a character device, not a regular file",
        lambda t: (
            hub_snapshot(t, "acme/zero", lambda p: os.symlink("/dev/zero", p))  # type: ignore[func-returns-value]
            or ["estimate", "acme/zero", "--offline"]
        ),
    ),
    row(
        "estimate-lora-adapter-dev-zero",  # was: read /dev/zero without limit
        2,
        "adapter_config.json: a character device, not a regular file",
        lambda t: (
            ["estimate", "llama-3.1-8b", "--gpu", "h100", "--enable-lora"]
            + ["--lora-adapter", adapter_to_zero(t)]
        ),
    ),
    row(
        "estimate-lora-adapter-named-dev-zero",  # named on the command line: read, but bounded
        2,
        "--lora-adapter /dev/zero: larger than the 1,048,576-byte limit for a adapter_config.json",
        [
            "estimate",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--enable-lora",
            "--lora-adapter",
            "/dev/zero",
        ],
    ),
    row(
        "check-lora-adapter-dev-zero",  # was: read /dev/zero without limit
        2,
        "adapter_config.json: a character device, not a regular file",
        lambda t: plans_with(
            f"  - {{name: a, model: llama-3.1-8b, gpu: h100, enable_lora: true, lora_adapter: {adapter_to_zero(t)}}}\n"
        )(t),
    ),
    # numbers that crash: one Error line naming the file, the line and the key
    row(
        "estimate-config-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        1,
        f"config.json:1: num_hidden_layers: an integer of 5,000 digits is out of range; {LIMIT}",
        lambda t: ["estimate", raw_model_dir(t, with_literal(LLAMA, "num_hidden_layers", DIGITS))],
    ),
    row(
        "estimate-config-2-pow-63",
        1,
        f"config.json:1: vocab_size: 9223372036854775808 is out of range; {LIMIT}",
        lambda t: ["estimate", raw_model_dir(t, with_literal(LLAMA, "vocab_size", str(2**63)))],
    ),
    row(
        "estimate-config-nested-50000-deep",
        1,
        "config.json:1: nested more than 100 levels deep",
        lambda t: ["estimate", raw_model_dir(t, with_literal(LLAMA, "extra", DEEP))],
    ),
    row(
        "estimate-safetensors-header-5000-digits",  # was: ValueError Exceeds the limit
        1,
        f"model.safetensors (header):1: model.embed_tokens.weight.data_offsets[1]: an integer of 5,000 digits is out of range; {LIMIT}",
        lambda t: [
            "estimate",
            raw_model_dir(t, json.dumps(LLAMA), header_with(DIGITS)),
            "--gpu",
            "h100",
        ],
    ),
    row(
        "estimate-speculative-config-5000-digits",  # was: ValueError Exceeds the limit
        2,
        f"--speculative-config: num_speculative_tokens: an integer of 5,000 digits is out of range; {LIMIT}",
        [
            "estimate",
            "llama-3.1-8b",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": ' + DIGITS + "}",
        ],
    ),
    row(
        "estimate-speculative-config-nested-deep",  # was: RecursionError
        2,
        "--speculative-config: nested more than 100 levels deep",
        ["estimate", "llama-3.1-8b", "--speculative-config", '{"method": ' + DEEP + "}"],
    ),
    row(
        "check-plans-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        2,
        f"plans.yaml:2: deployments[0].max_model_len: an integer of 5,000 characters is out of range; {LIMIT}",
        plans_with(f"  - {{name: a, model: qwen3-0.6b, gpu: h100, max_model_len: {DIGITS}}}\n"),
    ),
    row(
        "check-plans-2-pow-63",
        2,
        "plans.yaml:3: deployments[0] (a).max_num_seqs: must be at most",  # range-checked by key
        plans_with(
            f"  - name: a\n    max_num_seqs: {2**63}\n    model: qwen3-0.6b\n    gpu: h100\n"
        ),
    ),
    row(
        "simulate-spec-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        2,  # an invalid workload file: exit 2 (issue 25)
        f"w.yaml:1: prompt_tokens: an integer of 5,000 characters is out of range; {LIMIT}",
        lambda t: simulate(t, "w.yaml", f"prompt_tokens: {DIGITS}\noutput_tokens: 5\n"),
    ),
    row(
        "simulate-trace-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        2,  # an invalid workload file: exit 2 (issue 25)
        f"line 1: prompt_tokens: an integer of 5,000 digits is out of range; {LIMIT}",
        lambda t: simulate(t, "w.jsonl", '{"prompt_tokens": ' + DIGITS + ', "output_tokens": 5}\n'),
    ),
    row(
        "simulate-trace-5000-digits-skip-bad-lines",  # was: ValueError even with --skip-bad-lines
        2,  # an invalid workload file: exit 2 (issue 25)
        "w.jsonl: the workload has no requests",
        lambda t: (
            simulate(t, "w.jsonl", '{"prompt_tokens": ' + DIGITS + ', "output_tokens": 5}\n')
            + ["--skip-bad-lines"]
        ),
    ),
    row(
        "simulate-trace-2-pow-63",  # was: OverflowError int too big to convert
        2,  # an invalid workload file: exit 2 (issue 25)
        f"line 1: prompt_tokens: 9223372036854775808 is out of range; {LIMIT}",
        lambda t: simulate(t, "w.jsonl", f'{{"prompt_tokens": {2**63}, "output_tokens": 5}}\n'),
    ),
    row(
        "simulate-trace-1e19-tokens",  # was: OverflowError int too big to convert
        2,  # an invalid workload file: exit 2 (issue 25)
        "line 1: prompt_tokens 10000000000000000000 is out of range (at most 2^63 - 1)",
        lambda t: simulate(t, "w.jsonl", '{"prompt_tokens": 1e19, "output_tokens": 5}\n'),
    ),
    row(
        "simulate-step-times-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        2,
        f"steps.json:1: [0].tokens: an integer of 5,000 digits is out of range; {LIMIT}",
        lambda t: (
            simulate(t, "w.jsonl", '{"prompt_tokens": 5, "output_tokens": 5}\n')
            + [
                "--step-times",
                file(t, "steps.json", '[{"tokens": ' + DIGITS + ', "seconds": 0.01}]'),
            ]
        ),
    ),
    row(
        "simulate-step-times-nested-deep",
        2,
        "steps.json:1: nested more than 100 levels deep",
        lambda t: (
            simulate(t, "w.jsonl", '{"prompt_tokens": 5, "output_tokens": 5}\n')
            + ["--step-times", file(t, "steps.json", DEEP)]
        ),
    ),
    row(
        "verify-plan-5000-digits",  # was: ValueError Exceeds the limit (4300 digits)
        1,
        f"plan.json:1: block_size: an integer of 5,000 digits is out of range; {LIMIT}",
        lambda t: [
            "verify",
            "--plan",
            file(t, "plan.json", with_literal(json.loads(saved_plan()), "block_size", DIGITS)),
        ],
    ),
    row(
        "verify-cpu-budget-beyond-the-host",  # was: torch RuntimeError can't allocate memory
        2,
        "--memory-budget 1,048,576.00 GiB is more than this host can allocate",
        [
            "verify",
            "qwen3-0.6b",
            "--device",
            "cpu",
            "--memory-budget",
            "1048576GiB",
            "--max-model-len",
            "256",
        ],
    ),
    # outputs that destroy: refused before any work, the path left as it was
    row(
        "check-output-is-the-plans-file",  # was: the report replaced the plans file
        2,
        "plans.yaml), an input of this run; writing the output there would replace it",
        lambda t: ["check", file(t, "plans.yaml", PLANS), "-o", "plans.yaml"],
    ),
    row(
        "check-output-fifo",  # was: the FIFO became a regular file
        2,
        "cannot write there: a FIFO (named pipe); kvplan writes only regular files",
        lambda t: ["check", file(t, "plans.yaml", PLANS), "-o", fifo(t, "out")],
    ),
    row(
        "check-output-proc-self-fd-1",  # was: failed only after all the work was done
        2,
        "-o /proc/self/fd/1: cannot write there:",
        lambda t: ["check", file(t, "plans.yaml", PLANS), "-o", "/proc/self/fd/1"],
    ),
    row(
        "simulate-output-is-the-trace",  # was: the report replaced the trace (exit 0)
        2,
        "-o t.jsonl: is the workload (-w) (t.jsonl), an input of this run",
        lambda t: (
            ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", "t.jsonl", "-o", "t.jsonl"]
            if file(t, "t.jsonl", '{"prompt_tokens": 5, "output_tokens": 5}\n')
            else []
        ),
    ),
    row(
        "simulate-output-and-save-trace-one-file",  # was: the trace was lost
        2,
        "--save-trace x.json and -o x.json: both write the same file",
        ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", "chat", "--num-requests", "5"]
        + ["-o", "x.json", "--save-trace", "x.json"],
    ),
    row(
        "simulate-plot-is-a-directory",
        2,
        "--plot .: cannot write there: is a directory",
        ["simulate", "llama-3.2-1b", "--gpu", "h100", "-w", "chat", "--plot", "."],
    ),
    # the terminal: an echoed value is cut, whole only in --json
    row(
        "estimate-gpu-name-100000-chars",  # was: echoed whole, 100,093 characters
        2,
        "...[100,002 characters] (`kvplan gpus` lists them",  # the quoted name: 100,002
        ["estimate", "llama-3.1-8b", "--gpu", "x" * 100_000],
    ),
]
CATALOGUE += ROUND_TWO


@pytest.mark.parametrize(("args", "code", "fragment"), CATALOGUE)
def test_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: Builder, code: int, fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = args(tmp_path)
    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert fragment in result.stderr, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    if "Usage:" not in result.stderr:  # Click's own usage errors print a usage block first
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert not [
        p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")
    ]  # nothing half-written


def test_the_catalogue_covers_every_command_and_is_large() -> None:
    ids = [p.id for p in CATALOGUE]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    for command in ("estimate", "models", "gpus", "check", "diagnose", "simulate", "verify"):
        assert any(i.startswith(command + "-") for i in ids), command


MARKUP = [
    pytest.param(
        lambda t: [
            "check",
            file(
                t,
                "plans.yaml",
                'deployments:\n  - {name: "[/]x", model: llama-3.1-8b, gpu: h100}\n',
            ),
        ],
        "[/]x",
        id="check-deployment-name",  # was: rich MarkupError traceback
    ),
    pytest.param(
        lambda t: [
            "estimate",
            model_dir(t, {**LLAMA, "_name_or_path": "[bold]m[/]"}),
            "--gpu",
            "l4",
        ],
        "[bold]m[/] on l4",
        id="estimate-model-name",  # was: printed as a bold "m"
    ),
    pytest.param(
        lambda t: ["estimate", model_dir(t, {**LLAMA, "model_type": "[/]"})],
        "[/] · GQA",
        id="estimate-model-type",  # was: rich MarkupError traceback
    ),
    pytest.param(
        lambda t: [
            "diagnose",
            file(
                t, "[red]x.log", (ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log").read_text()
            ),
        ],
        "[red]x.log",
        id="diagnose-file-name",  # was: printed as a red "x.log"
    ),
    pytest.param(
        lambda t: [
            "simulate",
            "llama-3.2-1b",
            "--gpu",
            "h100",
            "--skip-bad-lines",
            "-w",
            file(
                t, "w.jsonl", '{"prompt_tokens": 9, "output_tokens": 2}\n{"prompt_tokens": "[/]"}\n'
            ),
        ],
        'prompt_tokens "[/]" is not a whole number',
        id="simulate-skipped-line-warning",  # was: rich MarkupError traceback
    ),
]


@pytest.mark.parametrize(("args", "text"), MARKUP)
def test_markup_in_user_text_is_printed_as_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: Builder, text: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args(tmp_path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code in (0, 1), result.stderr
    assert text in " ".join((result.stdout + result.stderr).split())  # rich may wrap lines


def test_control_characters_in_names_keep_every_format_well_formed(tmp_path: Path) -> None:
    # YAML's "\x01" and "\n" escapes put control characters into a deployment's name.
    plans = file(
        tmp_path,
        "plans.yaml",
        'deployments:\n  - {name: "a\\x01b\\nc|d`e\\rf", model: llama-3.1-8b, gpu: h100}\n'
        '  - {name: "f\\x1b[2Jg", model: llama-3.1-8b, gpu: h1000}\n',
    )
    junit = CliRunner().invoke(app, ["check", plans, "-f", "junit"])
    assert junit.exit_code == 2
    ET.fromstring(junit.stdout.split("\n", 1)[1])  # was: not well-formed (invalid token)
    assert "a\\x01b\\nc|d`e\\rf" in junit.stdout
    markdown = CliRunner().invoke(app, ["check", plans, "-f", "markdown"])
    rows = [line for line in markdown.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 2 and "`a\\x01b\\nc\\|d'e\\rf`" in rows[1]  # was: the row broke in two
    table = CliRunner().invoke(app, ["check", plans])
    assert "\x1b" not in table.stdout + table.stderr and "f\\x1b[2Jg" in table.stderr
    assert "\x01" not in table.stdout and "a\\x01b\\nc|d`e\\rf" in table.stdout


# ---------------------------------------------------------------------- any terminal (issue 26)
# Run as users run kvplan, in a new process through the console entry point: the encoding of
# stdout, a full disk and a closed pipe are the process's, which CliRunner replaces.
MAIN = "import sys; from planner.cli import main; sys.argv[0] = 'kvplan'; main()"


def kvplan(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k not in ("KVPLAN_DEBUG", "HF_TOKEN")}
    full.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", NO_COLOR="1", **(env or {}))
    if "stdout" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args], env=full, timeout=120, check=False, **kwargs
    )


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
    ],
    ids=["PYTHONIOENCODING=ascii", "LC_ALL=C"],
)
def test_a_non_utf8_stdout_gets_ascii(env: dict[str, str]) -> None:
    # was: UnicodeEncodeError half-way through the text (at the check mark)
    run = kvplan("estimate", "llama-3.1-8b", "--gpu", "h100", env=env)
    assert run.returncode == 0 and b"Traceback" not in run.stderr, run.stderr
    text = run.stdout.decode("ascii")  # every byte ASCII
    assert "ok Starts, queues at worst case" in text and "vllm serve" in text


def test_a_full_disk_is_one_line() -> None:
    # was: OSError [Errno 28] traceback
    with open("/dev/full", "wb") as full:
        run = kvplan("gpus", stdout=full, stderr=-1)
    assert run.returncode == 1
    assert run.stderr.decode() == "Error: cannot write the output: No space left on device\n"


def test_a_closed_pipe_ends_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # `kvplan gpus | head -c0`: the reader is gone before kvplan writes
    try:
        run = kvplan("gpus", stdout=write, stderr=-1)
    finally:
        os.close(write)
    # the exit-code table (issue 25): a closed pipe ends as the shell's tools end, by SIGPIPE
    # (status 141, -13 here), with nothing on stderr
    assert run.returncode == -signal.SIGPIPE and run.stderr == b"", run.stderr


def test_a_closed_stdout_is_one_line() -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    shell = f'"{sys.executable}" -c "{MAIN}" gpus >&-'
    run = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stderr.decode() == "Error: cannot write the output: stdout is closed\n"


@pytest.mark.parametrize(("columns", "widest"), [("0", 80), ("-3", 200), ("999999999", 1000)])
def test_absurd_widths_still_print_the_table(columns: str, widest: int) -> None:
    # was: COLUMNS=0 printed nothing and exited 0
    run = kvplan("gpus", env={"COLUMNS": columns})
    lines = run.stdout.decode().splitlines()
    assert run.returncode == 0 and any(line.startswith("h100 ") for line in lines), run.stdout
    assert max(map(len, lines)) <= widest


def test_a_token_file_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    # was: `HF_TOKEN_PATH=fifo kvplan gpus` hung (redaction read the FIFO)
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    run = kvplan("gpus", env={"HF_TOKEN_PATH": str(fifo)})
    assert run.returncode == 0 and b"h100" in run.stdout, run.stderr


def test_diagnose_reads_a_dict_with_a_list_for_a_key(tmp_path: Path) -> None:
    # was: TypeError unhashable type: 'list' from ast.literal_eval
    log = tmp_path / "vllm.log"
    log.write_text("INFO 01-01 00:00:00 [arg_utils.py:1] non-default args: {[1]: 2}\n")
    result = CliRunner().invoke(app, ["diagnose", str(log)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code in (0, 1) and "Traceback" not in result.stderr
