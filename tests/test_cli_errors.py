"""Bad input on the command line: one `Error:` line on stderr, the right exit code, no traceback,
nothing on stdout (exit 1: the model or its config; exit 2: a flag the user can fix)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import planner
from planner import cli
from tests.conftest import fixture_config

LLAMA = "meta-llama--Llama-3.1-8B"  # 32 layers, 32 heads, 8 KV heads, hidden 4096
DROP = object()  # as a field value: remove the field


def write_config(tmp_path: Path, base: str = LLAMA, **changes: Any) -> str:
    """A real fixture config with some fields changed (or DROPped), as ``<tmp>/bad-model/``."""
    config = json.loads(fixture_config(base).read_text())
    for key, value in changes.items():
        if value is DROP:
            del config[key]
        else:
            config[key] = value
    folder = tmp_path / "bad-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def write_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


def empty_dir(tmp_path: Path) -> list[str]:
    """A folder with no config.json, named relative to the test's cwd (tmp_path)."""
    (tmp_path / "empty-dir").mkdir()
    return ["./empty-dir"]


Args = Callable[[Path], list[str]]


def case(args: list[str] | Args, code: int, fragment: str, id: str) -> Any:
    """One table row: CLI args after ``estimate`` (or a builder taking tmp_path)."""
    builder = args if callable(args) else (lambda _tmp, a=args: list(a))
    return pytest.param(builder, code, fragment, id=id)


def assert_error_line(result: Any, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ")
    assert result.stderr.count("\n") == 1, result.stderr  # exactly one line
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- model and config


def _field_cases() -> list[Any]:
    rows = []
    for field in ("num_hidden_layers", "num_key_value_heads", "hidden_size"):
        for value, label in (
            (0, "zero"),
            (-8, "negative"),
            (12.5, "fraction"),
            ("32", "string"),
            (True, "bool"),
        ):
            rows.append(
                case(
                    lambda tmp, f=field, v=value: [write_config(tmp, **{f: v})],
                    1,
                    f"bad-model/config.json: {field} must be a positive integer, got {value!r}",
                    id=f"{field}-{label}",
                )
            )
    return rows


MODEL_CASES = [
    case(["./nope/"], 1, "Error: no such file or directory: ./nope/", id="missing-dir"),
    case(
        ["/no/such/config.json"],
        1,
        "no such file or directory: /no/such/config.json",
        id="missing-file",
    ),
    case(
        lambda tmp: [write_file(tmp, '{"num_hidden_layers": 32,\n "hidden_size": }')],
        1,
        "config.json is not valid JSON (line 2, column 17: Expecting value)",
        id="malformed",
    ),
    case(
        lambda tmp: [write_file(tmp, "[1, 2]")],
        1,
        "config.json must hold a JSON object, not list",
        id="json-list",
    ),
    case(
        lambda tmp: [write_file(tmp, "")],
        1,
        "config.json is empty; expected a model's config.json",
        id="empty-file",
    ),
    case(
        empty_dir,
        1,
        "Error: ./empty-dir has no config.json",
        id="dir-without-config",
    ),
    case(
        lambda tmp: [write_config(tmp, num_hidden_layers=DROP)],
        1,
        "bad-model/config.json: config has no num_hidden_layers (or n_layer, num_layers, n_layers)",
        id="no-layer-count",
    ),
    case(
        lambda tmp: [write_config(tmp, num_attention_heads=DROP)],
        1,
        "bad-model/config.json: config has no num_attention_heads (or n_head, n_heads, num_heads)",
        id="no-head-count",
    ),
    case(
        lambda tmp: [write_config(tmp, hidden_size=DROP)],
        1,
        "bad-model/config.json: config has no hidden_size",
        id="no-hidden-size",
    ),
    *_field_cases(),
    case(
        lambda tmp: [write_config(tmp, num_key_value_heads=5)],
        1,
        "config.json: 5 KV heads do not divide 32 attention heads; check num_key_value_heads",
        id="kv-heads-not-dividing",
    ),
    case(
        lambda tmp: [write_config(tmp, num_key_value_heads=64)],
        1,
        "bad-model/config.json: 64 KV heads do not divide 32 attention heads",
        id="kv-heads-above-heads",
    ),
    case(
        ["llama-3.1-8bb"],
        1,
        "unknown model 'llama-3.1-8bb': not a local path, catalog name or hub id (org/name); "
        "did you mean llama-3.1-8b",
        id="typo-did-you-mean",
    ),
    case([""], 1, "no model given", id="empty-model"),
]

# --------------------------------------------------------------------------- flags (exit 2)

FLAG_CASES = [
    case(
        ["llama-3.1-8b", "--tp", "3"],
        2,
        "--tp 3 does not divide 32 attention heads and 8 KV heads; "
        "valid --tp values: 1, 2, 4, 8, 16, 32",
        id="tp-3",
    ),
    case(
        ["falcon-7b-instruct", "--tp", "2"],
        2,
        "tiiuae/falcon-7b-instruct: --tp 2 does not divide 71 attention heads; "
        "valid --tp values: 1",
        id="falcon-71-heads-tp-2",
    ),
    case(["llama-3.1-8b", "--tp", "0"], 2, "--tp must be a positive integer, got 0", id="tp-0"),
    case(
        ["llama-3.1-8b", "--tp", "-1"],
        2,
        "--tp must be a positive integer, got -1",
        id="tp-negative",
    ),
    case(["llama-3.1-8b", "--pp", "0"], 2, "--pp must be a positive integer, got 0", id="pp-0"),
    case(
        ["llama-3.1-8b", "--block-size", "0"],
        2,
        "--block-size must be a positive integer, got 0",
        id="block-size-0",
    ),
    case(
        ["llama-3.1-8b", "--max-model-len", "0"],
        2,
        "--max-model-len must be a positive integer, got 0",
        id="max-model-len-0",
    ),
    case(
        ["llama-3.1-8b", "--max-num-batched-tokens", "-5"],
        2,
        "--max-num-batched-tokens must be a positive integer, got -5",
        id="max-num-batched-tokens-negative",
    ),
    case(
        ["llama-3.1-8b", "--max-num-seqs", "0"],
        2,
        "--max-num-seqs must be a positive integer, got 0",
        id="max-num-seqs-0",
    ),
    case(
        ["llama-3.1-8b", "--kv-cache-dtype", "fp7"],
        2,
        "unknown KV cache dtype 'fp7'; use one of: auto, fp16, bf16, fp32, fp8, fp8_e4m3, "
        "fp8_e5m2, int8",
        id="kv-dtype-unknown",
    ),
    # vLLM 0.33's CacheConfig and SGLang 0.5.23's --kv-cache-dtype choices have no int8
    case(
        ["llama-3.1-8b", "--kv-cache-dtype", "int8"],
        2,
        "--kv-cache-dtype int8: vLLM has no int8 KV cache; use one of: auto, fp16, bf16, fp8, "
        "fp8_e4m3, fp8_e5m2",
        id="kv-dtype-int8-vllm",
    ),
    case(
        ["llama-3.1-8b", "--engine", "sglang", "--kv-cache-dtype", "int8"],
        2,
        "--kv-cache-dtype int8: SGLang has no int8 KV cache",
        id="kv-dtype-int8-sglang",
    ),
    case(
        ["llama-3.1-8b", "--engine", "foo"],
        2,
        "unknown engine 'foo'; use one of: vllm, sglang, trtllm, hf",
        id="engine-unknown",
    ),
    case(
        ["llama-3.1-8b", "--kv-cache-dtype", "fp32"],
        2,
        "--kv-cache-dtype fp32 is only meaningful with --engine hf",
        id="fp32-on-vllm",
    ),
    case(
        ["llama-3.1-8b", "--pp", "100"],
        2,
        "--pp 100 is more than the model's 32 layers",
        id="pp-above-layers",
    ),
    case(
        ["llama-3.1-8b", "--batch", "1,x"],
        2,
        "--batch takes comma-separated integers, got '1,x'",
        id="batch-not-int",
    ),
    case(
        ["llama-3.1-8b", "--batch", "8,0"],
        2,
        "--batch must be a positive integer, got 0",
        id="batch-zero",
    ),
]


@pytest.mark.parametrize(("args", "code", "fragment"), MODEL_CASES + FLAG_CASES)
def test_bad_input_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: Args, code: int, fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths in the table resolve inside tmp_path
    result = CliRunner().invoke(cli.app, ["estimate", *args(tmp_path)])
    assert_error_line(result, code, fragment)


def test_the_good_config_behind_the_table_loads(tmp_path: Path) -> None:
    # Guards the table: with nothing changed the helper's config is valid, so each row's
    # failure comes from its one changed field.
    result = CliRunner().invoke(cli.app, ["estimate", write_config(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["num_layers"] == 32


def test_non_integer_flag_is_typers_usage_error() -> None:
    result = CliRunner().invoke(cli.app, ["estimate", "llama-3.1-8b", "--tp", "abc"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Error: Invalid value for '--tp'" in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- main()


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(
            ["/no/such/config.json"],
            1,
            "Error: no such file or directory: /no/such/config.json\n",
            id="exit-1",
        ),
        pytest.param(
            ["llama-3.1-8b", "--tp", "0"],
            2,
            "Error: --tp must be a positive integer, got 0\n",
            id="exit-2",
        ),
    ],
)
def test_main_exits_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    monkeypatch.setattr(sys, "argv", ["kvplan", "estimate", *argv])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == code
    captured = capsys.readouterr()
    assert captured.err == message
    assert captured.out == ""
    assert "Traceback" not in captured.err


def test_kvplan_debug_reraises_the_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KVPLAN_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["kvplan", "estimate", "/no/such/config.json"])
    with pytest.raises(planner.ModelNotFoundError, match="no such file or directory"):
        cli.main()
    assert "Error:" not in capsys.readouterr().err  # raised, not printed
    result = CliRunner().invoke(cli.app, ["estimate", "llama-3.1-8b", "--tp", "0"])
    assert isinstance(result.exception, planner.UsageError)
