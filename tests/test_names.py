"""Names resolve: chat variants of a catalog entry with a note, only where the
KV geometry is the same; did-you-mean by family and size, for hub ids too; `kvplan models` by
family then size with a filter. All offline: the Hub is reached only through a patched
``huggingface_hub.hf_hub_download``."""

from __future__ import annotations

import json
from typing import Any

import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors
from typer.testing import CliRunner

import planner
from planner.cli import app
from planner.model import catalog
from planner.notes import notes_to
from tests.helpers import notes_of

runner = CliRunner()


def _no_hub(*args: Any, **kwargs: Any) -> str:
    raise hf_errors.LocalEntryNotFoundError("offline")


@pytest.fixture(autouse=True)
def _offline_hub(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def fake(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        return _no_hub()

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
    return calls


# --------------------------------------------------------------------------- variants


@pytest.mark.parametrize("model", ["llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct"])
def test_instruct_variant_resolves_to_its_base_with_a_note(
    model: str, _offline_hub: list[dict[str, Any]]
) -> None:
    notes: list[str] = []
    with notes_to(notes.append):
        spec = planner.load_model_spec(model)
    # the variant keeps its own name (its weights are what is served); the geometry is the base's
    assert spec.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert spec.source == "catalog: llama-3.1-8b (same geometry)"
    assert notes == [
        "meta-llama/Llama-3.1-8B-Instruct is not in the catalog; planning it with "
        "llama-3.1-8b's config (meta-llama/Llama-3.1-8B), which has the same layers, heads, KV "
        "heads, head size, hidden size, vocabulary, context and dtype"
    ]
    assert _offline_hub == []  # the catalog answered; the Hub was never asked


@pytest.mark.parametrize("columns", [80, 100])
def test_variant_note_wraps_at_the_width_with_every_word_and_json_stays_clean(
    columns: int,
) -> None:
    result = runner.invoke(
        app,
        ["estimate", "meta-llama/Llama-3.1-8B-Instruct", "--json"],
        env={"COLUMNS": str(columns)},
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["kv_bytes_per_token"] == 131_072
    # one note (225 characters), wrapped at the width between words: no line over it, no
    # word cut (the identifiers and the word list arrive whole), nothing else on stderr
    lines = result.stderr.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert lines[0].startswith("note: ") and all(x.startswith("  ") for x in lines[1:])
    # filled: a line ends only where the next word would not fit
    for line, after in zip(lines, lines[1:], strict=False):
        assert len(line) + 1 + len(after.split()[0]) > columns
    assert notes_of(result.stderr) == [
        "note: meta-llama/Llama-3.1-8B-Instruct is not in the catalog; planning it with "
        "llama-3.1-8b's config (meta-llama/Llama-3.1-8B), which has the same layers, heads, KV "
        "heads, head size, hidden size, vocabulary, context and dtype"
    ]


def test_the_command_serves_the_variant_asked_for() -> None:
    # planning with the base's geometry must not swap the weights the user deploys
    result = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b-instruct",
            "--gpu",
            "h100",
            "--max-model-len",
            "16384",
            "--json",
        ],
    )
    data = json.loads(result.stdout)
    assert data["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert data["commands"]["vllm"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")


def test_variant_geometry_equals_its_entry() -> None:
    """The recorded variant was checked by the build; re-check it against the entry's spec."""
    from tools.build_catalog import VARIANTS, geometry

    entry = catalog.lookup("meta-llama/Llama-3.1-8B")
    assert entry is not None
    (hub_id, geo, _source) = VARIANTS["meta-llama/Llama-3.1-8B"][0]
    assert hub_id == "meta-llama/Llama-3.1-8B-Instruct"
    assert geometry(entry.config) == geo
    assert entry.variants == (("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"),)


def test_a_variant_of_unknown_geometry_is_not_substituted() -> None:
    # No Llama-3.1-70B-Instruct config was checked: no silent substitution, a suggestion.
    result = runner.invoke(app, ["estimate", "llama-3.1-70b-instruct"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: unknown model 'llama-3.1-70b-instruct': not a local path, catalog name or hub "
        "id (org/name); did you mean llama-3.1-70b?"
    )


def test_build_refuses_a_variant_whose_geometry_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.build_catalog as build

    entry = catalog.lookup("llama-3.1-8b")
    assert entry is not None
    geo = {**build.geometry(entry.config), "max_position_embeddings": 8192}
    monkeypatch.setitem(build.VARIANTS, entry.hub_id, [("x/y-Instruct", geo, "test")])
    with pytest.raises(SystemExit, match="max_position_embeddings"):
        build.variants({"hub_id": entry.hub_id, "config": entry.config})


# --------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize(
    ("typo", "first"),
    [
        ("llama-3.1-8bb", "llama-3.1-8b"),
        ("llama-3.2-3b-instruc", "llama-3.2-3b-instruct"),
        ("qwen3-8b-instruct", "qwen3-8b"),
        ("gpt-oss-21b", "gpt-oss-20b"),
        ("mixtral-8x7b-instruct", "mixtral-8x7b-v0.1"),
    ],
)
def test_did_you_mean_puts_the_same_family_and_size_first(typo: str, first: str) -> None:
    assert catalog.suggest(typo)[0] == first


def test_did_you_mean_never_offers_another_size_before_the_same_size() -> None:
    # issue 14: llama-3.1-8b-instruct used to suggest llama-3.2-3b-instruct.
    hints = catalog.suggest("llama-3.1-8b-chat")
    assert hints[0] == "llama-3.1-8b"
    assert "llama-3.2-3b-instruct" not in hints


def test_did_you_mean_for_a_hub_id_typo_offline() -> None:
    result = runner.invoke(app, ["estimate", "meta-llama/Llama-3.1-8B-Instrct"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: unknown model 'meta-llama/Llama-3.1-8B-Instrct': not in the local Hugging Face "
        "cache; did you mean meta-llama/Llama-3.1-8B-Instruct, meta-llama/Llama-3.1-8B?"
    )


def test_hub_id_with_nothing_close_keeps_the_hub_error() -> None:
    result = runner.invoke(app, ["estimate", "acme/nothing-like-it"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in the local Hugging Face cache" in lines[0]
    assert "did you mean" not in lines[0]


# --------------------------------------------------------------------------- kvplan models


def _names(*args: str) -> list[str]:
    result = runner.invoke(app, ["models", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return [row["name"] for row in json.loads(result.stdout)]


def test_models_sorted_by_family_then_size() -> None:
    names = _names()
    llama31 = [n for n in names if n.startswith("llama-3.1-")]
    assert llama31 == ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"]
    gpt = [n for n in names if n.startswith("gpt-oss")]
    assert gpt == ["gpt-oss-20b", "gpt-oss-120b"]
    assert names.index("mixtral-8x7b-v0.1") < names.index("mixtral-8x22b-v0.1")
    assert names.index("deepseek-r1") < names.index("gemma-2-9b-it") < names.index("yi-34b")


def test_models_filter_is_a_case_insensitive_substring() -> None:
    assert _names("QWEN3-Coder") == ["qwen3-coder-30b-a3b-instruct"]
    assert _names("meta-llama/Llama-3.1") == ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"]
    # 17 Qwen configs, plus (issue 16) the GPTQ copy of Qwen2.5-7B and Qwen3-VL-32B
    assert all("qwen" in n for n in _names("qwen")) and len(_names("qwen")) == 19


def test_models_filter_matching_nothing_is_one_error_line() -> None:
    result = runner.invoke(app, ["models", "zzz"])
    assert result.exit_code == 1
    assert (
        result.stderr.strip()
        == "Error: no catalog model matches 'zzz'; `kvplan models` lists them all"
    )


def test_models_json_keeps_every_field() -> None:
    result = runner.invoke(app, ["models", "gemma-3-27b", "--json"])
    (row,) = json.loads(result.stdout)
    assert sorted(row) == sorted(
        [
            "name", "hub_id", "model_type", "num_layers", "num_kv_heads", "head_dim",
            "attention_type", "kinds", "kv_bytes_per_token", "state_bytes_per_sequence",
            "max_model_len", "aliases", "provenance",
        ]
    )  # fmt: skip
    assert row["hub_id"] == "google/gemma-3-27b-it" and row["num_layers"] == 62


# --------------------------------------------------------------------------- catalog growth


@pytest.mark.parametrize(
    "hub_id",
    [
        "Qwen/Qwen2.5-0.5B",
        "Qwen/Qwen2.5-VL-3B-Instruct",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "Qwen/Qwen3-235B-A22B-FP8",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "google/gemma-3-27b-it",
        "nvidia/DeepSeek-V3.1-NVFP4",
    ],
)
def test_catalog_has_the_added_models(hub_id: str) -> None:
    entry = catalog.lookup(hub_id)
    assert entry is not None and "config.json via github.com/" in entry.provenance
