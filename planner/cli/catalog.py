"""``kvplan gpus`` and ``kvplan models``."""

from __future__ import annotations

from planner.cli._options import JsonOpt, user_errors


def gpus(json_: JsonOpt = False) -> None:
    """List the GPU catalog: memory as the CUDA driver reports it, bandwidth, BF16 rate.

    Example: kvplan gpus
    """
    from planner.gpus import GPUS
    from planner.render import catalog as render

    with user_errors():
        render.gpus(list(GPUS), as_json=json_)


def models(json_: JsonOpt = False) -> None:
    """List the bundled offline catalog: layers, KV heads, head size, attention kinds, bytes/token.

    Example: kvplan models --json
    """
    import planner
    from planner.render import catalog as render

    with user_errors():
        render.models(planner.list_models(), as_json=json_)
