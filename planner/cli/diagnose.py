"""``kvplan diagnose``."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli._options import (
    GpuMemoryOpt,
    GpuOpt,
    JsonOpt,
    OfflineOpt,
    ServeArgs,
    _gpu_arg,
    serve_options,
    user_errors,
)

LogArg = Annotated[
    str,
    typer.Argument(help="vLLM log (startup and runtime lines).", show_default=False, metavar="LOG"),
]
LogModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model to plan [default: the one the log names].", show_default=False
    ),
]


@serve_options("diagnose")
def diagnose(
    log: LogArg,
    serve: ServeArgs,
    model: LogModelOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Read a vLLM boot log, compare it with the plan term by term, and say what to change.

    Settings the log states (model, max_model_len, TP, gpu_memory_utilization, GPU total) are
    used unless given here. A data-parallel log (one engine per DP rank) is read rank by rank,
    with the cluster's totals.

    \b
    Examples:
      kvplan diagnose vllm-startup.log --model llama-3.1-8b --gpu rtx-3090
      kvplan diagnose server.log --gpu h100 --json
      kvplan diagnose dp8-server.log --json    # --data-parallel-size 8: ranks, cluster
    """
    from planner.diagnose import diagnose_file
    from planner.render import diagnose as render

    with user_errors():
        from planner.status import quiet

        quiet(json_)
        result = diagnose_file(
            log,
            model=model,
            gpu=_gpu_arg(gpu, gpu_memory),
            offline=offline or None,
            **serve.typed(),
        )
        render.diagnose(result, as_json=json_)
