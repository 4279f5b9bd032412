"""``kvplan estimate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from planner.deployment import Deployment
    from planner.plan_types import PlanOptions
    from planner.report import Report
    from planner.simulate.workload import Workload

from planner.cli._options import (
    BatchOpt,
    GpuMemoryOpt,
    GpuOpt,
    GpusOpt,
    GpusPerNodeOpt,
    JsonOpt,
    ModelArg,
    NodesOpt,
    OfflineOpt,
    RevisionOpt,
    ServeArgs,
    SwapSpaceOpt,
    batch_sizes_arg,
    gpu_arg,
    refuse_swap_space,
    serve_options,
    user_errors,
)
from planner.errors import UsageError

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
WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        "-w",
        help="Your traffic: a JSONL trace or YAML spec, as `kvplan simulate` takes. "
        "max_num_seqs (and gpu_memory_utilization) are then recommended from replaying it.",
        show_default=False,
    ),
]
AvgPromptOpt = Annotated[
    int | None,
    typer.Option(
        "--avg-prompt-tokens",
        help="Average prompt length: with --avg-output-tokens, advice from a synthetic "
        "workload of 1,000 requests around these means.",
        show_default=False,
    ),
]
AvgOutputOpt = Annotated[
    int | None,
    typer.Option("--avg-output-tokens", help="Average output length.", show_default=False),
]
TargetUsageOpt = Annotated[
    float,
    typer.Option(
        "--target-kv-usage",
        help="Peak KV usage the workload advice keeps under, with no preemptions.",
    ),
]
WorstCaseOpt = Annotated[
    bool,
    typer.Option(
        "--worst-case",
        help="Recommend the max_num_seqs whose requests all fit at once at max_model_len "
        "(no queueing even when every request is that long).",
    ),
]
EmitOpt = Annotated[
    str | None,
    typer.Option(
        "--emit",
        help="Kubernetes manifests for the plan: k8s (Deployment + Service), kserve, llm-d "
        "(Helm values), lws (LeaderWorkerSet, with --nodes), comma-separated, or all. "
        "Printed as YAML instead of the report, or written with --emit-dir.",
        show_default=False,
    ),
]
EmitDirOpt = Annotated[
    str | None,
    typer.Option(
        "--emit-dir",
        help="Write the --emit files to this folder (made if missing; files of the same name "
        "in it are replaced) and print the report.",
        show_default=False,
    ),
]
PricesOpt = Annotated[
    str | None,
    typer.Option(
        "--prices",
        help="With --gpu any: a JSON price table (planner/data/prices.json's keys: "
        '{"prices": {"h100": {"usd_per_hour": 2.5}}}) instead of the shipped one.',
        show_default=False,
    ),
]
DetailsOpt = Annotated[
    bool,
    typer.Option(
        "--details", help="Also the layer and block-group tables, batch examples, trade-offs."
    ),
]


@serve_options("estimate")
def estimate(
    model: ModelArg,
    serve: ServeArgs,
    swap_space: SwapSpaceOpt = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = 1,
    gpus_per_node: GpusPerNodeOpt = None,
    gpu: GpuOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    grid: GridOpt = False,
    shared_prefix: SharedPrefixOpt = None,
    requests: RequestsOpt = 100,
    avg_tokens: AvgTokensOpt = None,
    batch: BatchOpt = "1,8,32",
    revision: RevisionOpt = None,
    offline: OfflineOpt = False,
    workload: WorkloadOpt = None,
    avg_prompt_tokens: AvgPromptOpt = None,
    avg_output_tokens: AvgOutputOpt = None,
    target_kv_usage: TargetUsageOpt = 0.9,
    worst_case: WorstCaseOpt = False,
    details: DetailsOpt = False,
    prices: PricesOpt = None,
    emit: EmitOpt = None,
    emit_dir: EmitDirOpt = None,
    json_: JsonOpt = False,
) -> None:
    """KV-cache bytes per token and per sequence for MODEL, per GPU rank; with a GPU, what
    vLLM will report at startup, what happens with your settings and what to set.

    The first lines answer: the outcome of your settings (won't start / starts, queues at
    worst case / fits at worst case), KV per token and request, what to set and the command.
    Without traffic (-w, or --avg-prompt-tokens/--avg-output-tokens) your max_num_seqs, or
    vLLM's default, is kept and its worst case stated.

    Exit code 0: vLLM starts with these settings (it may queue at worst case); 1: it won't
    start (weights, one --max-model-len request, or Mamba blocks < --max-num-seqs; try
    --max-model-len -1 to fit the longest that does) or the model cannot be read; 2: a bad flag.

    \b
    Examples:
      kvplan estimate qwen2.5-7b --gpu rtx-4090 -w examples/workloads/chat.yaml
      kvplan estimate llama-3.1-8b --gpu l4 --max-model-len -1
      kvplan estimate Qwen/Qwen3-8B --tp 2 --kv-cache-dtype fp8 \\
        --max-model-len 32768
      kvplan estimate qwen2.5-7b --gpu rtx-4090 --grid
      kvplan estimate qwen3-14b --kv-cache-memory 6.51GiB --max-model-len 32768
      kvplan estimate deepseek-v3 --gpu h200 --tp 8 --gpus 8
      kvplan estimate deepseek-v3 --gpu h200 --dp 8 --enable-expert-parallel \\
        --speculative-config '{"method":"mtp","num_speculative_tokens":1}'
      kvplan estimate llama-3.1-8b --gpu l4 --enable-lora --max-loras 4 \\
        --max-lora-rank 64
      kvplan estimate qwen2.5-7b --gpu l40s --enable-lora \\
        --lora-adapter ./my-adapter
      kvplan estimate llama-3.1-8b --gpu h100 --kv-offloading-size 64
      kvplan estimate qwen2.5-vl-7b-instruct --gpu h100 \\
        --limit-mm-per-prompt '{"image":2,"video":0}'
      kvplan estimate qwen2.5-7b --gpu any --max-model-len 8192 --max-num-seqs 32
      kvplan estimate qwen2.5-7b --gpu l40s --emit k8s | kubectl apply -f -
      kvplan estimate qwen2.5-7b --gpu l40s --emit all --emit-dir deploy/
    """
    from planner.deployment import Deployment
    from planner.errors import DoesNotFitError, WontStartError
    from planner.model.load import load_draft, load_model
    from planner.plan_types import PlanOptions, Refusal
    from planner.recommend import wont_start_error
    from planner.render import estimate as render
    from planner.report import report

    with user_errors():
        from planner.status import quiet

        kinds = _emit_kinds(emit, emit_dir, json_)
        quiet(json_ or (kinds is not None and emit_dir is None))
        refuse_swap_space(swap_space)
        from planner.vllm_rules import refuse_unmodelled

        refuse_unmodelled(serve.given().get("vllm_version"))
        settings = serve.settings()
        options = PlanOptions(
            shared_prefix_tokens=shared_prefix,
            requests=requests,
            avg_tokens=avg_tokens,
            batch_sizes=batch_sizes_arg(batch),
            workload=_load(workload) if workload is not None else None,
            avg_prompt_tokens=avg_prompt_tokens,
            avg_output_tokens=avg_output_tokens,
            target_kv_usage=target_kv_usage,
            worst_case=worst_case,
            gpus=gpus,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
        )
        any_gpu = gpu is not None and gpu.strip().lower() == "any"
        if not any_gpu and prices is not None:
            raise UsageError("--prices goes with --gpu any")
        if any_gpu and (gpu_memory is not None or kinds is not None):
            raise UsageError("--gpu any ranks catalog GPUs: drop --gpu-memory / --emit")
        gpu_ = None if any_gpu else gpu_arg(gpu, gpu_memory)
        loaded = load_model(model, revision=revision, offline=offline or None)
        settings, draft = load_draft(settings, offline=offline or None)
        dep = Deployment(model=loaded, gpu=gpu_, settings=settings, draft=draft)
        if any_gpu:
            _rank(dep, options, settings.max_num_seqs, prices, json_)
            return
        try:
            result = report(dep, options)
        except WontStartError as exc:  # before any plan: its verdict and figures, then the error
            to_stdout = kinds is not None and emit_dir is None  # manifests only, or nothing
            if isinstance(exc.refusal, Refusal) and not to_stdout:
                render.refusal(exc.refusal, as_json=json_)
            raise
        files = _manifests(result, kinds, options) if kinds is not None else None
        if files is not None and emit_dir is None:
            print("---\n".join(files.values()), end="")
            return
        render.report(result, as_json=json_, show_grid=grid, details=details)
        if files is not None and emit_dir is not None:
            from planner.deploy import write_manifests

            write_manifests(files, emit_dir)
        if result.engine is not None:
            e = result.engine
            if result.engine_outcome == "wont_start" and e.engine == "hf":
                raise DoesNotFitError(
                    f"{result.estimate.model} won't start with these settings (transformers): "
                    f"a contiguous cache for a batch of {e.max_running_requests:,} x "
                    f"{result.estimate.max_model_len:,} tokens needs "
                    f"{e.max_running_requests * result.estimate.request_bytes / 2**30:.2f} GiB; "
                    f"{max(e.available_kv_bytes, 0) / 2**30:.2f} GiB holds "
                    f"{int(e.max_concurrency):,}; try --batch {int(e.max_concurrency)} or a "
                    "smaller --max-model-len"
                )
            if result.engine_outcome == "wont_start":
                raise DoesNotFitError(
                    f"{result.estimate.model} won't start with these settings "
                    f"({result.engine.engine}): {result.engine.max_total_tokens:,} KV tokens for "
                    f"{result.estimate.max_model_len:,}-token requests; try a smaller "
                    "--max-model-len, --kv-cache-dtype fp8 or more --tp"
                )
        elif result.plan is not None and result.plan.outcome == "wont_start":
            raise wont_start_error(result.plan)  # after the plan: it says why, then exit 1


def _rank(
    dep: Deployment, options: PlanOptions, concurrency: int | None, prices: str | None, json_: bool
) -> None:
    from planner.advise import synthetic_workload
    from planner.errors import DoesNotFitError
    from planner.ranking import load_prices, rank_gpus
    from planner.render import ranking as render

    table = load_prices(prices)
    work = options.workload
    if work is None and options.avg_prompt_tokens and options.avg_output_tokens:
        length = dep.settings.max_model_len or dep.spec.max_model_len
        work = synthetic_workload(options.avg_prompt_tokens, options.avg_output_tokens, length)
    result = rank_gpus(dep, concurrency=concurrency, workload=work, prices=table)
    render.ranking(result, as_json=json_)
    if not result.rows:
        raise DoesNotFitError(
            f"no priced catalog GPU x 1-8 GPUs runs {result.concurrency:,} requests of "
            f"{result.max_model_len:,} tokens at once: try --kv-cache-dtype fp8, a smaller "
            "--max-model-len or --max-num-seqs"
        )


def _emit_kinds(emit: str | None, emit_dir: str | None, json_: bool) -> list[str] | None:
    if emit is None:
        if emit_dir is not None:
            raise UsageError("--emit-dir needs --emit KINDS (k8s, kserve, llm-d, lws or all)")
        return None
    from planner.deploy import parse_kinds

    if json_ and emit_dir is None:
        raise UsageError("--emit prints YAML; with --json give --emit-dir DIR for the files")
    return parse_kinds(emit)


def _manifests(result: Report, kinds: list[str], options: PlanOptions) -> dict[str, str]:
    from planner.deploy import manifests, target_of

    p = result.plan
    if p is None or result.engine is not None:
        raise UsageError("--emit needs a vLLM plan: name the GPU (--gpu) and keep --engine vllm")
    if p.outcome == "wont_start":
        from planner.recommend import wont_start_error

        raise wont_start_error(p)
    return manifests(target_of(p), kinds)


def _load(path: str) -> Workload:
    from planner.simulate.trace import load_workload

    return load_workload(path)
