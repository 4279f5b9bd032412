"""The ``kvplan`` command line. Each command parses, calls one library function, renders."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from planner.errors import KvplanError, UsageError

app = typer.Typer(
    name="kvplan",
    help="KV-cache memory planner for vLLM, SGLang and TensorRT-LLM: what fits, before launch.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

ModelArg = Annotated[
    str,
    typer.Argument(
        help="Catalog name (llama-3.1-8b), Hub id (org/name), or local dir / config.json.",
        show_default=False,
        metavar="MODEL",
    ),
]
TpOpt = Annotated[int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel size.")]
PpOpt = Annotated[
    int, typer.Option("--pp", "--pipeline-parallel-size", help="Pipeline-parallel size.")
]
KVDtypeOpt = Annotated[
    str,
    typer.Option(
        "--kv-cache-dtype", help="auto, fp16, bf16, fp8, fp8_e4m3, fp8_e5m2, int8 (fp32: hf only)."
    ),
]
EngineOpt = Annotated[str, typer.Option("--engine", help="vllm, sglang, trtllm or hf.")]
BlockOpt = Annotated[
    int | None,
    typer.Option(
        "--block-size",
        help="Tokens per block [default: vllm 16, trtllm 32, sglang/hf 1].",
        show_default=False,
    ),
]
MaxLenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        help="Context length per request [default: the model's].",
        show_default=False,
    ),
]
BatchedTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens",
        help="vLLM tokens per step; sets sliding-window KV in flight [default: vllm serve's, 2048 "
        "when no GPU is named].",
        show_default=False,
    ),
]
MaxSeqsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs", help="vLLM concurrent sequences [default: 256].", show_default=False
    ),
]
BatchOpt = Annotated[
    str, typer.Option("--batch", help="Comma-separated batch sizes for the worked example.")
]
RevisionOpt = Annotated[
    str | None,
    typer.Option(
        "--revision", help="Hub branch, tag or commit (skips the catalog).", show_default=False
    ),
]
OfflineOpt = Annotated[
    bool, typer.Option("--offline", help="Use only the local HF cache (like HF_HUB_OFFLINE=1).")
]
PrefixOpt = Annotated[
    bool,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM prefix caching (hybrid models keep extra Mamba pages when on).",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (integer bytes) instead of tables.")
]


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Show a KvplanError as one `Error:` line and exit 1 (usage: 2); KVPLAN_DEBUG re-raises."""
    try:
        yield
    except KvplanError as exc:
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch takes comma-separated integers, got {text!r}") from None
    return sizes


@app.command()
def estimate(
    model: ModelArg,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    kv_cache_dtype: KVDtypeOpt = "auto",
    engine: EngineOpt = "vllm",
    block_size: BlockOpt = None,
    max_model_len: MaxLenOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    batch: BatchOpt = "1,8,32",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    enable_prefix_caching: PrefixOpt = True,
    json_: JsonOpt = False,
) -> None:
    """KV-cache bytes per token and per sequence for MODEL, per GPU rank.

    Example: kvplan estimate Qwen/Qwen3-8B --tp 2 --kv-cache-dtype fp8 --max-model-len 32768
    """
    import planner
    from planner import render
    from planner.specs import Engine, KVDtype

    with user_errors():
        engine_ = Engine.parse(engine)
        dtype = KVDtype.parse(kv_cache_dtype)
        if dtype is KVDtype.FP32 and engine_ is not Engine.HF:
            raise UsageError("--kv-cache-dtype fp32 is only meaningful with --engine hf")
        sizes = _batch_sizes(batch)
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        result = planner.estimate(
            spec,
            engine=engine_,
            tp=tp,
            pp=pp,
            kv_cache_dtype=dtype,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            batch_sizes=sizes,
        )
        render.estimate(result, as_json=json_)


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the bundled offline catalog: layers, KV heads, head size, attention kinds, bytes/token.

    Example: kvplan models --json
    """
    import planner
    from planner import render

    with user_errors():
        render.models(planner.list_models(), as_json=json_)


WorkloadOpt = Annotated[
    str,
    typer.Option(
        "--workload",
        "-w",
        help="JSONL trace (prompt_tokens, output_tokens, arrival_s, prefix_id, prefix_tokens) or "
        "YAML spec (examples/workloads/).",
        show_default=False,
    ),
]


def _values(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


@app.command()
def simulate(
    model: ModelArg,
    workload: WorkloadOpt,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU (h100, a100-80gb, l40s, a10g, ...): sizes the pool (an estimate) and "
            "sets the step-time roofline.",
            show_default=False,
        ),
    ] = None,
    num_gpu_blocks: Annotated[
        int | None,
        typer.Option(
            "--num-gpu-blocks",
            help="KV pool in blocks (vLLM's num_gpu_blocks).",
            show_default=False,
        ),
    ] = None,
    kv_cache_memory: Annotated[
        str | None,
        typer.Option(
            "--kv-cache-memory", help="KV memory per GPU rank, e.g. 20GiB.", show_default=False
        ),
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory-utilization",
            help="Share of the GPU vLLM may use [default: 0.92].",
            show_default=False,
        ),
    ] = None,
    tp: TpOpt = 1,
    block_size: Annotated[
        str | None,
        typer.Option(
            "--block-size",
            help="Tokens per block; a list compares them: 8,16,32.",
            show_default=False,
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str,
        typer.Option(
            "--kv-cache-dtype", help="auto, fp16, bf16, fp8, ...; a list compares: auto,fp8."
        ),
    ] = "auto",
    max_num_seqs: Annotated[
        str | None,
        typer.Option(
            "--max-num-seqs",
            help="Concurrent sequences; a list compares: 32,64,128.",
            show_default=False,
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        str | None,
        typer.Option(
            "--max-num-batched-tokens",
            help="Tokens per step; a list compares them.",
            show_default=False,
        ),
    ] = None,
    max_model_len: MaxLenOpt = None,
    enable_prefix_caching: PrefixOpt = True,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare",
            help="KEY=V1,V2 to compare (prefix-caching=on,off, block-size=16,32, ...); repeatable.",
            show_default=False,
        ),
    ] = None,
    goal: Annotated[
        str,
        typer.Option("--goal", help="What 'best' means: throughput, ttft, tpot or preemptions."),
    ] = "throughput",
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="Seed for a YAML spec [default: the spec's].", show_default=False
        ),
    ] = None,
    num_requests: Annotated[
        int | None,
        typer.Option(
            "--num-requests",
            help="Requests to draw from a spec (a trace: the first N).",
            show_default=False,
        ),
    ] = None,
    skip_bad_lines: Annotated[
        bool,
        typer.Option("--skip-bad-lines", help="Skip bad trace lines (listed) instead of failing."),
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Draw usage over time and the comparison to a PNG (needs matplotlib).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="Also write the JSON report to this file.", show_default=False
        ),
    ] = None,
    save_trace: Annotated[
        str | None,
        typer.Option(
            "--save-trace",
            help="Write the requests as a JSONL trace (to replay or edit).",
            show_default=False,
        ),
    ] = None,
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Replay a workload over vLLM's paged KV cache: usage, preemptions, concurrency, latency.

    Example: kvplan simulate qwen2.5-7b --gpu l40s -w examples/workloads/chat.yaml --block-size 8,16
    """
    import planner
    from planner import render
    from planner.gpus import get_gpu
    from planner.simulate import build_settings, simulate_model
    from planner.units import parse_size
    from planner.workload import load_workload, trace_lines, write_atomic

    with user_errors():
        axes: dict[str, list[str]] = {
            "block-size": _values(block_size),
            "kv-cache-dtype": _values(kv_cache_dtype),
            "max-num-seqs": _values(max_num_seqs),
            "max-num-batched-tokens": _values(max_num_batched_tokens),
        }
        for item in compare or []:
            key, sep, rest = item.partition("=")
            key = key.strip().lower().removeprefix("--").replace("_", "-")
            key = {"enable-prefix-caching": "prefix-caching"}.get(key, key)
            if not sep or not _values(rest):
                raise UsageError(
                    f"--compare takes KEY=V1,V2 (e.g. prefix-caching=on,off), got {item!r}"
                )
            if axes.get(key):
                raise UsageError(f"{key} is given twice (as --{key} and in --compare)")
            axes[key] = _values(rest)
        if not axes.get("prefix-caching"):
            axes["prefix-caching"] = ["on" if enable_prefix_caching else "off"]
        settings, varied = build_settings({k: v for k, v in axes.items() if v})
        memory = parse_size(kv_cache_memory, flag="--kv-cache-memory") if kv_cache_memory else None
        gpu_ = get_gpu(gpu) if gpu else None
        load = load_workload(
            workload, seed=seed, num_requests=num_requests, skip_bad_lines=skip_bad_lines
        )
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        report = simulate_model(
            spec,
            load,
            settings=settings,
            axes=varied,
            gpu=gpu_,
            tp=tp,
            num_gpu_blocks=num_gpu_blocks,
            kv_cache_memory_bytes=memory,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            goal=goal,
        )
        if save_trace:
            write_atomic(save_trace, ("\n".join(trace_lines(load)) + "\n").encode())
        if output:
            write_atomic(output, render.to_json(render.simulate_dict(report)).encode())
        if plot:
            render.simulate_plot(report, plot)
        render.simulate(report, as_json=json_)


def main() -> None:
    """Console entry point: KvplanError -> one line and exit 1; bugs keep their traceback."""
    try:
        app()
    except KvplanError as exc:  # raised outside a command body (should not happen)
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
