"""With a Hugging Face token set, nothing kvplan prints or writes contains it: tables, JSON,
markdown, JUnit, report files, `Error:` lines, warnings, tracebacks and debug logs.

Every case plants the token where kvplan echoes what it read (a model's name, a deployment's
name, a file name, a hub error's message), so each assertion fails if redaction stops working.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors
from typer.testing import CliRunner

from planner import cli
from planner.cli import app
from planner.secrets import REDACTED, redact
from tests.conftest import fixture_config

SECRET = "hf_SECRETMARKER0123456789"
ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads(fixture_config("meta-llama--Llama-3.1-8B").read_text())


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)


def setup(tmp: Path) -> None:
    """Inputs that carry the token: a model named by a URL with credentials, a deployment, a
    log naming a model, a trace whose file name and prefix are the token."""
    model = tmp / "model"
    model.mkdir()
    name = f"https://user:{SECRET}@models.example.com/llama"
    (model / "config.json").write_text(json.dumps({**LLAMA, "_name_or_path": name}))
    (tmp / "plans.yaml").write_text(
        "deployments:\n"
        f"  - {{name: svc-{SECRET}, model: llama-3.1-8b, gpu: h100, max_model_len: 8192}}\n"
        f"  - {{name: big-{SECRET}, model: llama-3.1-8b, gpu: l4, max_model_len: 131072}}\n"
        f"  - {{name: bad-{SECRET}, model: llama-3.1-8b, gpu: h1000}}\n"
    )
    log = (ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log").read_text()
    (tmp / "vllm.log").write_text(
        log.replace("meta-llama/Llama-3.1-8B", f"acme/{SECRET}")
        + f"INFO non-default args: {{'model': 'acme/{SECRET}', 'hf_token': '{SECRET}'}}\n"
    )
    (tmp / f"{SECRET}.jsonl").write_text(
        f'{{"prompt_tokens": 600, "output_tokens": 20, "prefix_id": "{SECRET}", '
        '"prefix_tokens": 512}\n{"prompt_tokens": -1, "output_tokens": 5}\n'
    )
    (tmp / "plan.json").write_text(json.dumps({**saved_plan(), "model": f"acme/{SECRET}"}))


def saved_plan() -> dict[str, Any]:
    result = CliRunner().invoke(app, ["estimate", "qwen3-0.6b", "--max-model-len", "256", "--json"])
    return dict(json.loads(result.stdout))


TRACE = f"{SECRET}.jsonl"
COMMANDS = [
    pytest.param(["estimate", "./model"], id="estimate-table"),
    pytest.param(["estimate", "./model", "--json", "--gpu", "h100"], id="estimate-json"),
    pytest.param(["estimate", "./model", "--gpu", "l4", "--grid"], id="estimate-gpu-table"),
    pytest.param(["estimate", f"acme/{SECRET}"], id="estimate-hub-error"),
    pytest.param(["estimate", f"./{SECRET}/config.json"], id="estimate-path-error"),
    pytest.param(["models", "--json"], id="models"),
    pytest.param(["gpus"], id="gpus"),
    pytest.param(["check", "plans.yaml"], id="check-table"),
    pytest.param(["check", "plans.yaml", "-f", "json"], id="check-json"),
    pytest.param(["check", "plans.yaml", "-f", "markdown"], id="check-markdown"),
    pytest.param(["check", "plans.yaml", "-f", "junit"], id="check-junit"),
    pytest.param(
        ["check", "plans.yaml", "-f", "junit", "-o", "out/report.xml"], id="check-junit-file"
    ),
    pytest.param(["diagnose", "vllm.log", "--gpu", "h100"], id="diagnose-table"),
    pytest.param(["diagnose", "vllm.log", "--json"], id="diagnose-json"),
    pytest.param(["diagnose", "vllm.log", "--model", f"acme/{SECRET}"], id="diagnose-hub-error"),
    pytest.param(
        ["simulate", "llama-3.2-1b", "-w", TRACE, "--gpu", "h100", "--skip-bad-lines"],
        id="simulate-table",
    ),
    pytest.param(
        ["simulate", "llama-3.2-1b", "-w", TRACE, "--gpu", "h100", "--skip-bad-lines", "--json"]
        + ["-o", "out/sim.json", "--save-trace", "out/trace.jsonl"],
        id="simulate-json-and-files",
    ),
    pytest.param(["simulate", "llama-3.2-1b", "-w", TRACE, "--gpu", "h100"], id="simulate-error"),
    pytest.param(["verify", "--plan", "plan.json", "--memory-budget", "1GiB"], id="verify-error"),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_no_output_contains_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    (tmp_path / "out").mkdir()
    result = CliRunner().invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.stdout + result.stderr, "the command printed nothing"
    assert SECRET not in result.stdout + result.stderr
    for written in (tmp_path / "out").iterdir():
        assert SECRET not in written.read_text()


def test_the_cases_do_echo_the_token_without_redaction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Guards the table above: with redaction off, the planted token reaches the output.
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    monkeypatch.setattr("planner.secrets.secrets", lambda: [])
    for args in (["estimate", "./model"], ["check", "plans.yaml", "-f", "junit"]):
        result = CliRunner().invoke(app, args)
        assert SECRET in result.stdout + result.stderr, args


def test_token_saved_by_login_is_redacted_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))
    (tmp_path / "token").write_text(SECRET + "\n")
    assert redact(f"a {SECRET} b") == f"a {REDACTED} b"
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    result = CliRunner().invoke(app, ["estimate", "./model", "--json"])
    assert result.exit_code == 0 and SECRET not in result.stdout


def http_error(cls: type[hf_errors.HfHubHTTPError], status: int) -> BaseException:
    """A hub HTTP error as huggingface_hub raises it, the token in its message and request."""
    url = "https://huggingface.co/acme/model/resolve/main/config.json"
    request = httpx2.Request("HEAD", url, headers={"authorization": f"Bearer {SECRET}"})
    response = httpx2.Response(status, request=request)
    return cls(f"{status} for token {SECRET}", response=response)


HUB_ERRORS = [
    pytest.param(lambda: http_error(hf_errors.GatedRepoError, 403), id="gated"),
    pytest.param(lambda: http_error(hf_errors.RepositoryNotFoundError, 404), id="not-found"),
    pytest.param(lambda: http_error(hf_errors.HfHubHTTPError, 401), id="unauthorized"),
    pytest.param(lambda: hf_errors.LocalEntryNotFoundError(f"no cache ({SECRET})"), id="offline"),
    pytest.param(lambda: OSError(f"connection reset, token {SECRET}"), id="os-error"),
]


@pytest.mark.parametrize("make_error", HUB_ERRORS)
def test_hub_errors_do_not_carry_the_token(
    monkeypatch: pytest.MonkeyPatch, make_error: Any
) -> None:
    def download(*args: Any, **kwargs: Any) -> str:
        raise make_error()

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    for args in (["estimate", "acme/model"], ["estimate", "acme/model", "--json"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1 and result.stderr.startswith("Error: ")
        assert SECRET not in result.stdout + result.stderr


def test_a_bug_keeps_its_traceback_without_the_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An exception kvplan does not know is a bug: main() lets Python print it, through the
    # redacting hook it installs.
    def download(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError(f"server said: bad token {SECRET}")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(sys, "argv", ["kvplan", "estimate", "acme/model"])
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    with pytest.raises(RuntimeError) as info:
        cli.main()
    sys.excepthook(info.type, info.value, info.tb)
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: server said: bad token" in err
    assert SECRET not in err and REDACTED in err


def test_kvplan_debug_traceback_is_redacted(tmp_path: Path) -> None:
    env = {**os.environ, "HF_TOKEN": SECRET, "KVPLAN_DEBUG": "1", "HF_HOME": str(tmp_path)}
    command = [sys.executable, "-c", "from planner.cli import main; main()"]
    args = ["estimate", f"./{SECRET}/config.json"]
    done = subprocess.run(command + args, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ModelNotFoundError" in done.stderr
    assert SECRET not in done.stdout + done.stderr and REDACTED in done.stderr


def test_debug_logging_does_not_show_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    for args in (["estimate", f"acme/{SECRET}"], ["estimate", "acme/model", "--offline"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1
    assert SECRET not in caplog.text


# ------------------------------------------------------------------ issue 26: before rendering


def pieces(text: str, size: int = 8) -> list[str]:
    """Every ``size``-character piece of the token found in ``text`` once line breaks and
    spaces are taken out (a token folded across lines is still a leak)."""
    flat = "".join(text.split())
    return [
        SECRET[i : i + size] for i in range(len(SECRET) - size + 1) if SECRET[i : i + size] in flat
    ]


def token_model(tmp: Path) -> str:
    """A local model whose folder, and so its name, is the token: ``acme/<token>``."""
    folder = tmp / "acme" / SECRET
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return f"acme/{SECRET}"


@pytest.mark.parametrize("columns", ["30", "45", "80"])
def test_rich_never_folds_a_token_into_pieces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, columns: str
) -> None:
    # was: at COLUMNS=30 the model's name printed the token in two pieces, past redaction
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", columns)
    model = token_model(tmp_path)
    result = CliRunner().invoke(app, ["estimate", model, "--gpu", "h100"])
    assert result.exit_code == 0, result.stderr
    assert REDACTED in result.stdout
    assert pieces(result.stdout + result.stderr) == []


def test_a_value_cut_for_an_error_is_redacted_first() -> None:
    # was: cut at 30 characters before redaction, 29-30 characters of the token showed
    long = SECRET + "x" * 40
    result = CliRunner().invoke(app, ["estimate", "llama-3.1-8b", "--gpu-memory", long])
    assert result.exit_code == 2 and "--gpu-memory" in result.stderr
    assert pieces(result.stderr) == [], result.stderr


def test_a_token_from_a_pipe_is_redacted_everywhere(tmp_path: Path) -> None:
    # was: HF_TOKEN_PATH=<(printf TOKEN) gave the token once; the later vllm serve line had it
    model = token_model(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    main = "import sys; from planner.cli import main; sys.argv[0] = 'kvplan'; main()"
    shell = f"HF_TOKEN_PATH=<(printf {SECRET}) '{sys.executable}' -c \"{main}\" estimate {model}"
    run = subprocess.run(
        ["bash", "-c", shell + " --gpu h100"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    # a long model path goes on its own line of the command: read the command whole
    whole = run.stdout.replace("\\\n", " ")
    serve = [line for line in whole.splitlines() if "vllm serve" in line]
    assert serve and all(REDACTED in line for line in serve), run.stdout
    assert pieces(run.stdout + run.stderr) == []


def test_the_token_file_is_read_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:

    monkeypatch.delenv("HF_TOKEN")
    token = tmp_path / "token"
    token.write_text(SECRET)
    monkeypatch.setenv("HF_TOKEN_PATH", str(token))
    opened: list[object] = []
    real = os.open

    def counted(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    assert [redact(SECRET), redact(SECRET)] == [REDACTED, REDACTED]
    assert opened.count(token) + opened.count(str(token)) == 1


def test_a_plot_keeps_no_token_as_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # an SVG or PDF keeps the title as text; the model's name carries the token
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    model = token_model(tmp_path)
    chat = str(ROOT / "examples" / "workloads" / "chat.yaml")
    args = ["simulate", model, "--gpu", "h100", "-w", chat, "--num-requests", "5"]
    result = CliRunner().invoke(app, [*args, "--plot", "plot.svg"])
    assert result.exit_code == 0, result.stderr
    svg = (tmp_path / "plot.svg").read_text()
    assert SECRET not in svg and pieces(svg) == []
