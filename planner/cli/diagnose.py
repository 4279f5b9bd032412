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
    gpu_arg,
    serve_options,
    user_errors,
)

LogArg = Annotated[
    str | None,
    typer.Argument(
        help="vLLM log (startup and runtime lines); or --metrics instead.",
        show_default=False,
        metavar="[LOG]",
    ),
]
MetricsOpt = Annotated[
    str | None,
    typer.Option(
        "--metrics",
        help="A running server's Prometheus metrics: a /metrics URL, a scrape file, a directory "
        "or file of scrapes, or a Prometheus range-query JSON export.",
        show_default=False,
        metavar="FILE|URL",
    ),
]
SaveWorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--save-workload",
        help="With --metrics: write the observed prompt/output lengths as a workload spec "
        "(YAML) for estimate -w and simulate -w.",
        show_default=False,
        metavar="FILE",
    ),
]
WatchOpt = Annotated[
    bool,
    typer.Option("--watch", help="With a --metrics URL: poll it and redraw until Ctrl-C."),
]
IntervalOpt = Annotated[
    float, typer.Option("--interval", help="Seconds between --watch polls.", min=1.0, max=3600.0)
]
LogModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model to plan [default: the one the log names].", show_default=False
    ),
]


@serve_options("diagnose")
def diagnose(
    serve: ServeArgs,
    log: LogArg = None,
    model: LogModelOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
    metrics: MetricsOpt = None,
    save_workload: SaveWorkloadOpt = None,
    watch: WatchOpt = False,
    interval: IntervalOpt = 5.0,
) -> None:
    """Read a vLLM boot log, compare it with the plan term by term, and say what to change.

    Settings the log states (model, max_model_len, TP, gpu_memory_utilization, GPU total) are
    used unless given here. A data-parallel log (one engine per DP rank) is read rank by rank,
    with the cluster's totals.

    \b
    Examples:
      kvplan diagnose vllm-startup.log --model llama-3.1-8b --gpu rtx-3090
      kvplan diagnose server.log --gpu h100 --json
      kvplan diagnose dp8-server.log --json   # a DP log: each rank, and the sum
      kvplan diagnose --metrics http://localhost:8000/metrics --gpu h100 --watch
    """
    if metrics is not None or log is None or save_workload is not None or watch:
        from planner.cli._metrics import diagnose_metrics

        diagnose_metrics(
            log,
            metrics,
            save_workload=save_workload,
            watch=watch,
            interval=interval,
            json_=json_,
            model=model,
            gpu=gpu,
            gpu_memory=gpu_memory,
            offline=offline,
            serve=serve,
        )
        return
    from planner.diagnose import diagnose_file
    from planner.render import diagnose as render

    with user_errors():
        from planner.status import quiet

        quiet(json_)
        result = diagnose_file(
            log,
            model=model,
            gpu=gpu_arg(gpu, gpu_memory),
            offline=offline or None,
            **serve.typed(),
        )
        render.diagnose(result, as_json=json_)
    if result.outcome == "wont_start":  # the log ends before serving, or the plan refuses
        from planner.errors import one_line
        from planner.secrets import redact

        why = f": {result.outcome_reason}" if result.outcome_reason else ""
        message = f"{log} won't start{why}"
        typer.echo(f"Error: {one_line(redact(message))}", err=True)
        raise typer.Exit(1)
