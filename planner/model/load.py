"""The fetch stage: everything kvplan reads about a model, under one revision and one
offline flag.

:func:`load_model` resolves the model argument (catalog, local dir / config.json, Hub id),
parses config.json into a :class:`~planner.model.specs.ModelSpec`, and reads the safetensors
headers where they are reachable: the ``*.safetensors`` files beside a local config, or the
Hub's headers at the same ``revision`` (never when offline). Weights, budgets and plans are
then pure functions of the :class:`LoadedModel` it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.model.hub import offline_env
from planner.model.resolve import load_model_spec
from planner.model.safetensors import read_safetensors_header
from planner.model.specs import ModelSpec
from planner.status import status

if TYPE_CHECKING:
    from planner.deployment import ServeSettings

Tensors = tuple[tuple[str, Mapping[str, Any]], ...]


@dataclass(frozen=True, kw_only=True)
class LoadedModel:
    """A model as fetched: its parsed config and, when found, its tensors' headers.

    Attributes:
        spec: the parsed config.
        tensors: (name, {dtype, shape, data_offsets}) of every tensor, from safetensors
            headers; None when there are none to read (catalog entry, offline Hub id,
            a config.json alone).
        tensors_where: where the headers came from (a folder, or ``hub:org/name@rev``).
        revision: the Hub revision both config and headers were read at.
    """

    spec: ModelSpec
    tensors: Tensors | None = None
    tensors_where: str = ""
    revision: str | None = None


def load_model(
    model: str, *, revision: str | None = None, offline: bool | None = None
) -> LoadedModel:
    """Fetch ``model``: config.json, then its safetensors headers under the same revision.

    Args:
        model: catalog name, Hub id or local dir / config.json.
        revision: Hub branch, tag or commit, for the config and the headers alike.
        offline: only the local HF cache (default: ``HF_HUB_OFFLINE``); no header fetch then.

    Returns:
        The :class:`LoadedModel`.
    """
    spec = load_model_spec(model, revision=revision, offline=offline)
    return with_headers(spec, revision=revision, offline=offline)


def with_headers(
    spec: ModelSpec, *, revision: str | None = None, offline: bool | None = None
) -> LoadedModel:
    """``spec`` with the safetensors headers its source points to (see :func:`load_model`)."""
    source = spec.source
    if source.endswith(".json") and Path(source).parent.is_dir():
        folder = Path(source).parent
        tensors = local_headers(folder)
        if tensors is not None:
            return LoadedModel(
                spec=spec, tensors=tensors, tensors_where=str(folder), revision=revision
            )
    if source.startswith("hub:"):
        local_only = offline_env() if offline is None else offline
        if not local_only:
            tensors = hub_headers(spec.name, revision=revision)
            if tensors is not None:
                where = f"hub:{spec.name}" + (f"@{revision}" if revision else "")
                return LoadedModel(
                    spec=spec, tensors=tensors, tensors_where=where, revision=revision
                )
    return LoadedModel(spec=spec, tensors=None, tensors_where="", revision=revision)


def local_headers(folder: Path) -> Tensors | None:
    """Every tensor header of a local folder's ``*.safetensors`` files (None if there are
    none); a malformed header is a :class:`~planner.errors.ConfigError`."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    tensors: list[tuple[str, Mapping[str, Any]]] = []
    for path in files:
        tensors.extend(read_safetensors_header(path).items())
    return tuple(tensors)


def hub_headers(repo: str, *, revision: str | None = None) -> Tensors | None:
    """The Hub's safetensors headers of ``repo`` at ``revision`` (None when unreachable, gated
    or not safetensors: the weights then come from the config)."""
    try:
        from huggingface_hub import get_safetensors_metadata

        with status(f"Reading {repo}'s safetensors headers from the Hugging Face Hub"):
            meta = get_safetensors_metadata(repo, revision=revision)
    except Exception:  # offline, no safetensors, gated: fall back to the config
        return None
    tensors: list[tuple[str, Mapping[str, Any]]] = []
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            tensors.append(
                (
                    name,
                    {
                        "dtype": info.dtype,
                        "shape": info.shape,
                        "data_offsets": list(info.data_offsets),
                    },
                )
            )
    return tuple(tensors)


def load_draft(
    settings: ServeSettings, *, offline: bool | None = None
) -> tuple[ServeSettings, LoadedModel | None]:
    """The draft checkpoint ``settings.speculative`` names (eagle, eagle3, draft_model,
    dflash), fetched like any model (config and safetensors headers), and the settings with
    its spec attached (its KV layers join the pool); None when the method loads none (mtp
    reads the target's own layers, n-gram has no network)."""
    spec = settings.speculative
    if spec is None or spec.model is None or not spec.has_drafter or spec.method == "mtp":
        return settings, None
    draft = load_model(spec.model, offline=offline)
    # vLLM loads the draft by Hub id: a catalog name becomes the id it stands for
    model = draft.spec.name if draft.spec.source.startswith("catalog:") else spec.model
    return settings.but(speculative=replace(spec, model=model, draft_spec=draft.spec)), draft
