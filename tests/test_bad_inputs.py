"""The catalogue of bad inputs: every command, each input named, with the exact message fragment
and exit code it must end in (exit 1: the input's content; 2: a flag or a file the user can fix;
3 is `verify`'s failed gate and never a bad input). Whatever the input, the output is one
`Error:` line on stderr, nothing on stdout and no traceback.

Rows marked `# was:` crashed, hung or ran out of memory before the hardening (issue 7); the note
says how.
"""

# ruff: noqa: E501  (expected messages stay on one line each, as the user reads them)

from __future__ import annotations

import json
import os
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
        "hidden_size of 401 digits is beyond any real model (at most 1,099,511,627,776)",
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
        "safetensors header is nested too deeply",
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
        "simulate-trace-line-nested-deep",  # was: RecursionError
        2,
        "line 1: JSON nested too deeply",
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
        "JSON nested too deeply for a plan",
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
