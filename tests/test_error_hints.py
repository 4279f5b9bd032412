"""Errors for unknown models and GPUs say how to go on."""

from __future__ import annotations

from typer.testing import CliRunner

from planner.cli import app

ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "80", "NO_COLOR": "1"}


def err(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env=ENV)
    return result.exit_code, result.stderr


def test_a_size_given_as_gpu_points_at_gpu_memory() -> None:
    code, text = err(["estimate", "llama-3.1-8b", "--gpu", "24gb"])
    assert code == 2
    assert "--gpu-memory 24GiB" in text and "did you mean" not in text
    code, text = err(["estimate", "llama-3.1-8b", "--gpu", "80 GiB"])
    assert code == 2 and "--gpu-memory 80GiB" in text


def test_an_uncached_model_offline_says_how_to_go_online_or_local(tmp_path: object) -> None:
    code, text = err(["estimate", "some-org/not-cached-model", "--offline"])
    assert code == 1
    assert "HF_HUB_OFFLINE=0" in text and "config.json" in text


def test_an_unknown_name_says_a_local_config_will_do() -> None:
    code, text = err(["estimate", "no-such-model-name"])
    assert code == 1
    assert "config.json" in text and "kvplan models" in text
