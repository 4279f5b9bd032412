"""Hermetic test environment: no network, an empty HF cache, no colour, fixed width."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def fixture_config(folder: str) -> Path:
    """Path of a real config.json copied from shared/model-configs (``org--name``)."""
    return FIXTURES / folder / "config.json"


def all_fixture_folders() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("KVPLAN_DEBUG", raising=False)
    # huggingface_hub reads HF_HOME / HF_HUB_OFFLINE once, at import: patch its constants too.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests need CUDA; `network` tests need KVPLAN_NETWORK_TESTS=1."""
    import importlib.util
    import os

    has_cuda = False
    if importlib.util.find_spec("torch") is not None:
        import torch

        has_cuda = torch.cuda.is_available()
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "network" in item.keywords and not os.environ.get("KVPLAN_NETWORK_TESTS"):
            item.add_marker(pytest.mark.skip(reason="needs Hub access (KVPLAN_NETWORK_TESTS=1)"))
