"""The Hugging Face Hub path: a fake offline cache read by the real ``hf_hub_download``, the
arguments planner passes at the ``huggingface_hub`` boundary, one-line hub errors, no secrets."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors
from typer.testing import CliRunner

import planner
from planner.cli import app
from tests.conftest import fixture_config

REPO = "acme/tiny-qwen"  # not in the catalog: only the Hub path can resolve it
SHA_MAIN = "0123456789abcdef0123456789abcdef01234567"
SHA_BRANCH = "89abcdef0123456789abcdef0123456789abcdef"
SECRET = "hf_SECRETMARKER123"
QWEN3_8B = fixture_config("Qwen--Qwen3-8B")
# Qwen3-8B: 36 layers x 8 KV heads x 128 head_dim x 2 (K and V) x 2 B (bf16) = 147,456 B/token.
QWEN3_8B_BYTES_PER_TOKEN = 36 * 8 * 128 * 2 * 2


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs logged in with a marker token that must never be printed."""
    monkeypatch.setenv("HF_TOKEN", SECRET)


@pytest.fixture
def hub_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$HF_HOME/hub``, also patched into huggingface_hub (it reads HF_HOME once, at import)."""
    # Imported here, not at module level: importing constants freezes HF_HOME for the session.
    from huggingface_hub import constants as hf_constants

    cache = Path(os.environ["HF_HOME"]) / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # any HTTP call would now raise
    return cache


def cache_repo(cache: Path, repo: str, sha: str, config: Path, refs: tuple[str, ...] = ()) -> Path:
    """Lay out one cached snapshot the way huggingface_hub does: refs/<ref> -> snapshots/<sha>."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / sha
    snapshot.mkdir(parents=True)
    shutil.copyfile(config, snapshot / "config.json")
    (root / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (root / "refs" / ref).write_text(sha)  # no newline: huggingface_hub does not strip it
    return snapshot / "config.json"


def run_cli(*args: str) -> Any:
    """Invoke ``kvplan``; whatever happens, the token must not appear in its output."""
    result = CliRunner().invoke(app, list(args))
    assert SECRET not in result.stdout + result.stderr
    return result


class FakeDownload:
    """Stands in for ``huggingface_hub.hf_hub_download``: records calls, returns or raises."""

    def __init__(self, result: Path | BaseException) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append({"args": args, **kwargs})
        if isinstance(self.result, BaseException):
            raise self.result
        return str(self.result)


Installer = Callable[[Path | BaseException], FakeDownload]  # what the fake_download fixture gives


@pytest.fixture
def fake_download(monkeypatch: pytest.MonkeyPatch) -> Installer:
    """Patch hf_hub_download (and make snapshot_download, i.e. weights, fail loudly)."""

    def install(result: Path | BaseException) -> FakeDownload:
        fake = FakeDownload(result)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)

        def no_snapshot(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("snapshot_download must never be called")

        monkeypatch.setattr(huggingface_hub, "snapshot_download", no_snapshot)
        return fake

    return install


def http_error(cls: type[hf_errors.HfHubHTTPError], status: int, message: str) -> BaseException:
    """A hub HTTP error as huggingface_hub raises it: message plus a real response (httpx2)."""
    url = f"https://huggingface.co/{REPO}/resolve/main/config.json"
    request = httpx2.Request("HEAD", url, headers={"authorization": f"Bearer {SECRET}"})
    response = httpx2.Response(status, request=request, headers={"x-request-id": "req-1"})
    return cls(message, response=response)


def assert_one_error_line(result: Any, *fragments: str) -> None:
    """Exit 1, nothing on stdout, exactly one `Error:` line with every fragment, no secret."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ")
    assert result.stderr.count("\n") == 1
    for fragment in fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert SECRET not in result.stdout + result.stderr


# --------------------------------------------------------------------------- real offline cache


def test_load_model_spec_reads_the_offline_cache(hub_cache: Path) -> None:
    cache_repo(hub_cache, REPO, SHA_MAIN, QWEN3_8B, refs=("main",))
    spec = planner.load_model_spec(REPO)
    assert spec.source == f"hub:{REPO}"
    assert spec.name == REPO
    expected = planner.parse_config(json.loads(QWEN3_8B.read_text()), name=REPO, source="x")
    assert spec.layers == expected.layers
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim) == (36, 8, 128)


def test_cli_estimate_json_reads_the_offline_cache(hub_cache: Path) -> None:
    cache_repo(hub_cache, REPO, SHA_MAIN, QWEN3_8B, refs=("main",))
    result = run_cli("estimate", REPO, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"] == REPO
    assert data["source"] == f"hub:{REPO}"
    assert data["kv_bytes_per_token"] == QWEN3_8B_BYTES_PER_TOKEN


def test_revision_cached_as_a_branch_ref_resolves(hub_cache: Path, tmp_path: Path) -> None:
    cache_repo(hub_cache, REPO, SHA_MAIN, QWEN3_8B, refs=("main",))
    # The branch snapshot differs from main (18 layers), so reading main instead would show.
    branch_config = tmp_path / "branch.json"
    branch_config.write_text(
        json.dumps({**json.loads(QWEN3_8B.read_text()), "num_hidden_layers": 18})
    )
    cache_repo(hub_cache, REPO, SHA_BRANCH, branch_config, refs=("half",))
    spec = planner.load_model_spec(REPO, revision="half")
    assert spec.source == f"hub:{REPO}@half"
    assert spec.num_layers == 18
    assert planner.load_model_spec(REPO).num_layers == 36


def test_revision_given_as_a_cached_commit_sha_resolves(hub_cache: Path) -> None:
    cache_repo(hub_cache, REPO, SHA_MAIN, QWEN3_8B)  # no refs at all: only the snapshot
    spec = planner.load_model_spec(REPO, revision=SHA_MAIN)
    assert spec.source == f"hub:{REPO}@{SHA_MAIN}"


def test_uncached_repo_offline_says_so_through_the_real_download(hub_cache: Path) -> None:
    result = run_cli("estimate", "acme/not-cached")
    assert_one_error_line(
        result,
        "acme/not-cached is not in the local Hugging Face cache",
        "(--offline or HF_HUB_OFFLINE is set)",
    )


def test_uncached_repo_with_offline_flag_names_the_flag(
    hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    result = run_cli("estimate", "acme/not-cached", "--offline")
    assert_one_error_line(result, "acme/not-cached is not in the local Hugging Face cache")
    assert "--offline" in result.stderr and "cannot be reached" not in result.stderr


def test_uncached_branch_offline_names_the_revision(hub_cache: Path) -> None:
    cache_repo(hub_cache, REPO, SHA_MAIN, QWEN3_8B, refs=("main",))
    result = run_cli("estimate", REPO, "--revision", "v9")
    assert_one_error_line(result, f"{REPO} at revision 'v9' is not in the local Hugging Face cache")


def test_repo_id_the_hub_rejects_is_one_line(hub_cache: Path) -> None:
    # Matches planner's org/name pattern, but huggingface_hub forbids "--" in repo ids.
    result = run_cli("estimate", "acme/bad--name")
    assert_one_error_line(result, "'acme/bad--name' is not a valid Hub repo id")


# --------------------------------------------------------------------------- the hub boundary


@pytest.mark.parametrize(
    ("env_offline", "flag", "local_only"),
    [
        pytest.param("1", False, True, id="HF_HUB_OFFLINE=1"),
        pytest.param("1", True, True, id="HF_HUB_OFFLINE=1+--offline"),
        pytest.param(None, True, True, id="--offline"),
        pytest.param(None, False, False, id="online"),
        pytest.param("0", False, False, id="HF_HUB_OFFLINE=0"),
    ],
)
def test_cli_passes_repo_file_revision_and_offline(
    monkeypatch: pytest.MonkeyPatch,
    fake_download: Installer,
    env_offline: str | None,
    flag: bool,
    local_only: bool,
) -> None:
    if env_offline is None:
        monkeypatch.delenv("HF_HUB_OFFLINE")
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", env_offline)
    fake = fake_download(QWEN3_8B)
    result = run_cli(
        "estimate", REPO, "--revision", "v2", "--json", *(["--offline"] if flag else [])
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["source"] == f"hub:{REPO}@v2"
    [call] = fake.calls
    assert call == {
        "args": (),
        "repo_id": REPO,
        "filename": "config.json",
        "revision": "v2",
        "local_files_only": local_only,
    }


def test_library_default_revision_is_none_and_only_config_json_is_asked_for(
    fake_download: Installer,
) -> None:
    fake = fake_download(QWEN3_8B)
    planner.load_model_spec(REPO)
    planner.load_model_spec(REPO, offline=False)
    assert [c["filename"] for c in fake.calls] == ["config.json", "config.json"]
    assert [c["revision"] for c in fake.calls] == [None, None]
    assert [c["local_files_only"] for c in fake.calls] == [True, False]


def test_catalog_hub_id_resolves_with_no_hub_call(
    fake_download: Installer,
) -> None:
    fake = fake_download(AssertionError("a catalog model must not reach the Hub"))
    spec = planner.load_model_spec("meta-llama/Llama-3.1-8B")
    assert spec.source == "catalog: llama-3.1-8b"
    result = run_cli("estimate", "meta-llama/Llama-3.1-8B", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["source"] == "catalog: llama-3.1-8b"
    assert fake.calls == []


def test_catalog_hub_id_with_a_revision_goes_to_the_hub(
    fake_download: Installer,
) -> None:
    fake = fake_download(fixture_config("meta-llama--Llama-3.1-8B"))
    result = run_cli("estimate", "meta-llama/Llama-3.1-8B", "--revision", "main", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["source"] == "hub:meta-llama/Llama-3.1-8B@main"
    [call] = fake.calls
    assert (call["repo_id"], call["filename"], call["revision"]) == (
        "meta-llama/Llama-3.1-8B",
        "config.json",
        "main",
    )


def test_unexpected_exception_from_the_hub_is_not_hidden(
    fake_download: Installer,
) -> None:
    # Only known hub/OS errors become one-line messages; a bug keeps its traceback.
    fake_download(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        planner.load_model_spec(REPO)


# --------------------------------------------------------------------------- hub errors


HUB_ERRORS = [
    pytest.param(
        lambda: http_error(hf_errors.GatedRepoError, 403, "403 gated"),
        (),
        [
            f"{REPO} is a gated model",
            f"accept its licence at https://huggingface.co/{REPO}",
            "set HF_TOKEN",
        ],
        id="gated",
    ),
    pytest.param(
        lambda: http_error(hf_errors.RepositoryNotFoundError, 404, "404 not found"),
        (),
        [f"{REPO} was not found on the Hub (a private repo also needs HF_TOKEN)"],
        id="repo-not-found",
    ),
    pytest.param(
        lambda: http_error(hf_errors.RevisionNotFoundError, 404, "404 revision"),
        ("--revision", "nope"),
        [f"{REPO} has no revision 'nope'; check --revision"],
        id="revision-not-found",
    ),
    pytest.param(
        lambda: hf_errors.LocalEntryNotFoundError("Cannot find the requested files"),
        (),
        [
            f"{REPO} is not in the local Hugging Face cache",
            "(--offline or HF_HUB_OFFLINE is set)",
            "pass a local path",
        ],
        id="local-entry-not-found",
    ),
    pytest.param(
        lambda: http_error(hf_errors.RemoteEntryNotFoundError, 404, "404 entry"),
        (),
        [f"{REPO} has no config.json"],
        id="entry-not-found",
    ),
    pytest.param(
        lambda: http_error(hf_errors.RemoteEntryNotFoundError, 404, "404 entry"),
        ("--revision", "v1"),
        [f"{REPO} at revision 'v1' has no config.json"],
        id="entry-not-found-at-revision",
    ),
    pytest.param(
        lambda: http_error(hf_errors.HfHubHTTPError, 500, "500 server error"),
        (),
        [f"the Hub refused {REPO}/config.json: HTTP 500"],
        id="http-500",
    ),
    pytest.param(
        lambda: http_error(hf_errors.HfHubHTTPError, 401, f"401 token {SECRET} invalid"),
        (),
        [f"the Hub refused {REPO}/config.json: HTTP 401"],
        id="http-401-message-with-token",
    ),
    pytest.param(
        lambda: hf_errors.OfflineModeIsEnabled(f"Cannot reach {REPO}"),
        (),
        [f"cannot fetch {REPO}/config.json: OfflineModeIsEnabled"],
        id="offline-mode-oserror",
    ),
]


@pytest.mark.parametrize(("make_error", "extra", "fragments"), HUB_ERRORS)
def test_hub_error_is_one_line_without_secrets(
    fake_download: Installer,
    make_error: Callable[[], BaseException],
    extra: tuple[str, ...],
    fragments: list[str],
) -> None:
    fake = fake_download(make_error())
    result = run_cli("estimate", REPO, *extra)
    assert_one_error_line(result, *fragments)
    assert len(fake.calls) == 1


def test_hub_error_maps_to_model_not_found_in_the_library(
    fake_download: Installer,
) -> None:
    fake_download(http_error(hf_errors.GatedRepoError, 403, "403 gated"))
    with pytest.raises(planner.ModelNotFoundError, match="is a gated model") as info:
        planner.load_model_spec(REPO)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_revision_not_found_without_a_revision_names_main(
    fake_download: Installer,
) -> None:
    # hf_hub_download treats revision=None as "main" (e.g. a repo whose default branch differs).
    fake_download(http_error(hf_errors.RevisionNotFoundError, 404, "404 revision"))
    with pytest.raises(planner.ModelNotFoundError) as info:
        planner.load_model_spec(REPO)
    assert "None" not in str(info.value)
    assert "has no revision 'main'" in str(info.value)


def test_catalog_name_with_revision_goes_to_its_hub_id(fake_download: Installer) -> None:
    recorder = fake_download(fixture_config("meta-llama--Llama-3.1-8B"))
    spec = planner.load_model_spec("llama-3.1-8b", revision="v2")
    assert spec.source == "hub:meta-llama/Llama-3.1-8B@v2"
    assert recorder.calls[0]["repo_id"] == "meta-llama/Llama-3.1-8B"


# --------------------------------------------------------------------------- the fetch stage


class FakeHeaders:
    """Stands in for ``huggingface_hub.get_safetensors_metadata``: records (repo, revision)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, repo: str, *, revision: str | None = None, **kwargs: Any) -> Any:
        import types

        self.calls.append((repo, revision))
        bf16 = types.SimpleNamespace(dtype="BF16", shape=[4096, 4096], data_offsets=(0, 1 << 25))
        tensors = {"model.layers.0.self_attn.q_proj.weight": bf16}
        return types.SimpleNamespace(
            files_metadata={"model.safetensors": types.SimpleNamespace(tensors=tensors)}
        )


@pytest.mark.parametrize(
    ("env_offline", "flag", "fetched"),
    [(None, False, True), (None, True, False), ("1", False, False)],
    ids=["online", "--offline", "HF_HUB_OFFLINE=1"],
)
def test_revision_and_offline_reach_the_safetensors_header_fetch(
    monkeypatch: pytest.MonkeyPatch,
    fake_download: Installer,
    env_offline: str | None,
    flag: bool,
    fetched: bool,
) -> None:
    # config.json and the headers are read at the same revision, and --offline (or the
    # environment) stops the header fetch as it stops the config's.
    if env_offline is None:
        monkeypatch.delenv("HF_HUB_OFFLINE")
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", env_offline)
    fake_download(QWEN3_8B)
    headers = FakeHeaders()
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", headers)
    args = ["estimate", REPO, "--revision", "v2", "--gpu", "h100", "--json"]
    result = run_cli(*args, *(["--offline"] if flag else []))
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    if fetched:
        assert headers.calls == [(REPO, "v2")]
        assert data["weights_source"] == "safetensors"
        # one 4,096 x 4,096 bf16 tensor in layer 0: 32 MiB of weights
        assert data["weights_total_bytes"] == 4096 * 4096 * 2
    else:
        assert headers.calls == []
        assert data["weights_source"] == "config"
