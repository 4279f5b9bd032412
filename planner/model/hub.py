"""Hugging Face Hub access: config.json only, never weights, never remote code.

Errors from ``huggingface_hub`` map to one-line messages through an ordered type -> formatter
table, the way ``huggingface_hub.cli`` does with ``CLI_ERROR_MAPPINGS`` (subclasses first).
The token is read by huggingface_hub from ``HF_TOKEN`` / the login cache and never printed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from planner.errors import ModelNotFoundError
from planner.status import status


class RepoMissingError(ModelNotFoundError):
    """The repo is neither in the local cache (offline) nor on the Hub: a typo, maybe.

    ``reason`` is the short why, for a message that goes on with a "did you mean"."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _error_table(
    repo: str, revision: str | None, offline: bool
) -> list[tuple[type[BaseException], Callable[[BaseException], str]]]:
    from huggingface_hub import errors

    rev = f" at revision {revision!r}" if revision else ""
    if offline:
        why = "(--offline or HF_HUB_OFFLINE is set)"
    else:
        why = "and the Hub cannot be reached (offline?)"
    return [
        (
            errors.GatedRepoError,
            lambda e: (
                f"{repo} is a gated model: accept its licence at https://huggingface.co/{repo} "
                "and set HF_TOKEN to a token of that account"
            ),
        ),
        (
            errors.RevisionNotFoundError,
            lambda e: f"{repo} has no revision {revision or 'main'!r}; check --revision",
        ),
        (
            errors.RepositoryNotFoundError,
            lambda e: f"{repo} was not found on the Hub (a private repo also needs HF_TOKEN)",
        ),
        (
            errors.LocalEntryNotFoundError,
            lambda e: (
                f"{repo}{rev} is not in the local Hugging Face cache {why}"
                + "; run once online (HF_HUB_OFFLINE=0, no --offline: only config.json and "
                "safetensors headers are fetched), pass a local path (a folder with its "
                "config.json), or use a catalog name (`kvplan models`)"
            ),
        ),
        (errors.EntryNotFoundError, lambda e: f"{repo}{rev} has no config.json"),
        (
            errors.HfHubHTTPError,
            lambda e: f"the Hub refused {repo}/config.json{rev}: " + _status_line(e),
        ),
        (errors.HFValidationError, lambda e: f"{repo!r} is not a valid Hub repo id"),
        (OSError, lambda e: f"cannot fetch {repo}/config.json{rev}: {type(e).__name__}"),
    ]


def _status_line(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


def download_config(repo: str, *, revision: str | None = None, offline: bool | None = None) -> Path:
    """Fetch ``config.json`` of ``repo`` into the normal HF cache and return its path.

    Args:
        repo: Hub repo id (``org/name``).
        revision: branch, tag or commit; default ``main``.
        offline: only look in the local cache; default follows ``HF_HUB_OFFLINE``.

    Returns:
        The cached file's path.
    """
    from huggingface_hub import hf_hub_download

    local_only = offline_env() if offline is None else offline
    # huggingface_hub logs each connection retry as a warning; the one-line error says it all.
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)

    where = "the local Hugging Face cache" if local_only else "the Hugging Face Hub"
    wait = "" if local_only else " (up to ~20 s without network; HF_HUB_OFFLINE=1 skips it)"
    try:
        with status(f"Fetching {repo}/config.json from {where}{wait}"):
            return Path(
                hf_hub_download(
                    repo_id=repo,
                    filename="config.json",
                    revision=revision,
                    local_files_only=local_only,
                )
            )
    except Exception as exc:
        from huggingface_hub import errors

        for exc_type, message in _error_table(repo, revision, local_only):
            if isinstance(exc, exc_type):
                if exc_type in (errors.LocalEntryNotFoundError, errors.RepositoryNotFoundError):
                    where = (
                        "not in the local Hugging Face cache" if local_only else "not on the Hub"
                    )
                    raise RepoMissingError(message(exc), where) from None
                raise ModelNotFoundError(message(exc)) from None
        raise


def download_optional(
    repo: str, filename: str, *, revision: str | None = None, offline: bool | None = None
) -> Path | None:
    """Fetch one more small file of ``repo`` (a processor config) into the HF cache, beside
    its config.json; None when it is not there or cannot be fetched (never an error)."""
    from huggingface_hub import hf_hub_download

    local_only = offline_env() if offline is None else offline
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    try:
        return Path(
            hf_hub_download(
                repo_id=repo, filename=filename, revision=revision, local_files_only=local_only
            )
        )
    except Exception:  # absent, offline, gated: the tokens per item are then asked for
        return None
