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
    str,
    typer.Argument(help="vLLM log (startup and runtime lines).", show_default=False, metavar="LOG"),
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
    log: LogArg,
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
    """
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
