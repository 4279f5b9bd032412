"""kvplan check: plans-file schema with line numbers, hostile YAML, exit codes 0/1/2, the four
report formats, and the figures cross-checked against recommend.plan."""

# ruff: noqa: E501  (expected messages stay on one line each, as the user reads them)

from __future__ import annotations

import json
import math
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from planner.check import check_file, plans
from planner.check.plans import PlansFileError
from planner.cli import app
from planner.deployment import SPELLINGS, ServeSettings
from planner.gpus import get_gpu
from planner.model.specs import Engine, KVDtype
from tests.conftest import fixture_config
from tests.helpers import plan_for as on

runner = CliRunner()
GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[1]

PASSING = """\
  - name: chat-8b
    model: llama-3.1-8b
    engine: vllm
    gpu: h100
    tp: 1
    pp: 1
    max_model_len: 16384
    max_num_seqs: 16
    gpu_memory_utilization: 0.9
    kv_cache_dtype: auto
    min_concurrency: 8
    max_kv_usage: 0.9
"""
# long-context: Qwen2.5-7B on an RTX 4090 (23.64 GiB) at gmu 0.92, vLLM 0.33 (the newest
# kvplan knows): requested ceil(25,382,879,232 x 0.92) - weights 15,230,974,976 and the
# rotary cache 32,768 x 128 x 2 B - activation - non-torch 0.25 GiB - graphs leaves 6.91 GiB,
# 8,087 blocks of 896 KiB. The activation peak is
# the forward over the 2,048-token budget, 2,048 x 2 B x (3 x 18,944 + 4 x 3,584) + 27.1 MB = 0.30
# GiB (over the sampler's 32 x 152,064 x 4 B x 1.5 + 2,048 x 3,584 x 2.553 B); CUDA graphs 28
# layers x (11 PIECEWISE sizes 1, 2, 4, 8 ... 64 + 7 FULL up to 32) x 0.20 MiB = 0.10 GiB.
# 32,768 tokens = 2,048 blocks a request: 8,087 / 2,048 = 3.95x < min_concurrency 5.
FAILING = """\
  - name: long-context
    model: qwen2.5-7b
    gpu: rtx-4090
    max_model_len: 32768
    max_num_seqs: 32
    min_concurrency: 5
"""


def write(tmp_path: Path, text: str, name: str = "plans.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------ exit codes


def test_exit_0_when_every_deployment_fits(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + PASSING)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "PASS" in result.stdout and "chat-8b" in result.stdout
    assert result.stderr == ""


def test_exit_1_when_any_deployment_fails(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + PASSING + FAILING)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "PASS" in result.stdout
    # a failing deployment is a result, not an error line (the only stderr line is the note
    # that the short name qwen2.5-7b is planned as the catalog's Instruct entry)
    assert "Error" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "note: qwen2.5-7b is planned as Qwen/Qwen2.5-7B-Instruct (kvplan's catalog entry "
        "qwen2.5-7b-instruct)"
    ]
    assert "concurrency 3.95x < 5x required" in result.stdout


def test_exit_2_when_the_file_is_invalid(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + PASSING + "    max_modle_len: 8192\n")
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: {path}:14: deployments[0] (chat-8b).max_modle_len: unknown key; "
        "did you mean 'max_model_len'?"
    )
    assert "Traceback" not in result.stderr


def test_one_bad_deployment_does_not_hide_the_others(tmp_path: Path) -> None:
    bad = "  - name: broken\n    model: llama-3.1-8b\n    gpu: h100\n    tp: two\n"
    path = write(tmp_path, "deployments:\n" + bad + PASSING)
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert [d["name"] for d in data["deployments"]] == ["chat-8b"]
    assert data["deployments"][0]["status"] == "pass"
    assert data["problems"] == [
        {
            "file": str(path),
            "line": 5,
            "where": "deployments[0] (broken).tp",
            "message": "must be a whole number (got 'two')",
            "index": 0,
        }
    ]
    assert data["counts"] == {
        "deployments": 2,
        "passed": 1,
        "failed": 0,
        "errors": 0,
        "invalid": 1,
        # 16 x 1,024 blocks of chat-8b fit the H100's pool at once; the broken entry has none
        "wont_start": 0,
        "queues_at_worst_case": 0,
        "fits_at_worst_case": 1,
    }
    assert "Error: " in result.stderr and ":5: deployments[0] (broken).tp" in result.stderr


def test_unresolvable_model_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    # HF_HUB_OFFLINE=1 and an empty cache (conftest): the hub id cannot be resolved.
    missing = "  - name: private\n    model: acme/private-model\n    gpu: h100\n"
    path = write(tmp_path, "deployments:\n" + missing + PASSING)
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert result.exit_code == 1
    rows = {d["name"]: d for d in json.loads(result.stdout)["deployments"]}
    assert rows["private"]["status"] == "error"
    assert "acme/private-model" in rows["private"]["error"]
    assert rows["chat-8b"]["status"] == "pass"


def test_main_exit_codes_without_the_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner import cli

    path = write(tmp_path, "deployments: 3\n")
    monkeypatch.setattr("sys.argv", ["kvplan", "check", str(path)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"Error: {path}:1: deployments must be a list, not 3"


# ------------------------------------------------------------------ formats


def two_deployments(tmp_path: Path) -> Path:
    return write(tmp_path, "deployments:\n" + PASSING + FAILING)


def test_json_format(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(two_deployments(tmp_path)), "-f", "json"])
    data = json.loads(result.stdout)
    assert data["exit_code"] == 1 == result.exit_code
    ok, bad = data["deployments"]
    assert (ok["status"], bad["status"]) == ("pass", "fail")
    assert bad["limiting"] == "min_concurrency"
    # integer bytes, and the line of the entry's first key
    assert isinstance(ok["figures"]["available_kv_bytes"], int)
    assert (ok["line"], bad["line"]) == (2, 14)
    assert ok["settings"]["max_num_seqs"] == 16 and ok["settings"]["block_size"] == 16


def test_markdown_format(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(two_deployments(tmp_path)), "-f", "markdown"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    # both start; long-context's 32 requests of 32,768 tokens do not all fit (3.95x), so it
    # queues at worst case, and it fails min_concurrency 5
    assert lines[0].startswith(
        "### kvplan check: 2 of 2 deployments start; 1 queues at worst case; 1 of 2 pass"
    )
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 3  # header + 2 deployments
    assert rows[1].startswith("| ✅ pass | fits 16/16 | `chat-8b` |")
    # floor(3.95) = 3 requests of 32,768 tokens at once, of max_num_seqs 32
    assert rows[2].startswith("| ❌ fail | queues 3/32 | `long-context` |")
    assert "| min_concurrency | -21% |" in rows[2]  # 3.95 / 5 - 1
    assert any(line.startswith("- **long-context** — fix: kv_cache_dtype: fp8") for line in lines)


def test_junit_format_parses_back(tmp_path: Path) -> None:
    out = tmp_path / "report" / "kvplan.xml"
    out.parent.mkdir()
    path = two_deployments(tmp_path)
    result = runner.invoke(app, ["check", str(path), "--format", "junit", "-o", str(out)])
    assert result.exit_code == 1
    assert result.stdout == ""
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["chat-8b", "long-context"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None
    message = failure.get("message", "")
    assert "concurrency 3.95x < 5x required" in message
    # fp8 halves the block (458,752 B): about twice the blocks, 7.90 requests of 32,768
    # tokens (3.95x in bf16)
    assert "fix: kv_cache_dtype: fp8 (7.90x" in message
    assert "6.91 GiB" in (failure.text or "")  # the KV memory behind the verdict
    assert cases[1].get("line") == "14" and cases[1].get("file") == str(path)
    # nothing half-written is left beside the report
    assert [p.name for p in out.parent.iterdir()] == ["kvplan.xml"]


def test_junit_lists_invalid_entries_and_unplannable_models_as_errors(tmp_path: Path) -> None:
    text = (
        "deployments:\n"
        + PASSING
        + "  - name: typo\n    model: llama-3.1-8b\n    gpu: h100\n    tp: 0\n"
        + "  - name: private\n    model: acme/private-model\n    gpu: h100\n"
    )
    result = runner.invoke(app, ["check", str(write(tmp_path, text)), "-f", "junit"])
    assert result.exit_code == 2
    root = ET.fromstring(result.stdout)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "0", "2")
    errors = [c for c in root.iter("testcase") if c.find("error") is not None]
    assert {c.get("name") for c in errors} == {"private", "deployments[1] (typo).tp"}


def test_output_file_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "summary.md"
    out.write_text("old report\n")
    path = write(tmp_path, "deployments:\n" + PASSING)
    result = runner.invoke(app, ["check", str(path), "-f", "markdown", "-o", str(out)])
    assert result.exit_code == 0
    assert out.read_text().startswith(
        "### kvplan check: 1 of 1 deployments start; none queue at worst case; 1 of 1 pass"
    )
    table = tmp_path / "table.txt"
    assert runner.invoke(app, ["check", str(path), "-o", str(table)]).exit_code == 0
    assert "chat-8b" in table.read_text() and "\x1b[" not in table.read_text()


def test_output_into_a_missing_folder_is_one_error_line(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + PASSING)
    result = runner.invoke(app, ["check", str(path), "-o", str(tmp_path / "no" / "x.xml")])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: -o ") and "cannot write there" in result.stderr


def test_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(two_deployments(tmp_path)), "-f", "xml"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: --format 'xml': use one of table, json, markdown, junit"


# ------------------------------------------------------------------ schema errors


def entry(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return "deployments:\n  - name: a\n    model: llama-3.1-8b\n    gpu: h100\n" + body


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            entry("max_modle_len: 4096"),
            "5: deployments[0] (a).max_modle_len: unknown key; did you mean 'max_model_len'?",
        ),
        (entry("tp: 1.5"), "5: deployments[0] (a).tp: must be a whole number (got 1.5)"),
        (entry("tp: true"), "5: deployments[0] (a).tp: must be a whole number (got True)"),
        (entry("tp: 0"), "5: deployments[0] (a).tp: must be at least 1 (got 0)"),
        (
            entry("gpu_memory_utilization: 90"),
            "5: deployments[0] (a).gpu_memory_utilization: must be in (0, 1]; write 0.9, not 90 (got 90)",
        ),
        (
            entry("max_kv_usage: yes"),
            "5: deployments[0] (a).max_kv_usage: must be a number (got True)",
        ),
        (
            entry("headroom: 200%"),
            "5: deployments[0] (a).headroom: a percentage must be in [0, 100) (got '200%')",
        ),
        (
            entry("headroom: 2G"),
            "5: deployments[0] (a).headroom: '2G' is ambiguous: say 2GiB (2^30-style) or 2GB (10^9-style) (got '2G')",
        ),
        (
            entry("engine: tgi"),
            "5: deployments[0] (a).engine: unknown engine 'tgi'; use one of: vllm, sglang, trtllm, hf",
        ),
        (
            entry("engine: hf"),
            "5: deployments[0] (a).engine: engine must be one of vllm, sglang, trtllm",
        ),
        (
            entry("kv_cache_dtype: fp4"),
            "5: deployments[0] (a).kv_cache_dtype: unknown KV cache dtype 'fp4'",
        ),
        (
            entry("engine: sglang", "max_num_batched_tokens: 8192"),
            "6: deployments[0] (a).max_num_batched_tokens: is a vLLM setting; engine sglang has no such knob",
        ),
        (
            entry("engine: trtllm", "max_kv_usage: 0.9"),
            "6: deployments[0] (a).max_kv_usage: needs max_num_seqs with engine trtllm",
        ),
        (
            entry("tp: 2", "tensor_parallel_size: 2"),
            "6: deployments[0] (a).tensor_parallel_size: same setting as 'tp'; give only one",
        ),
        (entry("model: [1, 2]"), "5: invalid YAML: duplicate key 'model' (first on line 3)"),
        (
            "deployments:\n  - name: a\n    model: llama-3.1-8b\n    gpu: h1000\n",
            "4: deployments[0] (a).gpu: unknown GPU 'h1000'; did you mean h100",
        ),
        (
            "deployments:\n  - name: a\n    model: llama-3.1-8b\n",
            "2: deployments[0] (a): missing 'gpu' (a catalog GPU) or 'gpu_memory' (e.g. 80GiB)",
        ),
        (
            "deployments:\n  - model: llama-3.1-8b\n    gpu: l4\n",
            "2: deployments[0]: missing required key 'name'",
        ),
        (
            "deployments:\n  - name: a\n    model: llama-3.1-8b\n    gpu: l4\n  - name: a\n    model: qwen3-8b\n    gpu: l4\n",
            "5: deployments[1] (a).name: duplicate name 'a' (first on line 2)",
        ),
        (
            "deployments:\n  - just a string\n",
            "1: deployments[0]: each deployment must be a mapping, not 'just a string'",
        ),
        ("deployment:\n  - name: a\n", "1: no `deployments:` list"),
        (
            "deployments:\n  - name: a\n    model: x\n    gpu: l4\nextra: 1\n",
            "5: extra: unknown top-level key",
        ),
        (
            "deployments:\n  - name: a\n    model: [unclosed\n",
            "4: invalid YAML: while parsing a flow sequence expected ',' or ']'",
        ),
        (
            "deployments: !!python/object:os.system [ls]\n",
            "1: invalid YAML: could not determine a constructor for the tag",
        ),
    ],
)
def test_schema_errors_name_file_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2, result.stdout
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"Error: {path}:{expected}"), first
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "empty; it needs a top-level `deployments:` list"),
        ("# only a comment\n", "empty; it needs a top-level `deployments:` list"),
        (
            "- name: a\n",
            "1: the top level must be a mapping with a `deployments:` list, not a list",
        ),
        ("deployments: []\n", "1: deployments is empty"),
        ("deployments: {name: a}\n", "1: deployments must be a list, not a mapping"),
        ("deployments: &loop [*loop]\n", "1: refused: an alias refers to a node that contains it"),
    ],
)
def test_file_level_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PlansFileError) as info:
        check_file(path)
    assert str(info.value).startswith(f"{path}:{expected}") or str(info.value).startswith(
        f"{path}: {expected}"
    ), str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("key", ["gpu_memory_utilization", "min_concurrency", "max_kv_usage"])
def test_a_number_past_a_float_is_refused_not_a_traceback(tmp_path: Path, key: str) -> None:
    # 10**400 is a YAML int that float() cannot hold; it used to raise OverflowError
    result = runner.invoke(app, ["check", str(write(tmp_path, entry(f"{key}: 1{'0' * 400}")))])
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert f"deployments[0] (a).{key}: must be " in result.stderr


def test_an_entry_is_a_gpu_serve_settings_and_requirements(tmp_path: Path) -> None:
    text = entry(
        "engine: sglang",
        "tensor_parallel_size: 2",
        "gpu_memory: 60GiB",
        "max_model_len: 8192",
        "kv_cache_dtype: FP8",
        "headroom: 5%",
        "min_concurrency: 2",
        "max_kv_usage: 0.5",
        "max_num_seqs: 4",
    )
    (one,), problems = plans.parse_plans(
        plans.load_yaml(write(tmp_path, text)), file="plans.yaml", base_dir=tmp_path
    )
    assert problems == []
    # the catalog's H100 with the given total: its name and roofline figures stay
    assert one.gpu == get_gpu("h100").with_memory(60 * GIB, "gpu_memory")
    assert one.settings == ServeSettings(
        engine=Engine.SGLANG,
        tp=2,
        max_model_len=8192,
        max_num_seqs=4,
        kv_cache_dtype=KVDtype.FP8,
        headroom_bytes=int(60 * GIB * 0.05),  # 5 % of the GPU's memory: 3,221,225,472 B
    )
    assert one.requirements == plans.Requirements(min_concurrency=2.0, max_kv_usage=0.5)
    assert (one.name, one.line, one.model) == ("a", 2, "llama-3.1-8b")


def test_every_serve_setting_key_is_a_spelling_the_parser_reads() -> None:
    # from_mapping ignores keys it does not know: a key renamed in SPELLINGS alone would be
    # accepted by the schema and then silently dropped
    yaml_names = {names.yaml for names in SPELLINGS.values()}
    assert set(plans.SETTINGS) <= yaml_names and set(plans.SETTINGS) <= set(plans.SCHEMA)


def test_other_engines_fixes_are_spelled_as_plans_keys(tmp_path: Path) -> None:
    text = (
        "deployments:\n"
        "  - {name: long, model: llama-3.1-8b, engine: sglang, gpu: rtx-5090,"
        " max_model_len: 131072}\n"
        "  - {name: busy, model: llama-3.1-8b, engine: trtllm, gpu: h100, max_model_len: 131072,"
        " max_num_seqs: 8, max_kv_usage: 0.5}\n"
    )
    long, busy = check_file(write(tmp_path, text)).results
    assert long.status == busy.status == "fail"
    assert long.figures is not None and busy.figures is not None
    # SGLang's whole pool is shorter than one request: the fix is the pool's length in tokens
    assert long.fix == (
        f"max_model_len: {long.figures.kv_cache_size_tokens} (the whole KV pool); "
        "or kv_cache_dtype: fp8 (half the KV bytes per token); or tp: 2 or a larger GPU"
    )
    # 8 requests want more than half of TRT-LLM's pool: as many as fit in half of it
    seqs = int(0.5 * busy.figures.max_concurrency)
    assert seqs >= 1 and busy.fix == (
        f"max_num_seqs: {seqs}; "
        "or kv_cache_dtype: fp8 (half the KV bytes per token); or tp: 2 or a larger GPU"
    )


def test_anchor_bomb_is_refused_before_expanding(tmp_path: Path) -> None:
    # 9 levels of 9 aliases: 9**9 = 387,420,489 leaves from a 700-byte file.
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = write(tmp_path, "\n".join(lines) + "\ndeployments: *a9\n")
    assert path.stat().st_size < 1000
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert "refused: more than 1,000,000 YAML nodes once aliases are expanded" in result.stderr


@pytest.mark.slow  # ~15 s of YAML parsing
def test_deeply_nested_yaml_is_refused_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments: " + "[" * 200_000 + "]" * 200_000 + "\n")
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {path}: refused: YAML nested too deeply"


def test_harmless_aliases_and_merge_keys_work(tmp_path: Path) -> None:
    text = (
        "base: &base\n  model: llama-3.1-8b\n  gpu: h100\n  max_model_len: 8192\n"
        "deployments:\n"
        "  - <<: *base\n    name: one\n"
        "  - <<: *base\n    name: two\n    max_model_len: 4096\n"
    )
    path = write(tmp_path, text)
    result = runner.invoke(app, ["check", str(path), "-f", "json"])
    # `base` is not a known top-level key: reported, and both deployments still checked
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert [d["settings"]["max_model_len"] for d in data["deployments"]] == [8192, 4096]
    assert data["problems"][0]["where"] == "base"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file (NUL bytes), not a plans file"),
        (b"deployments: \xff\xfe\n", "not UTF-8 text (byte 13); a plans file must be text"),
    ],
)
def test_binary_files_are_refused(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "plans.yaml"
    path.write_bytes(content)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {path}: {expected}"


def test_large_and_missing_files_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("#" * plans.MAX_PLANS_BYTES + "\n")
    result = runner.invoke(app, ["check", str(big)])
    assert result.exit_code == 2
    assert "1,048,577 bytes is larger than the 1,048,576-byte limit" in result.stderr
    result = runner.invoke(app, ["check", str(tmp_path / "missing.yaml")])
    assert (result.exit_code, result.stderr.strip()) == (
        2,
        f"Error: {tmp_path / 'missing.yaml'}: no such file",
    )
    result = runner.invoke(app, ["check", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.stderr


# ------------------------------------------------------------------ figures


def test_vllm_figures_are_the_planners(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + PASSING)
    result = check_file(path).results[0]
    p = on("llama-3.1-8b", "h100", max_model_len=16384, max_num_seqs=16, gpu_memory_utilization=0.9)
    f = result.figures
    assert f is not None and f.source == "vllm"
    assert f.available_kv_bytes == p.vllm.available_kv_bytes
    assert f.num_gpu_blocks == p.vllm.num_gpu_blocks
    assert f.kv_cache_size_tokens == p.vllm.kv_cache_size_tokens
    # Llama-3.1-8B: 16,384 tokens / 16 per block = 1,024 blocks per request
    assert f.blocks_per_request == 1024
    # KV usage is the grid's: 16 seqs x 1,024 blocks over the blocks vLLM hands out (- null)
    cell = next(c for c in p.grid if (c.max_model_len, c.max_num_seqs) == (16384, 16))
    assert f.kv_usage == pytest.approx(cell.kv_usage, abs=1e-4)
    assert f.kv_usage == pytest.approx(16 * 1024 / (p.vllm.num_gpu_blocks - 1), abs=1e-4)
    conc = next(c for c in result.checks if c.name == "min_concurrency")
    assert conc.actual == p.vllm.max_concurrency
    assert conc.margin == pytest.approx(p.vllm.max_concurrency / 8 - 1)
    length = next(c for c in result.checks if c.name == "max_model_len")
    # vLLM's admission check: 1,024 blocks x 2 MiB against available - one null block
    assert length.required == 1024 * 2 * 1024 * 1024
    assert length.actual == p.vllm.available_kv_bytes - 2 * 1024 * 1024


def test_failing_max_kv_usage_suggests_the_seqs_that_fit(tmp_path: Path) -> None:
    text = entry("max_model_len: 16384", "max_num_seqs: 64", "max_kv_usage: 0.9")
    result = check_file(write(tmp_path, text)).results[0]
    assert result.status == "fail" and result.limiting == "max_kv_usage"
    f = result.figures
    assert f is not None and f.num_gpu_blocks is not None
    # 64 x 1,024 blocks do not fit; floor(0.9 x usable / 1,024) sequences do
    seqs = int(0.9 * (f.num_gpu_blocks - 1) // 1024)
    assert result.fix is not None and result.fix.startswith(f"max_num_seqs: {seqs};")
    assert seqs * 1024 <= 0.9 * (f.num_gpu_blocks - 1) < (seqs + 1) * 1024


def test_request_longer_than_the_cache_fails_with_vllms_estimate(tmp_path: Path) -> None:
    text = "deployments:\n  - name: a\n    model: llama-3.1-8b\n    gpu: rtx-3090\n"
    result = check_file(write(tmp_path, text)).results[0]
    p = on("llama-3.1-8b", "rtx-3090")
    assert not p.vllm.fits and p.vllm.estimated_max_model_len
    assert result.status == "fail" and result.limiting == "max_model_len"
    assert result.fix is not None
    assert result.fix.startswith(f"max_model_len: {p.vllm.estimated_max_model_len} ")


def test_weights_that_do_not_fit_name_the_fix(tmp_path: Path) -> None:
    text = "deployments:\n  - name: big\n    model: llama-3.1-70b\n    gpu: h100\n"
    result = check_file(write(tmp_path, text)).results[0]
    assert (result.status, result.limiting) == ("fail", "weights")
    assert result.fix is not None and result.fix.startswith("tp: 4")
    weights = result.checks[0]
    # 70.6 B params x 2 B > ceil(79.18 GiB x 0.92)
    assert weights.actual > weights.required == math.ceil(get_gpu("h100").memory_bytes * 0.92)


def test_headroom_percent_is_of_gpu_memory(tmp_path: Path) -> None:
    base = check_file(write(tmp_path, entry("max_model_len: 8192"), "a.yaml")).results[0]
    kept = check_file(write(tmp_path, entry("max_model_len: 8192", "headroom: 5%"), "b.yaml"))
    g = get_gpu("h100")
    assert base.figures is not None and kept.results[0].figures is not None
    # 5 % of the driver-reported 79.18 GiB comes off the KV budget, byte for byte
    lost = base.figures.available_kv_bytes - kept.results[0].figures.available_kv_bytes
    assert lost == int(g.memory_bytes * 0.05)


def test_sglang_and_trtllm_use_those_engines_budgets(tmp_path: Path) -> None:
    text = (
        "deployments:\n"
        "  - {name: s, model: qwen3-8b, engine: sglang, gpu: l40s, max_model_len: 8192}\n"
        "  - {name: t, model: qwen3-8b, engine: trtllm, gpu: l40s, max_model_len: 8192}\n"
    )
    s, t = check_file(write(tmp_path, text)).results
    engines = {e.engine: e for e in on("qwen3-8b", "l40s", max_model_len=8192).engines}
    assert s.figures is not None and t.figures is not None
    assert s.figures.source == "sglang" and t.figures.source == "trtllm"
    for row, name in ((s, "sglang"), (t, "trtllm")):
        assert row.figures is not None
        assert row.figures.available_kv_bytes == engines[name].available_kv_bytes
        assert row.figures.kv_cache_size_tokens == engines[name].max_total_tokens
        assert row.figures.setting == engines[name].setting


def test_sglang_fraction_comes_from_gpu_memory_utilization(tmp_path: Path) -> None:
    text = entry("engine: sglang", "max_model_len: 8192", "gpu_memory_utilization: 0.8")
    row = check_file(write(tmp_path, text)).results[0]
    assert row.figures is not None and row.figures.setting == "mem_fraction_static=0.8"
    model = planner.load_model("llama-3.1-8b")
    weights = planner.weights.per_rank(model, tp=1, pp=1).bytes_per_rank
    # SGLang measures the weights after loading, the rotary cos/sin cache with them (131,072
    # x 128 x 2 B), as vLLM does: (total - 0.5 GiB before weights) x 0.8 - weights
    weights += planner.weights.rotary_cache_bytes(model.spec)
    assert planner.weights.rotary_cache_bytes(model.spec) == 131_072 * 128 * 2
    expected = int((get_gpu("h100").memory_bytes - GIB // 2) * 0.8) - weights
    assert row.figures.available_kv_bytes == expected


def test_relative_model_paths_start_at_the_plans_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "deploy" / "models" / "llama"
    model_dir.mkdir(parents=True)
    shutil.copy(fixture_config("meta-llama--Llama-3.1-8B"), model_dir / "config.json")
    text = "deployments:\n  - name: a\n    model: ./models/llama\n    gpu: h100\n"
    path = write(tmp_path / "deploy", text)
    result = check_file(path).results[0]
    assert result.status == "pass", result.error


def test_many_plans_share_one_model_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = planner.model.load.load_model

    def counting(model: str, **kwargs: object) -> planner.LoadedModel:
        calls.append(model)
        return real(model, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner.check, "load_model", counting)  # where check's cache calls it
    rows = "".join(
        f"  - {{name: d{i}, model: {m}, gpu: {g}, max_model_len: {n}}}\n"
        for i, (m, g, n) in enumerate(
            (m, g, n)
            for m in ("llama-3.1-8b", "qwen3-8b")
            for g in ("h100", "l40s", "a100-80gb")
            for n in (4096, 8192, 16384, 32768)
        )
    )
    report = check_file(write(tmp_path, "deployments:\n" + rows))
    assert len(report.results) == 24
    assert sorted(calls) == ["llama-3.1-8b", "qwen3-8b"]
    assert report.exit_code == 0


def test_examples_plans_file_has_one_pass_and_one_fail() -> None:
    result = runner.invoke(app, ["check", str(ROOT / "examples" / "plans.yaml"), "-f", "json"])
    assert result.exit_code == 1
    statuses = sorted(d["status"] for d in json.loads(result.stdout)["deployments"])
    assert statuses == ["fail", "pass"]
    markdown = runner.invoke(
        app, ["check", str(ROOT / "examples" / "plans.yaml"), "-f", "markdown"]
    )
    failing = next(line for line in markdown.stdout.splitlines() if "`rag-7b-4090`" in line)
    # both failed checks are in the row, the limiting one first
    assert failing.endswith(
        # 8 sequences: graphs are captured for 5 sizes (the forward stays the activation
        # peak), so the pool is 8,160 blocks, 3.98x; 8 x 2,048 = 16,384 of 8,159 usable = 201 %
        "| ✗ KV usage at 8 × 32,768 tokens 201% > 90% allowed; ✗ concurrency 3.98x < 5x required |"
    )


def test_readme_shows_the_markdown_this_build_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, ["check", "examples/plans.yaml", "-f", "markdown"])
    assert "```markdown\n" + result.stdout + "```" in (ROOT / "docs" / "check.md").read_text()


def test_a_pipeline_longer_than_the_model_wont_start_not_a_crash(tmp_path: Path) -> None:
    # 2^40 pipeline stages for 32 layers: the entry won't start by vLLM's rule (pp <= layers)
    # instead of laying out 2^40 stages; at most one stage per layer starts.
    text = "deployments:\n  - {name: a, model: llama-3.1-8b, gpu: h100, pp: 1099511627776}\n"
    result = check_file(write(tmp_path, text)).results[0]
    assert (result.status, result.outcome) == ("fail", "wont_start")
    assert result.outcome_reason == "--pp 1099511627776 is more than the model's 32 layers"
    assert result.fix == "pp: 32"
