"""The ``kvplan`` command line. Each command parses, calls one library function, renders."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.errors import KvplanError, UsageError, one_line

if TYPE_CHECKING:
    from planner.deployment import Gpu, ServeSettings

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
        from planner.secrets import redact

        typer.echo(f"Error: {one_line(redact(str(exc)))}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--batch takes comma-separated integers, got {text!r}") from None
    return sizes


GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="GPU from the catalog (h100, l4, rtx-4090 ...; `kvplan gpus`).",
        show_default=False,
    ),
]
GpuMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-memory",
        help="Total GPU memory for a GPU not in the catalog (24GiB, 80GB, or bytes).",
        show_default=False,
    ),
]
GmuOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        help="vLLM's fraction of GPU memory [default: 0.92].",
        show_default=False,
    ),
]
KVMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-cache-memory",
        help="KV budget per GPU, like vLLM's "
        "--kv-cache-memory-bytes (ignores gpu_memory_utilization).",
        show_default=False,
    ),
]
HeadroomOpt = Annotated[
    str, typer.Option("--headroom", help="Memory to keep free on top of vLLM's budget.")
]
GraphOpt = Annotated[
    str | None,
    typer.Option(
        "--cuda-graph-memory",
        help="CUDA-graph memory vLLM subtracts [default: 0.5GiB estimate].",
        show_default=False,
    ),
]
EagerOpt = Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs (0 bytes).")]
GridOpt = Annotated[
    bool, typer.Option("--grid", help="Show the max_model_len x max_num_seqs grid.")
]
SharedPrefixOpt = Annotated[
    int | None,
    typer.Option(
        "--shared-prefix",
        help="Tokens of a system prompt shared by --requests "
        "requests: blocks saved by prefix caching.",
        show_default=False,
    ),
]
RequestsOpt = Annotated[int, typer.Option("--requests", help="Requests sharing --shared-prefix.")]
AvgTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--avg-tokens",
        help="Average tokens per request, for fragmentation and the "
        "naive-vs-paged comparison [default: max_model_len / 2].",
        show_default=False,
    ),
]


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
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    gpu_memory_utilization: GmuOpt = None,
    kv_cache_memory: KVMemoryOpt = None,
    headroom: HeadroomOpt = "0",
    cuda_graph_memory: GraphOpt = None,
    enforce_eager: EagerOpt = False,
    grid: GridOpt = False,
    shared_prefix: SharedPrefixOpt = None,
    requests: RequestsOpt = 100,
    avg_tokens: AvgTokensOpt = None,
    batch: BatchOpt = "1,8,32",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    enable_prefix_caching: PrefixOpt = True,
    json_: JsonOpt = False,
) -> None:
    """KV-cache bytes per token and per sequence for MODEL, per GPU rank; with a GPU, what
    vLLM will report at startup and what to set.

    \b
    Examples:
      kvplan estimate Qwen/Qwen3-8B --tp 2 --kv-cache-dtype fp8 --max-model-len 32768
      kvplan estimate qwen2.5-7b --gpu rtx-4090 --grid
      kvplan estimate qwen3-14b --kv-cache-memory 6.51GiB --max-model-len 32768
    """
    from planner import render
    from planner.deployment import Deployment
    from planner.model.load import load_model
    from planner.recommend import PlanOptions, report

    with user_errors():
        settings = _serve_settings(
            engine=engine,
            tp=tp,
            pp=pp,
            kv_cache_dtype=kv_cache_dtype,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            enable_prefix_caching=enable_prefix_caching,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory=kv_cache_memory,
            headroom=headroom,
            cuda_graph_memory=cuda_graph_memory,
            enforce_eager=enforce_eager,
        )
        options = PlanOptions(
            shared_prefix_tokens=shared_prefix,
            requests=requests,
            avg_tokens=avg_tokens,
            batch_sizes=_batch_sizes(batch),
        )
        gpu_ = _gpu_arg(gpu, gpu_memory)
        loaded = load_model(model, revision=revision, offline=offline or None)
        result = report(Deployment(model=loaded, gpu=gpu_, settings=settings), options)
        render.report(result, as_json=json_, show_grid=grid)


@app.command()
def gpus(json_: JsonOpt = False) -> None:
    """List the GPU catalog: memory as the CUDA driver reports it, bandwidth, BF16 rate.

    Example: kvplan gpus
    """
    from planner import render
    from planner.gpus import GPUS

    with user_errors():
        render.gpus(list(GPUS), as_json=json_)


@app.command()
def models(json_: JsonOpt = False) -> None:
    """List the bundled offline catalog: layers, KV heads, head size, attention kinds, bytes/token.

    Example: kvplan models --json
    """
    import planner
    from planner import render

    with user_errors():
        render.models(planner.list_models(), as_json=json_)


PlansArg = Annotated[
    str,
    typer.Argument(
        help="YAML plans file with a `deployments:` list (examples/plans.yaml).",
        show_default=False,
        metavar="PLANS",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json, markdown or junit.")]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to this file (atomically) instead of stdout.",
        show_default=False,
    ),
]


@app.command()
def check(
    plans: PlansArg,
    format_: FormatOpt = "table",
    output: OutputOpt = None,
    offline: OfflineOpt = False,
) -> None:
    """Check every deployment of a plans file against its requirements, for CI.

    Exit code 0: every deployment fits; 1: any fails or cannot be planned; 2: the file is
    invalid (each problem is an `Error: file:line:` line on stderr).

    \b
    Examples:
      kvplan check deploy/plans.yaml
      kvplan check deploy/plans.yaml --format junit -o kvplan.xml
      kvplan check deploy/plans.yaml --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    from planner import render
    from planner.plans import check_file

    with user_errors():
        if format_ not in render.CHECK_FORMATS:
            raise UsageError(f"--format {format_!r}: use one of {', '.join(render.CHECK_FORMATS)}")
        result = check_file(plans, offline=offline or None)
        render.check(result, fmt=format_, output=output)
    raise typer.Exit(result.exit_code)


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


def _gpu_arg(gpu: str | None, gpu_memory: str | None) -> Gpu | None:
    """--gpu / --gpu-memory as a Gpu (memory overrides the catalog's; an A100 stays one)."""
    from planner.gpus import resolve_gpu
    from planner.units import parse_size

    memory = parse_size(gpu_memory, flag="--gpu-memory") if gpu_memory else None
    return resolve_gpu(gpu, memory)


def _serve_settings(
    *,
    engine: str = "vllm",
    kv_cache_dtype: str = "auto",
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory: str | None = None,
    headroom: str | None = None,
    cuda_graph_memory: str | None = None,
    enforce_eager: bool = False,
    **counts: Any,
) -> ServeSettings:
    """The serve flags every command shares, parsed once into :class:`ServeSettings`
    (``--max-model-len -1`` is vLLM's auto-fit)."""
    from planner.deployment import ServeSettings, kv_dtype_for
    from planner.specs import Engine
    from planner.units import parse_size

    graphs = (
        0
        if enforce_eager
        else parse_size(cuda_graph_memory, flag="--cuda-graph-memory")
        if cuda_graph_memory
        else None
    )
    engine_ = Engine.parse(engine)
    return ServeSettings(
        engine=engine_,
        kv_cache_dtype=kv_dtype_for(kv_cache_dtype, engine_),
        max_model_len=None if max_model_len == -1 else max_model_len,
        auto_fit_max_model_len=max_model_len == -1,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_memory_bytes=parse_size(kv_cache_memory, flag="--kv-cache-memory")
        if kv_cache_memory
        else None,
        headroom_bytes=parse_size(headroom, flag="--headroom") if headroom else 0,
        cuda_graph_bytes=graphs,
        **counts,
    )


@app.command()
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
    used unless given here.

    \b
    Examples:
      kvplan diagnose vllm-startup.log --model llama-3.1-8b --gpu rtx-3090
      kvplan diagnose server.log --gpu h100 --json
    """
    from planner import render
    from planner.diagnose import diagnose_file
    from planner.specs import KVDtype

    with user_errors():
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
    from planner import render
    from planner.deployment import Deployment
    from planner.files import write_all_atomic
    from planner.gpus import get_gpu
    from planner.model.load import load_model
    from planner.simulate import build_settings, simulate_model
    from planner.workload import load_workload, trace_lines

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
        base = _serve_settings(
            tp=tp,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory=kv_cache_memory,
        )
        variants, varied = build_settings({k: v for k, v in axes.items() if v}, base)
        gpu_ = get_gpu(gpu) if gpu else None
        load = load_workload(
            workload, seed=seed, num_requests=num_requests, skip_bad_lines=skip_bad_lines
        )
        loaded = load_model(model, revision=revision, offline=offline or None)
        report = simulate_model(
            Deployment(model=loaded, gpu=gpu_, settings=base),
            load,
            variants=variants,
            axes=varied,
            num_gpu_blocks=num_gpu_blocks,
            goal=goal,
        )
        # every output is rendered before any is written: an error leaves no file behind
        outputs: list[tuple[str, str, bytes | str]] = []
        if save_trace:
            outputs.append(("--save-trace", save_trace, "\n".join(trace_lines(load)) + "\n"))
        if output:
            outputs.append(("-o", output, render.to_json(render.simulate_dict(report))))
        if plot:
            outputs.append(("--plot", plot, render.simulate_plot(report, plot)))
        write_all_atomic(outputs)
        render.simulate(report, as_json=json_)


def _size(text: str | None, flag: str) -> int | None:
    from planner.units import parse_size

    return parse_size(text, flag=flag) if text else None


SizeOpt = Annotated[
    str | None,
    typer.Option(
        "--memory-budget",
        help="Bytes the plan may use, e.g. 6GiB (required on CPU).",
        show_default=False,
    ),
]
PlanOpt = Annotated[
    str | None,
    typer.Option(
        "--plan", help="A saved plan (kvplan estimate --json) to prove.", show_default=False
    ),
]


@app.command()
def verify(
    model: Annotated[
        str | None,
        typer.Argument(
            help="Catalog name, Hub id, or local dir / config.json (or use --plan).",
            show_default=False,
            metavar="[MODEL]",
        ),
    ] = None,
    plan: PlanOpt = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="Probe the local CUDA device.")] = False,
    device: Annotated[
        str | None,
        typer.Option("--device", help="cpu or cuda[:N] [default: cpu].", show_default=False),
    ] = None,
    memory_budget: SizeOpt = None,
    gpu_memory_utilization: Annotated[
        float, typer.Option("--gpu-memory-utilization", help="vLLM's share of the GPU.")
    ] = 0.92,
    max_memory: Annotated[
        str | None,
        typer.Option(
            "--max-memory", help="Hard cap on what the probe allocates.", show_default=False
        ),
    ] = None,
    tp: TpOpt = 1,
    kv_cache_dtype: KVDtypeOpt = "auto",
    block_size: BlockOpt = None,
    max_model_len: MaxLenOpt = None,
    max_num_batched_tokens: BatchedTokensOpt = None,
    max_num_seqs: MaxSeqsOpt = None,
    enable_prefix_caching: PrefixOpt = True,
    weights_buffer: Annotated[
        bool, typer.Option("--weights-buffer", help="Occupy the weights as one buffer.")
    ] = False,
    weights_bytes: Annotated[
        str | None,
        typer.Option(
            "--weights-bytes",
            help="Weight bytes to occupy [default: from the config].",
            show_default=False,
        ),
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Allowed shortfall of the frontier, percent.")
    ] = 2.0,
    decode_steps: Annotated[
        int, typer.Option("--decode-steps", help="Decode steps in the planned run.")
    ] = 2,
    hf_cache: Annotated[
        bool,
        typer.Option("--hf-cache", help="Cross-check the byte layout against transformers' cache."),
    ] = False,
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Prove the plan: allocate the paged KV cache next to real-shaped weights, run attention,
    and bisect the largest pool that still fits (exit 3 when it is below the plan).

    Example: kvplan verify qwen3-0.6b --device cpu --memory-budget 3GiB --max-model-len 4096
    """
    import planner
    from planner import render
    from planner.specs import KVDtype

    with user_errors():
        from probes.plan import PlanNotMetError, read_plan

        if hf_cache:
            if model is None:
                raise UsageError("--hf-cache needs MODEL")
            from probes.hfcache import cross_check_spec

            spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
            check = cross_check_spec(spec)
            render.hf_cache(check, as_json=json_)
            if check.status == "mismatch":
                raise PlanNotMetError(
                    f"{spec.name}: the planner's --engine hf bytes differ from transformers' cache"
                )
            return
        from probes.probe import VerifyRequest
        from probes.probe import verify as run_verify

        request = VerifyRequest(
            device=device or ("cuda" if gpu else "cpu"),
            memory_budget_bytes=_size(memory_budget, "--memory-budget"),
            gpu_memory_utilization=gpu_memory_utilization,
            max_memory_bytes=_size(max_memory, "--max-memory"),
            tp=tp,
            kv_cache_dtype=KVDtype.parse(kv_cache_dtype),
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            prefix_caching=enable_prefix_caching,
            weights_bytes=_size(weights_bytes, "--weights-bytes"),
            weights_buffer=weights_buffer,
            tolerance_pct=tolerance,
            decode_steps=decode_steps,
        )
        if plan:
            saved = read_plan(plan)
            request, model = request.with_plan(saved), model or saved.source
        if model is None:
            raise UsageError("give MODEL or --plan FILE")
        spec = planner.load_model_spec(model, revision=revision, offline=offline or None)
        progress = render.trial_progress(enabled=not json_ and render.err_console().is_terminal)
        with progress as on_trial:
            result = run_verify(spec, request, on_trial=on_trial)
        render.verify(result, as_json=json_)
        if not result.passed:
            raise PlanNotMetError(
                f"measured frontier {result.measured.num_gpu_blocks:,} blocks is below the "
                f"plan's {result.predicted.num_gpu_blocks:,} by more than "
                f"{result.tolerance_pct:g}%"
            )


def _redacted_excepthook(
    kind: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    """Print a traceback as Python does, with any Hugging Face token redacted."""
    import traceback

    from planner.secrets import redact

    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def main() -> None:
    """Console entry point: KvplanError -> one line and exit 1; bugs keep their traceback
    (``KVPLAN_DEBUG=1``: every error does), printed without secrets."""
    try:
        try:
            app()
        finally:  # typer installs its own hook when called; ours prints what escapes
            sys.excepthook = _redacted_excepthook
    except KvplanError as exc:  # raised outside a command body (should not happen)
        if os.environ.get("KVPLAN_DEBUG"):
            raise
        from planner.secrets import redact

        print(f"Error: {one_line(redact(str(exc)))}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
