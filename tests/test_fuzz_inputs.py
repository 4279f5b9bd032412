"""Fuzzed inputs at every entry point: each ends in a result or a clean `Error:`, never a
traceback or a hang.

Entry points: config files (with safetensors headers) through `kvplan estimate`, plans files
through `kvplan check`, workloads (JSONL traces and YAML specs) through `kvplan simulate`, vLLM
boot logs through `kvplan diagnose`, size strings, saved plan files (`kvplan verify --plan`),
and argument lists for every command but `verify` (it allocates; the catalogue in
test_bad_inputs.py covers its fast failures). The inner loop (`-m "not slow"`) uses DEFAULT's
examples per entry point (CHEAP's for sizes and saved plans); the long ones (`slow`, which
the default run keeps) SLOW's, KVPLAN_FUZZ_EXAMPLES each (1,000 unless set).
"""

from __future__ import annotations

import copy
import json
import random
import re
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from planner.diagnose import PREFILTER
from planner.errors import KvplanError
from planner.units import parse_size
from tests.fuzz_helpers import (
    BAD_VALUES,
    CHEAP,
    DEFAULT,
    HOSTILE_ARGS,
    SLOW,
    invoke,
    mutate_mapping,
    run_with_files,
    scratch,
)
from tests.test_fuzz_configs import mutated

ROOT = Path(__file__).resolve().parents[1]
LOGS = sorted((Path(__file__).parent / "fixtures" / "logs").glob("*.log"))
SPECS = {
    p.name: yaml.safe_load(p.read_text()) for p in (ROOT / "examples/workloads").glob("*.yaml")
}
PLANS = yaml.safe_load((ROOT / "examples" / "plans.yaml").read_text())
MODELS = ["llama-3.2-1b", "qwen3-0.6b", "gemma-3-1b-it", "gpt-oss-20b", "deepseek-v2-lite"]
GPUS = ["h100", "l4", "rtx-4090", "a100-80gb"]


def mangle_text(draw: st.DrawFn, text: str) -> str:
    """Character-level damage: truncate, splice in junk, or duplicate a slice."""
    action = draw(st.sampled_from(["keep", "keep", "truncate", "splice", "duplicate"]))
    if action == "keep" or not text:
        return text
    at = draw(st.integers(0, len(text)))
    if action == "truncate":
        return text[:at]
    if action == "splice":
        junk = draw(
            st.one_of(
                st.text(max_size=20),
                st.sampled_from(
                    ["\x00", "\ufeff", "\r", "{", "[[[[", ": &a [*a]", "\x1b[31m", "[/]", "\u2028"]
                ),
            )
        )
        return text[:at] + junk + text[at:]
    return text[:at] + text[at // 2 : at] + text[at:]


# --------------------------------------------------------------------------- configs


def safetensors_header() -> st.SearchStrategy[bytes]:
    """A safetensors file's header: plausible, hostile, or not JSON at all."""
    tensor = st.one_of(
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(["BF16", "F8_E4M3", "F32", "X", 7]),
                "shape": st.one_of(st.lists(st.integers(-5, 2**40), max_size=3), BAD_VALUES),
                "data_offsets": st.one_of(st.lists(st.integers(-5, 2**40), max_size=3), BAD_VALUES),
            }
        ),
        BAD_VALUES,
    )
    names = st.sampled_from(
        [
            "model.layers.0.mlp.weight",
            "model.layers.99.x",
            "lm_head.weight",
            "embed",
            "__metadata__",
        ]
    )
    header = st.dictionaries(names, tensor, max_size=4).map(json.dumps)
    body = st.one_of(header, st.text(max_size=30), st.just("[" * 5000 + "]" * 5000))
    length = st.one_of(st.none(), st.integers(0, 2**64 - 1))

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        raw = draw(body).encode()
        n = draw(length)
        return struct.pack("<Q", len(raw) if n is None else n) + raw

    return build()


@st.composite
def config_case(draw: st.DrawFn) -> tuple[str, bytes | None, list[str]]:
    raw = draw(mutated())
    text = json.dumps(raw, allow_nan=True)
    text = mangle_text(draw, text)
    tensors = draw(st.one_of(st.none(), safetensors_header()))
    flags = draw(
        st.lists(
            st.sampled_from(
                [
                    ["--gpu", "h100"],
                    ["--gpu", "l4"],
                    ["--engine", "sglang", "--gpu", "h100"],
                    ["--engine", "trtllm", "--gpu", "h100"],
                    ["--engine", "hf"],
                    ["--tp", "2"],
                    ["--pp", "2"],
                    ["--kv-cache-dtype", "fp8"],
                    ["--max-model-len", "-1", "--gpu", "h100"],
                    ["--grid", "--gpu", "a100-80gb"],
                    ["--json"],
                ]
            ),
            max_size=3,
        )
    )
    return text, tensors, [f for group in flags for f in group]


def check_config_case(case: tuple[str, bytes | None, list[str]]) -> None:
    text, tensors, flags = case
    files: dict[str, str | bytes] = {"model/config.json": text}
    if tensors is not None:
        files["model/model.safetensors"] = tensors
    run_with_files(files, ["estimate", "./model", *flags])


@DEFAULT
@given(config_case())
def test_config_files_through_estimate(case: tuple[str, bytes | None, list[str]]) -> None:
    check_config_case(case)


@pytest.mark.slow
@SLOW
@given(config_case())
def test_config_files_through_estimate_long(case: tuple[str, bytes | None, list[str]]) -> None:
    check_config_case(case)


# --------------------------------------------------------------------------- plans files

PLAN_KEYS = sorted({k for d in PLANS["deployments"] for k in d} | {"gpu_memory", "block_size"})


@st.composite
def plans_case(draw: st.DrawFn) -> tuple[str, list[str]]:
    doc = copy.deepcopy(PLANS)
    shape = draw(st.sampled_from(["deployment"] * 4 + ["top", "list"]))
    if shape == "deployment":
        for dep in doc["deployments"]:
            dep["model"] = draw(st.sampled_from([*MODELS, dep["model"]]))
            if draw(st.integers(0, 2)) == 0:
                mutate_mapping(draw, dep, PLAN_KEYS)
    elif shape == "top":
        mutate_mapping(draw, doc, ["deployments", "version"])
    else:
        doc["deployments"] = draw(st.sampled_from([[], None, "x", [[1]], [None], {"a": 1}]))
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    if draw(st.integers(0, 2)) == 0:
        text = mangle_text(draw, text)
    fmt = draw(st.sampled_from(["table", "json", "markdown", "junit"]))
    out = draw(st.sampled_from([[], ["-o", "report.out"]]))
    return text, ["--format", fmt, *out]


def check_plans_case(case: tuple[str, list[str]]) -> None:
    text, flags = case
    result, names = run_with_files({"plans.yaml": text}, ["check", "plans.yaml", *flags])
    if result.exit_code == 2:  # the file is invalid: nothing half-written
        assert not [name for name in names if name.startswith(".report")], names


@DEFAULT
@given(plans_case())
def test_plans_files_through_check(case: tuple[str, list[str]]) -> None:
    check_plans_case(case)


@pytest.mark.slow
@SLOW
@given(plans_case())
def test_plans_files_through_check_long(case: tuple[str, list[str]]) -> None:
    check_plans_case(case)


# --------------------------------------------------------------------------- workloads

TRACE_KEYS = ["prompt_tokens", "output_tokens", "arrival_s", "prefix_id", "prefix_tokens"]
SPEC_KEYS = ["name", "seed", "num_requests", "arrival", "prompt_tokens", "output_tokens"]
SUB_KEYS = ["dist", "mean", "sigma", "std", "min", "max", "value", "histogram", "process"]
SUB_KEYS += ["rate_per_s", "size", "interval_s", "id", "tokens", "fraction"]


@st.composite
def trace_text(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        obj: dict[str, Any] = {
            "prompt_tokens": draw(st.integers(1, 3000)),
            "output_tokens": draw(st.integers(1, 500)),
            "arrival_s": draw(st.floats(0, 30)),
        }
        if draw(st.booleans()):
            obj.update(prefix_id=draw(st.sampled_from(["sys", "rag"])), prefix_tokens=16)
        if draw(st.integers(0, 7)) == 0:
            mutate_mapping(draw, obj, TRACE_KEYS)
        line = json.dumps(obj, allow_nan=True)
        if draw(st.integers(0, 9)) == 0:
            line = draw(
                st.one_of(
                    st.text(max_size=20),
                    st.sampled_from(["[" * 100_000, "null", "[]", '"x"', "1e999", "{" * 3]),
                )
            )
        lines.append(line)
    return "\n".join(lines)


@st.composite
def spec_text(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(SPECS[draw(st.sampled_from(sorted(SPECS)))])
    doc["num_requests"] = draw(st.integers(1, 40))
    target = doc
    where = draw(st.sampled_from(["top", "prompt_tokens", "output_tokens", "arrival", "prefix"]))
    if where == "prefix" and doc.get("prefixes"):
        target = doc["prefixes"][0]
    elif where in doc and isinstance(doc[where], dict):
        target = doc[where]
    mutate_mapping(draw, target, SPEC_KEYS if target is doc else SUB_KEYS)
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    return mangle_text(draw, text)


@st.composite
def workload_case(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    if draw(st.booleans()):
        name, text = "w.jsonl", draw(trace_text())
    else:
        name, text = "w.yaml", draw(spec_text())
    flags = draw(
        st.lists(
            st.sampled_from(
                [
                    ["--skip-bad-lines"],
                    ["--num-requests", "7"],
                    ["--seed", "3"],
                    ["--block-size", "16,32"],
                    ["--compare", "prefix-caching=on,off"],
                    ["--max-num-seqs", "4"],
                    ["--goal", "ttft"],
                    ["--max-model-len", "2048"],
                    ["--json"],
                    ["-o", "report.json"],
                    ["--save-trace", "trace.jsonl"],
                ]
            ),
            max_size=3,
            unique_by=lambda group: group[0],
        )
    )
    pool = draw(st.sampled_from([["--num-gpu-blocks", "600"], ["--gpu", "l4"], ["--gpu", "h100"]]))
    return name, text, [*pool, *(f for group in flags for f in group)]


def check_workload_case(case: tuple[str, str, list[str]]) -> None:
    name, text, flags = case
    args = ["simulate", "llama-3.2-1b", "-w", name, *flags]
    result, names = run_with_files({name: text}, args)
    if result.exit_code != 0:  # an error leaves no output file behind
        assert "report.json" not in names and "trace.jsonl" not in names, names


@DEFAULT
@given(workload_case())
def test_workloads_through_simulate(case: tuple[str, str, list[str]]) -> None:
    check_workload_case(case)


@pytest.mark.slow
@SLOW
@given(workload_case())
def test_workloads_through_simulate_long(case: tuple[str, str, list[str]]) -> None:
    check_workload_case(case)


# --------------------------------------------------------------------------- boot logs

NUMBERS = ["1.2.3", ".", "-", "-1", "1e999", "9" * 400, "0", "nan", "", "٣", "0x10", "1,,2"]
NUMBERS += ["'abc'", "7", "5", "None", "[1]"]  # a non-default args value that is not one


@st.composite
def log_case(draw: st.DrawFn) -> tuple[str, list[str]]:
    lines = draw(st.sampled_from(LOGS)).read_text().splitlines()
    rng = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(0, 8))):
        if not lines:
            break
        i = rng.randrange(len(lines))
        action = draw(st.sampled_from(["number", "number", "drop", "dup", "junk", "cut"]))
        if action == "number":  # on a line kvplan reads, most of the time
            known = [j for j, line in enumerate(lines) if PREFILTER.search(line)]
            i = rng.choice(known) if known and rng.random() < 0.8 else i
            spots = list(re.finditer(r"-?\d[\d.,]*", lines[i]))
            if spots:
                m = rng.choice(spots)
                lines[i] = (
                    lines[i][: m.start()] + draw(st.sampled_from(NUMBERS)) + lines[i][m.end() :]
                )
        elif action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "junk":
            lines.insert(i, draw(st.text(max_size=40)))
        else:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    flags = draw(
        st.lists(
            st.sampled_from(
                [
                    ["--model", "llama-3.1-8b"],
                    ["--model", "qwen2.5-7b"],
                    ["--gpu", "h100"],
                    ["--gpu-memory", "24GiB"],
                    ["--tp", "2"],
                    ["--max-model-len", "4096"],
                    ["--kv-cache-dtype", "fp8"],
                    ["--enforce-eager"],
                    ["--json"],
                ]
            ),
            max_size=3,
            unique_by=lambda group: group[0],
        )
    )
    return "\n".join(lines), [f for group in flags for f in group]


def check_log_case(case: tuple[str, list[str]]) -> None:
    text, flags = case
    run_with_files({"vllm.log": text}, ["diagnose", "vllm.log", *flags])


@DEFAULT
@given(log_case())
def test_boot_logs_through_diagnose(case: tuple[str, list[str]]) -> None:
    check_log_case(case)


@pytest.mark.slow
@SLOW
@given(log_case())
def test_boot_logs_through_diagnose_long(case: tuple[str, list[str]]) -> None:
    check_log_case(case)


# --------------------------------------------------------------------------- size strings

SIZE_TEXT = st.one_of(
    st.text(max_size=16),
    st.builds(
        lambda number, space, unit: number + space + unit,
        st.one_of(
            st.integers(0, 10**400).map(str),
            st.floats(0, 1e20).map(repr),
            st.sampled_from(["", ".", "1.", ".5", "1e9", "inf", "nan", "-1", "٣", "1_000"]),
        ),
        st.sampled_from(["", " ", "\t", "\u00a0"]),
        st.sampled_from(["", "B", "GiB", "gib", "GB", "G", "k", "TiB", "PiB", "iB", "GiBs", "%"]),
    ),
)


def check_size(text: str) -> None:
    try:
        size = parse_size(text, flag="--x")
    except KvplanError as exc:
        assert str(exc).startswith("--x ") and "\n" not in str(exc)
        return
    assert isinstance(size, int) and size >= 0


@CHEAP
@given(SIZE_TEXT)
def test_size_strings(text: str) -> None:
    check_size(text)


@pytest.mark.slow
@SLOW
@given(SIZE_TEXT)
def test_size_strings_long(text: str) -> None:
    check_size(text)


# --------------------------------------------------------------------------- saved plans


def saved_plan() -> dict[str, Any]:
    result = invoke(["estimate", "qwen3-0.6b", "--gpu", "l4", "--max-model-len", "4096", "--json"])
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


PLAN = saved_plan()
PLAN_FILE_KEYS = sorted(PLAN) + ["vllm", "gpu", "num_gpu_blocks"]


@st.composite
def plan_file_text(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(PLAN)
    target = doc
    if draw(st.booleans()) and isinstance(doc.get("vllm"), dict):
        target = doc["vllm"]
    mutate_mapping(draw, target, PLAN_FILE_KEYS if target is doc else sorted(target))
    return mangle_text(draw, json.dumps(doc, allow_nan=True))


def check_plan_file(text: str) -> None:
    from probes.plan import read_plan

    with scratch() as folder:
        (folder / "plan.json").write_text(text, encoding="utf-8", errors="replace")
        try:
            plan = read_plan("plan.json")
        except KvplanError as exc:
            assert "\n" not in str(exc)
            return
        assert plan.tensor_parallel_size >= 1 and plan.block_size >= 1 and plan.max_model_len >= 1


@CHEAP
@given(plan_file_text())
def test_saved_plan_files(text: str) -> None:
    check_plan_file(text)


@pytest.mark.slow
@SLOW
@given(plan_file_text())
def test_saved_plan_files_long(text: str) -> None:
    check_plan_file(text)


# --------------------------------------------------------------------------- argument lists

FLAGS: dict[str, list[str]] = {
    "estimate": [
        "--tp",
        "--pp",
        "--kv-cache-dtype",
        "--engine",
        "--block-size",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--max-num-seqs",
        "--gpu",
        "--gpu-memory",
        "--gpu-memory-utilization",
        "--kv-cache-memory",
        "--headroom",
        "--cuda-graph-memory",
        "--shared-prefix",
        "--requests",
        "--avg-tokens",
        "--batch",
        "--revision",
    ],
    "check": ["--format", "-o"],
    "diagnose": [
        "--model",
        "--gpu",
        "--gpu-memory",
        "--tp",
        "--pp",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--kv-cache-dtype",
        "--max-num-batched-tokens",
        "--max-num-seqs",
    ],
    "simulate": [
        "--gpu",
        "--num-gpu-blocks",
        "--kv-cache-memory",
        "--gpu-memory-utilization",
        "--tp",
        "--block-size",
        "--kv-cache-dtype",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-model-len",
        "--compare",
        "--goal",
        "--seed",
        "--num-requests",
        "--plot",
        "-o",
        "--save-trace",
        "--revision",
    ],
    "models": [],
    "gpus": [],
}
SWITCHES: dict[str, list[str]] = {
    "estimate": ["--json", "--grid", "--enforce-eager", "--offline", "--no-enable-prefix-caching"],
    "check": ["--offline"],
    "diagnose": ["--json", "--enforce-eager", "--offline"],
    "simulate": ["--json", "--skip-bad-lines", "--offline", "--no-enable-prefix-caching"],
    "models": ["--json"],
    "gpus": ["--json"],
}
PLAUSIBLE = st.sampled_from(
    ["1", "2", "4", "16", "64", "512", "4096", "32768", "0.9", "fp8", "auto", "vllm", "sglang"]
    + ["h100", "l4", "a100-80gb", "16GiB", "80GB", "8,16", "block-size=16,32", "ttft", "json"]
)
FIXTURE_LOG = str(Path(__file__).parent / "fixtures" / "logs" / "vllm-v1-llama8b-h100.log")
TRACE = '{"prompt_tokens": 300, "output_tokens": 20}\n{"prompt_tokens": 90, "output_tokens": 5}\n'


@st.composite
def argv(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(FLAGS)))
    args = [command]
    positional = {
        "estimate": st.one_of(st.sampled_from([*MODELS, "llama-3.1-8b"]), HOSTILE_ARGS),
        "check": st.sampled_from([str(ROOT / "examples" / "plans.yaml"), "plans.yaml"]),
        "diagnose": st.sampled_from([FIXTURE_LOG, "vllm.log"]),
        "simulate": st.sampled_from(MODELS),
    }.get(command)
    if positional is not None:
        args.append(draw(positional))
    if command == "simulate":
        args += [
            "-w",
            draw(st.sampled_from(["w.jsonl", str(ROOT / "examples/workloads/rag.yaml")])),
        ]
        args += ["--num-requests", draw(st.sampled_from(["5", "0", "-3", "9" * 25]))]
        if draw(st.booleans()):
            args += ["--num-gpu-blocks", draw(st.sampled_from(["400", "1", "0", "9" * 30]))]
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flag"] * 5 + ["switch"] * 2 + ["token"]))
        if kind == "flag" and FLAGS[command]:
            args += [
                draw(st.sampled_from(FLAGS[command])),
                draw(st.one_of(PLAUSIBLE, PLAUSIBLE, HOSTILE_ARGS)),
            ]
        elif kind == "switch":
            args.append(draw(st.sampled_from(SWITCHES[command])))
        else:
            args.append(
                draw(st.one_of(HOSTILE_ARGS, st.sampled_from(["--nope", "-x", "--json=1"])))
            )
    return args


def check_argv(args: list[str]) -> None:
    files = {
        "w.jsonl": TRACE,
        "plans.yaml": (ROOT / "examples" / "plans.yaml").read_text(),
        "vllm.log": Path(FIXTURE_LOG).read_text(),
    }
    run_with_files(files, args)


@DEFAULT
@given(argv())
def test_argument_lists(args: list[str]) -> None:
    check_argv(args)


def test_a_json_value_of_another_option_is_not_a_json_request() -> None:
    # drawn by test_argument_lists_long: the later --tp 1 wins, so this prints the table; the
    # harness used to read the bare "json" as a request for JSON and fail on the table
    check_argv(["estimate", "llama-3.2-1b", "--tp", "json", "--tp", "1"])
    check_argv(["estimate", "llama-3.2-1b", "--tp", "1", "--json"])  # this one is JSON


@pytest.mark.slow
@SLOW
@given(argv())
def test_argument_lists_long(args: list[str]) -> None:
    check_argv(args)
