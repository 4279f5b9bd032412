"""``kvplan diagnose --metrics``: one read, or ``--watch`` redrawing until Ctrl-C."""

from __future__ import annotations

import sys
from typing import Any

from planner.cli._options import ServeArgs, gpu_arg, user_errors
from planner.errors import UsageError


def diagnose_metrics(
    log: str | None,
    metrics: str | None,
    *,
    save_workload: str | None,
    watch: bool,
    interval: float,
    json_: bool,
    model: str | None,
    gpu: str | None,
    gpu_memory: str | None,
    offline: bool,
    serve: ServeArgs,
) -> None:
    """Check the flags, read the metrics (or poll them), print, and save the workload."""
    with user_errors():
        from planner.status import quiet

        quiet(json_)
        if metrics is None:
            flag = "--save-workload" if save_workload is not None else "--watch"
            raise UsageError(
                f"{flag} needs --metrics FILE|URL"
                if log is not None
                else "give a vLLM LOG, or --metrics FILE|URL for a running server"
            )
        if log is not None:
            raise UsageError(f"give a LOG or --metrics, not both (got {log!r} and --metrics)")
        if save_workload is not None:
            from planner.files import check_output_name

            check_output_name("--save-workload", save_workload)
        plan: dict[str, Any] = {
            **serve.typed(),
            "model": model,
            "gpu": gpu_arg(gpu, gpu_memory),
            "offline": offline or None,
        }
        if watch:
            dg = _watch(metrics, interval, json_, plan)
        else:
            from planner.diagnose.metrics import diagnose_metrics as run
            from planner.render.metrics import diagnose_metrics as show

            dg = run(metrics, **plan)
            show(dg, as_json=json_)
        if save_workload is not None and dg is not None:
            from planner.diagnose.metrics.observed import workload_yaml
            from planner.files import write_atomic

            write_atomic(save_workload, workload_yaml(dg), flag="--save-workload")
            if not json_:
                print(f"Saved the observed lengths to {save_workload} (a workload spec).")


def _watch(url: str, interval: float, json_: bool, plan: dict[str, Any]) -> Any:
    """Poll ``url`` every ``interval`` s; on a terminal redraw the report (rich Live), piped
    or with --json print it once, when Ctrl-C stops the watch. Returns the last diagnosis."""
    from planner.diagnose.metrics import watch
    from planner.render import metrics as render

    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--watch polls a server: give --metrics an http:// URL, not {url!r}")
    last = None
    live_on = sys.stdout.isatty() and not json_
    try:
        if live_on:
            from rich.live import Live

            from planner.render._output import console

            out = console()
            with Live(console=out, auto_refresh=False, transient=False) as live:
                for dg in watch(url, interval_s=interval, **plan):
                    last = dg
                    live.update(render.live_view(dg, out.width), refresh=True)
        else:
            for dg in watch(url, interval_s=interval, **plan):
                last = dg
    except KeyboardInterrupt:
        pass
    if last is not None and not live_on:
        render.diagnose_metrics(last, as_json=json_)
    return last
