"""Configs with custom code are read as data: no command imports a repo's Python, and nothing
ever passes `trust_remote_code=True` to transformers.

The planted repo ships `configuration_evil.py` and `modeling_evil.py` that write a marker file
when imported, and a config whose `auto_map` points at them; its `model_type` is one transformers
knows (granite) and it leaves optional fields out, so kvplan does consult transformers for
defaults. Every command runs in a fresh process whose working directory is the repo, so a plain
`import configuration_evil` would succeed there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import planner
from tests.conftest import fixture_config

ROOT = Path(__file__).resolve().parents[1]
REPO = "acme/evil-granite"
SHA = "0123456789abcdef0123456789abcdef01234567"
EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("imported {name}")
class EvilConfig: pass
class EvilForCausalLM: pass
"""


def evil_repo(folder: Path, marker: Path) -> Path:
    """A model folder with custom code that leaves ``marker`` behind if it is ever imported."""
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads(fixture_config("meta-llama--Llama-3.2-1B").read_text())
    config.update(
        model_type="granite",
        architectures=["EvilForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM",
        },
    )
    config.pop("rope_scaling", None)
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("configuration_evil", "modeling_evil"):
        (folder / f"{name}.py").write_text(EVIL.format(marker=str(marker), name=name))
    return folder


# Runs kvplan commands in one process (imports once) and prints [[exit code, stderr], ...].
RUNNER = """
import json, sys
from typer.testing import CliRunner
from planner.cli import app
results = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    results.append([result.exit_code, result.stderr, repr(result.exception)])
print(json.dumps(results))
"""


@pytest.mark.slow  # every command in a subprocess
def test_no_command_imports_a_repos_code(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    model = evil_repo(tmp_path / "repo", marker)
    (model / "plans.yaml").write_text(
        "deployments:\n  - {name: evil, model: ./, gpu: h100, max_model_len: 4096}\n"
    )
    (model / "w.jsonl").write_text('{"prompt_tokens": 100, "output_tokens": 10}\n')
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    env["PYTHONPATH"] = str(ROOT)  # kvplan itself; the repo folder is the working directory
    commands = [
        ["estimate", "./", "--json"],
        ["estimate", "./", "--gpu", "h100", "--engine", "hf"],
        ["check", "plans.yaml", "--format", "json"],
        ["diagnose", str(ROOT / "tests/fixtures/logs/vllm-v1-llama8b-h100.log"), "--model", "./"],
        ["simulate", "./", "-w", "w.jsonl", "--gpu", "h100", "--json"],
    ]
    if _has("torch") and _has("transformers"):
        commands.append(["verify", "./", "--hf-cache", "--json"])  # builds the model in torch
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(commands)],
        cwd=model,  # `import configuration_evil` would work from here
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for args, (code, err, exc) in zip(commands, json.loads(done.stdout), strict=True):
        assert code in (0, 1) and exc in ("None", "SystemExit(0)", "SystemExit(1)"), (args, err)
    assert not marker.exists(), marker.read_text()
    # the plant works: importing the repo's module from there does write the marker
    subprocess.run([sys.executable, "-c", "import configuration_evil"], cwd=model, check=True)
    assert marker.read_text() == "imported configuration_evil"


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_a_hub_snapshot_with_custom_code_is_read_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    root = cache / f"models--{REPO.replace('/', '--')}"
    marker = tmp_path / "PWNED"
    evil_repo(root / "snapshots" / SHA, marker)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(SHA)
    monkeypatch.syspath_prepend(str(root / "snapshots" / SHA))  # importable, if anyone tried
    spec = planner.load_model_spec(REPO)
    assert spec.source == f"hub:{REPO}" and spec.model_type == "granite"
    assert planner.estimate(spec).kv_bytes_per_token > 0
    assert not marker.exists()
    assert "configuration_evil" not in sys.modules and "modeling_evil" not in sys.modules


def test_trust_remote_code_is_never_true(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every transformers entry point that could load custom code, watched while kvplan reads the
    # evil config and asks transformers for its defaults.
    transformers = pytest.importorskip("transformers")
    from transformers import dynamic_module_utils

    calls: list[tuple[str, Any]] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"custom code loaded: {args} {kwargs}")

    monkeypatch.setattr(dynamic_module_utils, "get_class_from_dynamic_module", refuse)
    for cls_name in ("AutoConfig", "AutoModelForCausalLM"):
        cls = getattr(transformers, cls_name)
        for method in ("from_pretrained", "from_config", "for_model"):
            original = getattr(cls, method, None)
            if original is None:
                continue

            def watch(*args: Any, _o: Any = original, _n: str = method, **kwargs: Any) -> Any:
                calls.append((_n, kwargs.get("trust_remote_code")))
                return _o(*args, **kwargs)

            monkeypatch.setattr(cls, method, watch)
    monkeypatch.delenv("KVPLAN_NO_TRANSFORMERS", raising=False)
    planner.model.config._transformers_defaults.cache_clear()
    model = evil_repo(tmp_path / "repo", tmp_path / "PWNED")
    planner.load_model_spec(str(model))
    assert ("for_model", None) in calls  # it did ask transformers, for the built-in class
    assert all(flag is not True for _, flag in calls), calls
    assert not (tmp_path / "PWNED").exists()


def test_no_source_file_passes_trust_remote_code() -> None:
    pattern = re.compile(r"trust_remote_code\s*=\s*(?!False)")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("planner", "probes", "tools", "benchmarks", "examples")
        for path in (ROOT / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert offenders == []
