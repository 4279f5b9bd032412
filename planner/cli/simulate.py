"""``kvplan simulate``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer

from planner.cli._options import (
    CpuOffloadOpt,
    DpOpt,
    EnableLoraOpt,
    EpOpt,
    JsonOpt,
    KvOffloadBackendOpt,
    KvOffloadSizeOpt,
    LanguageOnlyOpt,
    LimitMMOpt,
    MaxLenOpt,
    MaxLoraRankOpt,
    MaxLorasOpt,
    ModelArg,
    OfflineOpt,
    PrefixOpt,
    RevisionOpt,
    SpeculativeOpt,
    TpOpt,
    _serve_settings,
    _values,
    user_errors,
)
from planner.errors import UsageError

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
    dp: DpOpt = 1,
    enable_expert_parallel: EpOpt = False,
    speculative_config: SpeculativeOpt = None,
    kv_offloading_size: KvOffloadSizeOpt = None,
    kv_offloading_backend: KvOffloadBackendOpt = None,
    enable_lora: EnableLoraOpt = False,
    max_loras: MaxLorasOpt = None,
    max_lora_rank: MaxLoraRankOpt = None,
    cpu_offload_gb: CpuOffloadOpt = None,
    limit_mm_per_prompt: LimitMMOpt = None,
    language_model_only: LanguageOnlyOpt = False,
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
    step_times: Annotated[
        str | None,
        typer.Option(
            "--step-times",
            help="Measured step times (CSV tokens,seconds or JSON; see planner/simulate/"
            "steptimes.py) instead of the roofline model for TTFT/TPOT.",
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
    from planner.deployment import Deployment
    from planner.files import write_all_atomic
    from planner.gpus import get_gpu
    from planner.model.load import load_draft, load_model
    from planner.render import simulate as render
    from planner.render._output import to_json
    from planner.simulate import build_settings, load_workload, simulate_model, trace_lines

    with user_errors():
        from planner.files import check_outputs

        check_outputs(  # before any work: never an input, a device, or one another
            [("--save-trace", save_trace), ("-o", output), ("--plot", plot)],
            inputs=[("the workload (-w)", workload), ("the step times", step_times)],
        )
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
            dp=dp,
            enable_expert_parallel=enable_expert_parallel or None,
            speculative=speculative_config,
            kv_offloading_size=kv_offloading_size,
            kv_offloading_backend=kv_offloading_backend,
            # what else shrinks the pool, as estimate counts it
            enable_lora=enable_lora or None,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            cpu_offload_gb=cpu_offload_gb,
            limit_mm_per_prompt=limit_mm_per_prompt,
            language_model_only=language_model_only or None,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory=kv_cache_memory,
        )
        variants, varied = build_settings({k: v for k, v in axes.items() if v}, base)
        gpu_ = get_gpu(gpu) if gpu else None
        from planner.status import quiet, status

        quiet(json_)
        with status(f"Reading the workload {workload}"):
            load = load_workload(
                workload, seed=seed, num_requests=num_requests, skip_bad_lines=skip_bad_lines
            )
        table = None
        if step_times is not None:
            from planner.simulate.steptimes import load_step_times

            table = load_step_times(step_times)
        loaded = load_model(model, revision=revision, offline=offline or None)
        base, draft = load_draft(base, offline=offline or None)
        variants = [v.but(speculative=base.speculative) for v in variants] if variants else variants
        runs = len(variants) if variants else 1
        with replay_progress(len(load.requests), runs):
            report = simulate_model(
                Deployment(model=loaded, gpu=gpu_, settings=base, draft=draft),
                load,
                variants=variants,
                axes=varied,
                num_gpu_blocks=num_gpu_blocks,
                goal=goal,
                step_times=table,
            )
        # every output is rendered before any is written: an error leaves no file behind
        outputs: list[tuple[str, str, bytes | str]] = []
        if save_trace:
            outputs.append(("--save-trace", save_trace, "\n".join(trace_lines(load)) + "\n"))
        if output:
            outputs.append(("-o", output, to_json(render.simulate_dict(report))))
        if plot:
            outputs.append(("--plot", plot, render.simulate_plot(report, plot)))
        write_all_atomic(outputs)
        render.simulate(report, as_json=json_)


@contextlib.contextmanager
def replay_progress(requests: int, runs: int) -> Iterator[None]:
    """A progress bar of arrived requests on stderr while one setting replays (a spinner for
    a parallel sweep, whose workers run elsewhere); nothing piped or under --json."""
    from planner.simulate import engine
    from planner.status import shown, status

    if runs > 1 or not shown() or requests < 4096:
        with status(
            f"Replaying {requests:,} requests" + (f" under {runs} settings" if runs > 1 else "")
        ):
            yield
        return
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("Replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests started"),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=requests)
        engine.PROGRESS = lambda n: bar.update(task, completed=n)
        try:
            yield
        finally:
            engine.PROGRESS = None
