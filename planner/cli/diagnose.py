"""``kvplan diagnose``."""

from __future__ import annotations

from typing import Annotated

import typer

from planner.cli._options import (
    BatchedTokensOpt,
    EagerOpt,
    GpuMemoryOpt,
    GpuOpt,
    JsonOpt,
    MaxLenOpt,
    MaxSeqsOpt,
    OfflineOpt,
    _gpu_arg,
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
LogTpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        "--tensor-parallel-size",
        help="Tensor-parallel size [default: the log's, else 1].",
        show_default=False,
    ),
]
LogPpOpt = Annotated[
    int | None,
    typer.Option(
        "--pp",
        "--pipeline-parallel-size",
        help="Pipeline-parallel size [default: the log's, else 1].",
        show_default=False,
    ),
]
LogGmuOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        help="vLLM's fraction of GPU memory [default: the log's, else vLLM's].",
        show_default=False,
    ),
]
LogKVDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-dtype",
        help="KV cache dtype [default: the log's, else auto].",
        show_default=False,
    ),
]


def diagnose(
    log: LogArg = None,
    model: LogModelOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    tp: LogTpOpt = None,
    pp: LogPpOpt = None,
    max_model_len: MaxLenOpt = None,
    gpu_memory_utilization: LogGmuOpt = None,
    kv_cache_dtype: LogKVDtypeOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    enforce_eager: EagerOpt = False,
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
      kvplan diagnose dp8-server.log --json    # --data-parallel-size 8: ranks, cluster
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
            tp=tp,
            pp=pp,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            offline=offline,
        )
        return
    from planner.diagnose import diagnose_file
    from planner.model.specs import KVDtype
    from planner.render import diagnose as render

    with user_errors():
        from planner.status import quiet

        quiet(json_)
        result = diagnose_file(
            log,
            model=model,
            gpu=_gpu_arg(gpu, gpu_memory),
            tp=tp,
            pp=pp,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=KVDtype.parse(kv_cache_dtype) if kv_cache_dtype else None,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enforce_eager=True if enforce_eager else None,
            offline=offline or None,
        )
        render.diagnose(result, as_json=json_)
