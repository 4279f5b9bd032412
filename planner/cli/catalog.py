"""``kvplan gpus`` and ``kvplan models``."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli._options import JsonOpt, user_errors


def gpus(json_: JsonOpt = False) -> None:
    """List the GPU catalog: memory as the CUDA driver reports it, bandwidth, BF16 rate.

    Example: kvplan gpus
    """
    from planner.gpus import GPUS
    from planner.render import catalog as render

    with user_errors():
        render.gpus(list(GPUS), as_json=json_)


def models(
    match: Annotated[
        str | None,
        typer.Argument(help="Only models whose name, hub id or family contains this (any case)."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """List the bundled offline catalog by family and size: layers, KV heads, head size,
    attention kinds, bytes/token.

    Example: kvplan models qwen
    """
    import planner
    from planner.errors import ModelNotFoundError
    from planner.render import catalog as render

    with user_errors():
        rows = planner.list_models(match)
        if not rows:
            raise ModelNotFoundError(
                f"no catalog model matches {match!r}; `kvplan models` lists them all"
            )
        render.models(rows, as_json=json_)
